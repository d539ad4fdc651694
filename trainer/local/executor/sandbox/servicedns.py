"""Services by name from inside the pods' sandboxes (docs/local-plane.md, "Workloads and
Services"): what kube-proxy and cluster DNS give a pod on a cluster, for the Services of the
local plane that have a selector and are not headless.

Each such Service gets an address of its own in 127.96.0.0/16 (stable while the executor
runs): every address in 127.0.0.0/8 is the loopback's, in each sandbox as on the host. A
container's ``/etc/hosts`` names it ``<service>.<namespace>.svc.cluster.local``,
``<service>.<namespace>.svc``, ``<service>.<namespace>`` and, in the Service's own namespace,
``<service>``; the pod's sandbox listens on that address at each of the Service's ports and
carries every connection to a ready endpoint (the EndpointSlices' pods, at random, as
kube-proxy spreads them), reached through the kubelet inside that pod's own sandbox. So
nothing is opened on this host. The Services that exist when a container starts are the
ones it can name (a pod's ``/etc/hosts`` is written then; DNS on a cluster would follow
later changes).
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from trainer.kube.informer import Informer
from trainer.machinery.labels import ready_endpoints

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Dial = Callable[[str, str, int], Awaitable[Streams]]
NETWORK = ipaddress.IPv4Network("127.96.0.0/16")


@dataclass(frozen=True)
class ServiceEntry:
    """One Service as a container sees it: its address, names and ports."""

    namespace: str
    name: str
    address: str
    ports: tuple[int, ...]

    def names(self, pod_namespace: str) -> list[str]:
        svc = f"{self.name}.{self.namespace}.svc"
        out = [f"{svc}.cluster.local", svc, f"{self.name}.{self.namespace}"]
        return [*out, self.name] if pod_namespace == self.namespace else out


def routed(service: dict[str, Any]) -> bool:
    """A Service kube-proxy would route: a selector and a cluster IP (not headless)."""
    spec = service.get("spec") or {}
    return bool(spec.get("selector")) and spec.get("clusterIP") != "None"


class ServiceDirectory:
    """The routed Services of the plane (from the executor's caches) and the way to their pods
    (``dial``: the kubelet's connection into a pod's sandbox)."""

    def __init__(self, services: Informer, slices: Informer, dial: Dial) -> None:
        self.services, self.slices, self.dial = services, slices, dial
        self._addresses: dict[tuple[str, str], str] = {}

    def address(self, namespace: str, name: str) -> str:
        key = (namespace, name)
        if key not in self._addresses:
            # Skips .0 and .1 of the range; 65,000 Services before it would wrap.
            self._addresses[key] = str(
                NETWORK[2 + len(self._addresses) % (NETWORK.num_addresses - 3)]
            )
        return self._addresses[key]

    def entries(self) -> list[ServiceEntry]:
        out = []
        for service in self.services.list():
            if not routed(service):
                continue
            meta = service.get("metadata") or {}
            namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            ports = tuple(
                int(p["port"])
                for p in (service.get("spec") or {}).get("ports") or []
                if isinstance(p.get("port"), int) and (p.get("protocol") or "TCP") == "TCP"
            )
            if ports:
                out.append(ServiceEntry(namespace, name, self.address(namespace, name), ports))
        return out

    async def connect(self, namespace: str, name: str, port: int) -> Streams:
        """A connection to Service ``namespace/name`` on its ``port``: to a ready endpoint.
        OSError (the client sees its connection closed) when there is none."""
        service = self.services.get(namespace, name)
        ready = ready_endpoints(service, self.slices.list(namespace), port)
        if not ready:
            raise OSError(f"no endpoints available for service {namespace}/{name}")
        pod_namespace, pod, target = random.choice(ready)
        return await self.dial(pod_namespace, pod, target)
