"""Where a call to a Service goes, for a webhook registered by ``clientConfig.service``: the
Service's port, its EndpointSlices' ready endpoints and each one's pod and container port,
as kube-proxy would send a connection to the Service's virtual IP (docs/local-plane.md,
"Workloads and Services"). Read from the store; the HTTP layer makes the connection."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from trainer.local.apiserver.store import Store
from trainer.machinery import labels


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
    slices = store.items(("discovery.k8s.io", "endpointslices"), namespace)
    return [PodPort(*target) for target in labels.ready_endpoints(service, slices, port)]


def pick(endpoints: list[PodPort]) -> PodPort:
    """One endpoint, at random, as kube-proxy spreads connections."""
    return random.choice(endpoints)
