"""From a request path and method to what is asked: the resource, namespace, name and
subresource (:class:`Route`) and the Kubernetes verb.

Paths are ``/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{subresource}]]`` and
``/apis/{group}/{version}/...``, with the legacy ``/watch/`` prefix; anything else is a
non-resource path (discovery, OpenAPI, health) and gives None. :data:`SUBRESOURCES` says
which subresources exist and for which kinds; the handler of each verb and subresource is
in :mod:`.handlers`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainer.local.apiserver.errors import APIError, PageNotFound, not_found
from trainer.local.apiserver.resources import Registry, ResourceType
from trainer.local.apiserver.selectors import flag

NOT_FOUND = "the server could not find the requested resource"

# Subresource -> whether a kind serves it. ``finalize`` is served for every kind (as the
# request is routed; the update it makes is a namespace's own).
SUBRESOURCES: dict[str, Callable[[ResourceType], bool]] = {
    "status": lambda rt: rt.status,
    "log": lambda rt: rt.log,
    "finalize": lambda rt: True,
    "token": lambda rt: rt.token,
    "binding": lambda rt: rt.binding,
}
CREATE_ONLY = frozenset({"token"})
"""Subresources that serve only ``create`` (any other verb is 405, as kube-apiserver answers)."""


@dataclass
class Route:
    rt: ResourceType
    namespace: str  # "" for cluster scope or all namespaces
    name: str
    subresource: str
    legacy_watch: bool = False


def route(registry: Registry, path: str) -> Route | None:
    """The resource request ``path`` names; None for a non-resource path; 404 for a
    resource, subresource or scope that is not served."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        if len(parts) < 3:
            return None
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 4:
            return None
        group, version, rest = parts[1], parts[2], parts[3:]
    legacy_watch = False
    if rest and rest[0] == "watch":
        legacy_watch = True
        rest = rest[1:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and group == "":
        # /api/v1/namespaces/{ns}/{plural}... (but /namespaces/{name}/status is the namespace)
        if not (rest[2] in ("status", "finalize") and len(rest) == 3):
            namespace, rest = rest[1], rest[2:]
    elif len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise not_found("", group, path)
    rt = registry.get(group, version, rest[0])
    if rt is None and not any(
        t.builtin and (t.group, t.version) == (group, version) for t in registry
    ):
        raise PageNotFound()  # custom resources' groups: apiextensions' fallthrough
    if rt is None or len(rest) > 3 or (namespace and not rt.namespaced):
        raise APIError(404, "NotFound", NOT_FOUND)
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and (sub not in SUBRESOURCES or (sub == "token" and not rt.token)):
        raise APIError(404, "NotFound", f"{NOT_FOUND} ({sub})")
    if sub and not SUBRESOURCES[sub](rt):
        raise APIError(404, "NotFound", NOT_FOUND)
    return Route(rt, namespace, name, sub, legacy_watch)


def verb(method: str, route: Route, query: dict[str, str]) -> str:
    """The Kubernetes verb of a resource request (what RBAC and the handler table use)."""
    if method == "GET":
        if route.legacy_watch or flag(query.get("watch")):
            return "watch"
        return "get" if route.name else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if route.name else "deletecollection",
    }.get(method, method.lower())
