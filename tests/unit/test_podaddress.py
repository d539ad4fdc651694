"""A node agent's pod network (``trainer node --pod-cidr``):
trainer/local/executor/sandbox/podaddress.py."""

from __future__ import annotations

import ipaddress
import subprocess
import sys

import pytest

from trainer.local.executor.sandbox.podaddress import (
    PodAddresses,
    PodNetworkError,
    check_local,
    parse_network,
    tcp_ports,
)


def test_a_cidr_is_an_ipv4_network_of_two_addresses_or_more() -> None:
    assert parse_network("10.88.0.7/24") == ipaddress.ip_network("10.88.0.0/24")
    for bad, why in [
        ("nonsense", "does not appear to be an IPv4 or IPv6 network"),
        ("fd00::/64", "an IPv4 network of at least two addresses"),
        ("10.0.0.1/32", "an IPv4 network of at least two addresses"),
    ]:
        with pytest.raises(PodNetworkError, match=why) as err:
            parse_network(bad)
        assert str(err.value).startswith(f"--pod-cidr {bad!r}")


def test_a_network_not_routed_here_is_refused_with_the_route_to_add() -> None:
    check_local(parse_network("127.0.0.0/29"))  # loopback's own
    with pytest.raises(PodNetworkError, match=r"ip route add local 198\.18\.7\.0/24 dev lo"):
        check_local(parse_network("198.18.7.0/24"))


def test_each_pod_keeps_its_address_until_released() -> None:
    addresses = PodAddresses(parse_network("10.0.0.0/30"))  # two host addresses
    assert [addresses.assign("a"), addresses.assign("b"), addresses.assign("a")] == [
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.1",
    ]
    with pytest.raises(OSError, match=r"no address left in pod network 10\.0\.0\.0/30"):
        addresses.assign("c")
    addresses.release("a")
    assert addresses.assign("c") == "10.0.0.1"


def test_the_published_ports_are_the_declared_tcp_ones() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "ports": [{"containerPort": 9000}]}],
            "containers": [
                {
                    "name": "a",
                    "ports": [{"containerPort": 9443}, {"containerPort": 53, "protocol": "UDP"}],
                },
                {"name": "b", "ports": [{"containerPort": 9443, "protocol": "TCP"}, {"name": "x"}]},
            ],
        }
    }
    assert tcp_ports(pod) == [9000, 9443]


def test_the_cli_refuses_a_bad_pod_cidr_in_one_line() -> None:
    argv = [sys.executable, "-m", "trainer.cli.main", "node", "--pod-cidr", "10.0.0.1/32"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr == (
        "error: --pod-cidr '10.0.0.1/32': an IPv4 network of at least two addresses is needed\n"
    )
