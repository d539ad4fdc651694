"""Resource types the server serves: built-in kinds and those CRDs register."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.machinery.openapi import RuleMemo

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass
class ResourceType:
    """One served resource (``group/version``, ``plural``)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status: bool = False
    """Has a ``/status`` subresource (status changes only through it)."""
    log: bool = False
    """Has a ``/log`` subresource (pods)."""
    builtin: bool = True
    """Built-in kinds accept strategic merge patches; custom resources answer 415."""
    schema: dict[str, Any] | None = None
    """openAPIV3Schema of a custom resource (structural validation, defaults, pruning)."""
    columns: list[dict[str, Any]] = field(default_factory=list)
    """additionalPrinterColumns for Table responses."""
    crd_name: str | None = None
    storage_version: str | None = None
    merge_keys: Mapping[str, str] = field(default_factory=dict)
    """Strategic-merge / SSA list-map keys by field name, for built-in kinds."""
    verbs: tuple[str, ...] = ALL_VERBS
    """What discovery says the resource supports (``create`` only for a review)."""
    token: bool = False
    """Has a ``/token`` subresource (service accounts: TokenRequest)."""
    binding: bool = False
    """Has a ``/binding`` subresource (pods: a scheduler assigns a pod to a node)."""
    rule_memo: RuleMemo | None = field(default=None, repr=False, compare=False)
    """CEL rule outcomes for ``schema`` (a CRD version's own; dropped with it)."""

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: group and plural (versions of one resource share storage)."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def discovery(self) -> list[dict[str, Any]]:
        """Entries of the group/version resource list (the resource and its subresources)."""
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        out = [main]
        if self.status:
            out.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if self.token:
            out.append(
                {
                    "name": f"{self.plural}/token",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "authentication.k8s.io",
                    "version": "v1",
                    "kind": "TokenRequest",
                    "verbs": ["create"],
                }
            )
        if self.binding:
            out.append(
                {
                    "name": f"{self.plural}/binding",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
        if self.log:
            out.append(
                {
                    "name": f"{self.plural}/log",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get"],
                }
            )
        return out


class Registry:
    """Resource types by group/version/plural, with lookups by kind and short name."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}

    def add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove_crd(self, crd_name: str) -> list[ResourceType]:
        gone = [rt for rt in self._types.values() if rt.crd_name == crd_name]
        for rt in gone:
            del self._types[(rt.group, rt.version, rt.plural)]
        return gone

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_key(self, group: str, plural: str) -> ResourceType | None:
        """Any served version of a resource (the storage version when there is one)."""
        found = [rt for (g, _, p), rt in self._types.items() if (g, p) == (group, plural)]
        for rt in found:
            if rt.storage_version in (None, rt.version):
                return rt
        return found[0] if found else None

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if (rt.group, rt.version, rt.kind) == (group, version, kind):
                return rt
        return None

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(sorted(self._types.values(), key=lambda r: (r.group, r.version, r.plural)))

    def group_versions(self) -> dict[str, list[str]]:
        """Versions served per group ("" is the core group)."""
        out: dict[str, list[str]] = {}
        for rt in self:
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out


def served_copy(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored object in the served API version."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = rt.api_version
    out["kind"] = rt.kind
    return out


def served(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """A stored object in the served API version, for a response serialized at once.

    Stored objects are never changed in place (writes store a new dict), so a response can be
    encoded from the stored object itself instead of a deep copy: it is returned as is when it
    already has the served apiVersion and kind (as written objects do), else as a shallow copy
    with them (the same JSON as :func:`served_copy`). The result may be the stored object:
    never change it, and serialize it before the next ``await``.
    """
    if obj.get("apiVersion") == rt.api_version and obj.get("kind") == rt.kind:
        return obj
    return {**obj, "apiVersion": rt.api_version, "kind": rt.kind}
