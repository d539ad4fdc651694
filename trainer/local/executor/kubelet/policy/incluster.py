"""In-cluster configuration for the local plane's pods (docs/local-plane.md, "In-cluster
configuration"): what lets a client inside a pod (client-go's ``rest.InClusterConfig``,
kubernetes' Python ``load_incluster_config``, this project's own ``trainer controller``) find
and trust the API server and authenticate as the pod's service account.

On a cluster the ServiceAccount admission plugin adds a ``kube-api-access-<random>``
projected volume to every pod whose token is automounted (a bound service-account token,
ConfigMap ``kube-root-ca.crt``'s ``ca.crt`` and the namespace) mounted at
:data:`SA_PATH` in every container, and the kubelet sets ``KUBERNETES_SERVICE_HOST`` /
``_PORT``. Here the kubelet adds the same volume when it starts the pod (:func:`with_api_access`)
rather than the API server at creation, so the stored pods of a cluster-scale simulation stay
as small as they were written; everything else is as on a cluster. Pure."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
VOLUME = "kube-api-access-local"
TOKEN_SECONDS = 3607
"""What the ServiceAccount admission plugin asks for (an hour, plus 7 s to tell it apart)."""


def automount(pod: Mapping[str, Any], service_account: Mapping[str, Any] | None) -> bool:
    """Whether the pod gets the API access volume: the pod's
    ``automountServiceAccountToken`` when set, else its service account's, else yes. A pod
    whose service account does not exist gets none (a cluster refuses to create it; here it
    runs as before, without API access)."""
    spec = pod.get("spec") or {}
    if spec.get("automountServiceAccountToken") is not None:
        return bool(spec["automountServiceAccountToken"])
    if service_account is None:
        return False
    value = service_account.get("automountServiceAccountToken")
    return True if value is None else bool(value)


def _mounted(container: Mapping[str, Any]) -> bool:
    return any(
        str(m.get("mountPath") or "").rstrip("/") == SA_PATH
        for m in container.get("volumeMounts") or []
    )


def with_api_access(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` with the API access volume, mounted read-only at :data:`SA_PATH` in
    each container that has no mount there yet."""
    out = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    containers = [c for group in ("initContainers", "containers") for c in spec.get(group) or []]
    needing = [c for c in containers if not _mounted(c)]
    if not needing:
        return out
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {
            "name": VOLUME,
            "projected": {
                "defaultMode": 0o644,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            # Optional here (not on a cluster, whose root CA publisher always
                            # made it): a kubelet run beside an API server that publishes
                            # none still starts pods, whose in-cluster clients then lack ca.crt.
                            "optional": True,
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                }
                            ]
                        }
                    },
                ],
            },
        },
    ]
    for container in needing:
        container["volumeMounts"] = [
            *(container.get("volumeMounts") or []),
            {"name": VOLUME, "mountPath": SA_PATH, "readOnly": True},
        ]
    return out


def service_env(host: str, port: int) -> dict[str, str]:
    """The ``kubernetes`` Service's variables the kubelet gives every container: the API
    server's address as the pods reach it (inside a sandbox, its forwarded port)."""
    url = f"tcp://{host}:{port}"
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": url,
        prefix: url,
        f"{prefix}_PROTO": "tcp",
        f"{prefix}_PORT": str(port),
        f"{prefix}_ADDR": host,
    }


def bind_for(mounts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The bind mount a container needs so that the token, CA and namespace are at the
    standard path itself (clients read that path, not an environment variable): (host
    directory, :data:`SA_PATH`) when the container mounts something there."""
    host = mounts.get(SA_PATH)
    return ((host, SA_PATH),) if host else ()
