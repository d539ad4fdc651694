"""Where a call to a Service goes, for a webhook registered by ``clientConfig.service``: the
Service's port, its EndpointSlices' ready endpoints and each one's pod and container port,
as kube-proxy would send a connection to the Service's virtual IP (docs/local-plane.md,
"Workloads and Services"). Read from the store; the HTTP layer makes the connection."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from trainer.local.apiserver.store import Store
from trainer.machinery.labels import SERVICE_NAME


@dataclass(frozen=True)
class PodPort:
    """One endpoint: a pod and the container port a Service port sends to."""

    namespace: str
    pod: str
    port: int


def service_url(ref: dict[str, Any]) -> tuple[str, str]:
    """(URL, TLS server name) of a webhook's ``clientConfig.service``: ``https://<name>.
    <namespace>.svc:<port><path>``, the name the webhook's certificate must cover."""
    host = f"{ref.get('name', '')}.{ref.get('namespace', '')}.svc"
    port = int(ref.get("port") or 443)
    path = str(ref.get("path") or "")
    return f"https://{host}:{port}{path}", host


def ready_endpoints(store: Store, namespace: str, name: str, port: int) -> list[PodPort]:
    """The ready endpoints of Service ``namespace/name`` on its port ``port``."""
    service = store.get(("", "services"), namespace, name)
    if service is None:
        return []
    spec_port = next(
        (p for p in (service.get("spec") or {}).get("ports") or [] if p.get("port") == port),
        None,
    )
    if spec_port is None:
        return []
    port_name = spec_port.get("name", "")
    out: list[PodPort] = []
    for slice_ in store.items(("discovery.k8s.io", "endpointslices"), namespace):
        if ((slice_.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME) != name:
            continue
        number = next(
            (p.get("port") for p in slice_.get("ports") or [] if p.get("name", "") == port_name),
            None,
        )
        if number is None:
            continue
        for ep in slice_.get("endpoints") or []:
            ref = ep.get("targetRef") or {}
            if (ep.get("conditions") or {}).get("ready") and ref.get("kind") == "Pod":
                out.append(
                    PodPort(str(ref.get("namespace") or namespace), str(ref["name"]), int(number))
                )
    return out


def pick(endpoints: list[PodPort]) -> PodPort:
    """One endpoint, at random, as kube-proxy spreads connections."""
    return random.choice(endpoints)
