"""The ports a node gives the sshd of MPI pods that come without the plane's port map (pods of
a real JobSet controller: trainer/local/executor/sandbox/sshnode.py)."""

from __future__ import annotations

import json
import random
from typing import Any

from trainer.local.executor.policy.sshports import LOCAL_SSH, own_port
from trainer.local.executor.sandbox.ports import PortAllocator
from trainer.local.executor.sandbox.sshnode import NodeSSHPorts

SSHD = {
    "name": "node",
    "command": ["/usr/sbin/sshd"],
    "args": ["-De"],
    "readinessProbe": {"tcpSocket": {"port": 2222}},
}


def pod(
    hostname: str, jobset: str = "mpi", *, sshd: bool = True, ns: str = "team"
) -> dict[str, Any]:
    container = SSHD if sshd else {"name": "node", "command": ["mpirun", "hostname"]}
    return {
        "metadata": {
            "name": f"{hostname}-x1",
            "namespace": ns,
            "labels": {"jobset.sigs.k8s.io/jobset-name": jobset},
        },
        "spec": {"hostname": hostname, "subdomain": jobset, "containers": [container]},
    }


def ssh_map(p: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(p["metadata"]["annotations"][LOCAL_SSH]))


def ports() -> NodeSSHPorts:
    return NodeSSHPorts(PortAllocator((40000, 40999), rng=random.Random(7)))


def test_each_node_pod_gets_a_port_of_its_own_and_the_launcher_knows_them_all() -> None:
    node = ports()
    first = node.overlay(pod("mpi-node-0-0"), [])
    second = node.overlay(pod("mpi-node-0-1"), [first])
    launcher = node.overlay(pod("mpi-launcher-0-0", sshd=False), [first, second])
    one, two = own_port(first, "mpi-node-0-0"), own_port(second, "mpi-node-0-1")
    assert list(one) == list(two) == [2222] and one[2222] != two[2222]
    hosts = ssh_map(launcher)["hosts"]
    assert (hosts["mpi-node-0-0"], hosts["mpi-node-0-1"]) == (one[2222], two[2222])
    # Seen again (every watch event), a pod keeps its port.
    assert own_port(node.overlay(pod("mpi-node-0-0"), [second, launcher]), "mpi-node-0-0") == one


def test_pods_with_a_map_or_of_no_mpi_jobset_are_left_as_they_are() -> None:
    node = ports()
    torch = pod("ddp-node-0-0", "ddp", sshd=False)
    assert node.overlay(torch, []) is torch
    planned = pod("mpi-node-0-0")
    planned["metadata"]["annotations"] = {LOCAL_SSH: '{"port": 22, "hosts": {}}'}
    assert node.overlay(planned, []) is planned
    loose = pod("lonely")
    del loose["metadata"]["labels"]
    assert node.overlay(loose, []) is loose


def test_jobsets_of_the_same_name_in_two_namespaces_do_not_share_ports() -> None:
    node = ports()
    a = node.overlay(pod("mpi-node-0-0", ns="a"), [])
    b = node.overlay(pod("mpi-node-0-0", ns="b"), [a])
    assert own_port(a, "mpi-node-0-0") != own_port(b, "mpi-node-0-0")
    assert list(ssh_map(b)["hosts"]) == ["mpi-node-0-0"]


def test_ports_go_back_once_the_last_pod_of_the_jobset_is_gone() -> None:
    allocator = PortAllocator((40000, 40999), rng=random.Random(7))
    node = NodeSSHPorts(allocator)
    first = node.overlay(pod("mpi-node-0-0"), [])
    second = node.overlay(pod("mpi-node-0-1"), [first])
    node.release(first, [second])
    assert len(allocator.taken) == 2  # a pod of the JobSet is still here
    node.release(second, [])
    assert allocator.taken == {}
