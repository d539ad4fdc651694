"""What a cluster's control plane creates on its own, which the local API server writes itself: the
system namespaces (kube-apiserver's), and in every namespace the ``default`` ServiceAccount (the
service-account controller's) and ConfigMap ``kube-root-ca.crt`` (kube-controller-manager's root
CA publisher: how in-cluster clients verify the API server; docs/local-plane.md, "In-cluster
configuration")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from trainer.local.apiserver.store import Store

ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CreateUnadmitted = Callable[[str, str, dict[str, Any]], dict[str, Any]]


def ensure_system_namespaces(store: Store, create: CreateUnadmitted) -> None:
    """The system namespaces, and every namespace's ``default`` ServiceAccount (a state file
    may hold namespaces written before the server wrote ServiceAccounts)."""
    for name in SYSTEM_NAMESPACES:
        if store.get(("", "namespaces"), "", name) is None:
            create("v1", "Namespace", {"metadata": {"name": name}})
    for namespace in store.items(("", "namespaces"), None):
        ensure_default_service_account(store, create, namespace["metadata"]["name"])


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


def publish_root_ca(store: Store, create: CreateUnadmitted, ca_pem: str) -> None:
    """``kube-root-ca.crt`` holding ``ca_pem`` in every namespace."""
    for namespace in list(store.items(("", "namespaces"))):
        ensure_root_ca(store, create, namespace["metadata"]["name"], ca_pem)
