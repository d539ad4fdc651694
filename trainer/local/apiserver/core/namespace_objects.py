"""What a cluster's controllers put into every namespace, which the local API server writes
itself: the ``default`` ServiceAccount (the service-account controller's) and ConfigMap
``kube-root-ca.crt`` (kube-controller-manager's root CA publisher: how in-cluster clients
verify the API server; docs/local-plane.md, "In-cluster configuration")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from trainer.local.apiserver.store import Store

ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
CreateUnadmitted = Callable[[str, str, dict[str, Any]], dict[str, Any]]


def ensure_default_service_account(store: Store, create: CreateUnadmitted, namespace: str) -> None:
    """The namespace's ``default`` ServiceAccount (pods run as it unless they name another)."""
    if store.get(("", "serviceaccounts"), namespace, "default") is None:
        create("v1", "ServiceAccount", {"metadata": {"name": "default", "namespace": namespace}})


def ensure_root_ca(store: Store, create: CreateUnadmitted, namespace: str, ca_pem: str) -> None:
    """The namespace's ``kube-root-ca.crt`` (key ``ca.crt``) holding ``ca_pem``; nothing
    before the server has a CA (``ca_pem`` empty)."""
    if not ca_pem:
        return
    current = store.get(("", "configmaps"), namespace, ROOT_CA_CONFIG_MAP)
    if current is not None and (current.get("data") or {}).get("ca.crt") == ca_pem:
        return
    if current is None:
        body = {"metadata": {"name": ROOT_CA_CONFIG_MAP, "namespace": namespace}}
        create("v1", "ConfigMap", {**body, "data": {"ca.crt": ca_pem}})
        return
    updated = copy.deepcopy(current)
    updated["data"] = {"ca.crt": ca_pem}
    store.put(("", "configmaps"), updated, current)
