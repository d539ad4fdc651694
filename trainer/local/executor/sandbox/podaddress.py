"""Pod addresses of a node agent given a pod network (``trainer node --pod-cidr``;
docs/local-plane.md, "A node of a real cluster").

On the plane every pod reports 127.0.0.1 and the plane's API server reaches a pod's ports
through the kubelet. kube-apiserver reaches a webhook or an aggregated API at the address an
EndpointSlice holds, which the endpoint-slice controller takes from the pod's ``podIP`` and
which may not be a loopback address. So, given a network whose addresses are local to this
host (``ip route add local <cidr> dev lo``), the node gives each pod in a network sandbox an
address of its own, reports it as the pod's IP, and publishes each TCP ``containerPort`` the
pod declares at that address: a connection there is carried into the pod's sandbox, to the
port the container listens on, as a CNI plugin and the pod's own network namespace would.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterator, Mapping
from typing import Any


class PodNetworkError(Exception):
    """The pod network cannot be used here: one line saying why and what to do."""


def parse_network(cidr: str) -> ipaddress.IPv4Network:
    """``cidr`` as an IPv4 network of at least two addresses, else :class:`PodNetworkError`."""
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError as exc:
        raise PodNetworkError(f"--pod-cidr {cidr!r}: {exc} (an IPv4 CIDR: 10.88.0.0/24)") from None
    if not isinstance(network, ipaddress.IPv4Network) or network.num_addresses < 2:
        raise PodNetworkError(
            f"--pod-cidr {cidr!r}: an IPv4 network of at least two addresses is needed"
        )
    return network


def check_local(network: ipaddress.IPv4Network) -> None:
    """:class:`PodNetworkError` unless this host may listen on ``network``'s addresses."""
    first = str(next(network.hosts()))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((first, 0))
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                why = f"--pod-cidr {network}: cannot listen on {first}: {exc}"
                raise PodNetworkError(why) from None
            raise PodNetworkError(
                f"--pod-cidr {network}: its addresses are not this host's; route them here "
                f"first (as root: ip route add local {network} dev lo)"
            ) from None


class PodAddresses:
    """The addresses of ``network`` given to the pods this node runs, one per pod uid."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self.network = network
        self._by_uid: dict[str, str] = {}

    def _free(self) -> Iterator[str]:
        taken = set(self._by_uid.values())
        return (str(a) for a in self.network.hosts() if str(a) not in taken)

    def assign(self, uid: str) -> str:
        """The address of pod ``uid`` (the same one until :meth:`release`); OSError when the
        network has none left."""
        if uid not in self._by_uid:
            address = next(self._free(), None)
            if address is None:
                raise OSError(errno.EADDRNOTAVAIL, f"no address left in pod network {self.network}")
            self._by_uid[uid] = address
        return self._by_uid[uid]

    def release(self, uid: str) -> None:
        self._by_uid.pop(uid, None)


def tcp_ports(pod: Mapping[str, Any]) -> list[int]:
    """The TCP ``containerPort``s the pod's containers declare, each once, in order."""
    ports: list[int] = []
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in container.get("ports") or []:
            number = port.get("containerPort")
            tcp = (port.get("protocol") or "TCP") == "TCP"
            if tcp and isinstance(number, int) and number not in ports:
                ports.append(number)
    return ports
