"""CustomResourceDefinitions: validating them, serving what they define, and their status."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from trainer.local.apiserver.resources import ResourceType
from trainer.machinery.errors import INVALID, REQUIRED, FieldError
from trainer.machinery.openapi import RuleMemo, compile_rules

if TYPE_CHECKING:
    from trainer.local.apiserver.resources import Registry
    from trainer.local.apiserver.store import Store


def validate_crd(obj: dict[str, Any]) -> list[FieldError]:
    """The checks the apiextensions API makes that matter for serving a CRD."""
    errors: list[FieldError] = []
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    name = (obj.get("metadata") or {}).get("name", "")
    for key, path in (("group", "spec.group"), ("scope", "spec.scope")):
        if not spec.get(key):
            errors.append(FieldError(path, REQUIRED, ""))
    for key in ("plural", "kind"):
        if not names.get(key):
            errors.append(FieldError(f"spec.names.{key}", REQUIRED, ""))
    if names.get("plural") and group and name != f"{names['plural']}.{group}":
        errors.append(
            FieldError("metadata.name", INVALID, 'must be spec.names.plural+"."+spec.group', name)
        )
    if spec.get("scope") and spec["scope"] not in ("Namespaced", "Cluster"):
        errors.append(
            FieldError(
                "spec.scope", INVALID, 'supported values: "Cluster", "Namespaced"', spec["scope"]
            )
        )
    versions = spec.get("versions") or []
    if not versions:
        errors.append(
            FieldError(
                "spec.versions", REQUIRED, "must have exactly one version marked as storage version"
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            FieldError(
                "spec.versions",
                INVALID,
                "must have exactly one version marked as storage version",
                "array",
            )
        )
    for i, v in enumerate(versions):
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            errors.append(
                FieldError(
                    f"spec.versions[{i}].schema.openAPIV3Schema", REQUIRED, "schemas are required"
                )
            )
        elif schema.get("type") != "object":
            errors.append(
                FieldError(
                    f"spec.versions[{i}].schema.openAPIV3Schema.type",
                    REQUIRED,
                    'must be "object" at the root',
                )
            )
    return errors


def resource_types(obj: dict[str, Any]) -> list[ResourceType]:
    """One served ResourceType per served version of the CRD."""
    spec = obj["spec"]
    names = spec["names"]
    storage = next((v["name"] for v in spec["versions"] if v.get("storage")), None)
    out = []
    for v in spec["versions"]:
        if not v.get("served", True):
            continue
        compile_rules((v.get("schema") or {}).get("openAPIV3Schema"))  # now, not on a write
        out.append(
            ResourceType(
                group=spec["group"],
                version=v["name"],
                kind=names["kind"],
                plural=names["plural"],
                namespaced=spec["scope"] == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status="status" in (v.get("subresources") or {}),
                builtin=False,
                schema=copy.deepcopy(
                    (v.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}
                ),
                columns=copy.deepcopy(v.get("additionalPrinterColumns") or []),
                crd_name=obj["metadata"]["name"],
                storage_version=storage,
                rule_memo=RuleMemo(),
            )
        )
    return out


def on_crd_write(registry: Registry, store: Store, now: str, obj: dict[str, Any]) -> None:
    """(Re)serve the resources of a created or updated CRD and mark it Established (``now``:
    the conditions' transition time)."""
    name = obj["metadata"]["name"]
    if obj["metadata"].get("deletionTimestamp"):
        return
    registry.remove_crd(name)
    for rt in resource_types(obj):
        registry.add(rt)
    status = obj.get("status") or {}
    wanted_conditions = [
        _condition("NamesAccepted", "NoConflicts", "no conflicts found", now),
        _condition(
            "Established", "InitialNamesAccepted", "the initial names have been accepted", now
        ),
    ]
    names = obj["spec"]["names"]
    accepted = dict(names)
    accepted.setdefault("singular", names["kind"].lower())
    accepted.setdefault("listKind", f"{names['kind']}List")
    if status.get("acceptedNames") == accepted and [
        c.get("type") for c in status.get("conditions") or []
    ] == ["NamesAccepted", "Established"]:
        return
    crd_type = registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    assert crd_type is not None
    new = copy.deepcopy(obj)
    new["status"] = {
        "acceptedNames": accepted,
        "conditions": wanted_conditions,
        "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
    }
    store.put(crd_type.key, new, obj)


def on_crd_delete(registry: Registry, store: Store, obj: dict[str, Any]) -> None:
    """Stop serving the CRD's resources and delete their objects."""
    gone = registry.remove_crd(obj["metadata"]["name"])
    for key in {rt.key for rt in gone}:
        if registry.by_key(*key) is None:
            store.drop_resource(key)


def _condition(type_: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
