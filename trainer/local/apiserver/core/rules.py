"""The storage rules of a write, as pure functions of the old and new object.

:class:`~trainer.local.apiserver.core.storage.Storage` sequences a write (check the body,
admit it, compare resourceVersions, store it, notify); the decisions it makes on the way live
here, with no store, clock or I/O: what a write to a subresource keeps of the stored object,
which server-set metadata a client cannot change, when ``generation`` moves, when a write is a
no-op, which finalizers a deletion policy sets, delete preconditions, how a non-apply patch
applies, and the ``continue`` token of a paged list; and :class:`WriteOptions`, how a client
asks for a write.
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass, field
from typing import Any

from trainer.local.apiserver.errors import (
    APIError,
    bad_request,
    conflict,
    invalid,
    unsupported_media_type,
)
from trainer.local.apiserver.patch import (
    JSON,
    MERGE,
    STRATEGIC,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from trainer.local.apiserver.resources import ResourceType
from trainer.machinery.errors import FORBIDDEN, INVALID, REQUIRED, UNSUPPORTED, FieldError

MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
# SimpleNameGenerator's alphabet (no vowels, no look-alike digits).
GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# Metadata the server sets at creation and a client never changes afterwards.
KEPT_ON_UPDATE = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
)
# Metadata a client cannot set at creation.
DROPPED_ON_CREATE = (
    "uid",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


@dataclass(frozen=True)
class WriteOptions:
    """How a client asks for a write, the same for create, update, patch and apply: its field
    manager (``fieldManager``), ``dryRun=All``, ``fieldValidation`` and, for an apply patch,
    ``force``. ``warnings`` is where the write puts the warnings the client gets back: the
    one part that changes, a list the caller reads once the write is done."""

    manager: str = ""
    dry_run: bool = False
    field_validation: str = "Strict"
    force: bool = False
    warnings: list[str] = field(default_factory=list)


class StaleWrite(APIError):
    """The stored object changed while a write was being admitted."""

    def __init__(self, plural: str, group: str, name: str) -> None:
        err = conflict(plural, group, name, MODIFIED)
        super().__init__(err.code, err.reason, err.message, err.details)


def own_metadata(meta: Any) -> Any:
    """A copy of an object's metadata that the write path may change in place (the
    resourceVersion, generation, finalizers, labels...), sharing only ``managedFields``, which
    is only ever replaced whole."""
    if not isinstance(meta, dict):
        return copy.deepcopy(meta)
    return {k: v if k == "managedFields" else copy.deepcopy(v) for k, v in meta.items()}


def for_subresource(
    rt: ResourceType,
    old: dict[str, Any],
    new: dict[str, Any],
    subresource: str,
    *,
    applied: bool,
) -> dict[str, Any]:
    """What an update of ``subresource`` stores: a write to ``status`` changes only the
    status (and an applier's managedFields entry), ``finalize`` only a namespace's
    ``spec.finalizers``; a write to the main resource never changes the status."""
    if subresource == "status":
        # The stored object's spec and the rest, shared: nothing below the metadata is
        # changed in place on the way to the store (see own_metadata).
        merged = {**old, "metadata": own_metadata(old.get("metadata"))}
        if "status" in new:
            merged["status"] = new["status"]
        else:
            merged.pop("status", None)
        if applied:  # keep the status applier's managedFields entry
            fields = new["metadata"].get("managedFields")
            if fields is None:
                merged["metadata"].pop("managedFields", None)
            else:
                merged["metadata"]["managedFields"] = fields
        return merged
    if subresource == "binding":  # the node and PodScheduled together (bound_pod)
        return new
    if subresource == "finalize" and rt.kind == "Namespace":
        merged = copy.deepcopy(old)
        merged["spec"] = {
            **(old.get("spec") or {}),
            "finalizers": (new.get("spec") or {}).get("finalizers") or [],
        }
        return merged
    if rt.status and "status" in old:
        new["status"] = copy.deepcopy(old["status"])
    elif rt.status:
        new.pop("status", None)
    return new


def allows_unconditional_update(rt: ResourceType) -> bool:
    """Whether an update without ``metadata.resourceVersion`` overwrites the stored object
    (``AllowUnconditionalUpdate`` of the kind's strategy): built-in kinds yes; custom
    resources and CustomResourceDefinitions no."""
    return rt.builtin and rt.kind != "CustomResourceDefinition"


def require_resource_version(rt: ResourceType, name: str, rv: Any) -> None:
    """422 for an update without a resourceVersion of a kind that needs one, worded as the
    generic registry's ``Store.Update`` words it (the resource, not the kind, names it)."""
    if rv or allows_unconditional_update(rt):
        return
    error = FieldError("metadata.resourceVersion", INVALID, "0x0: must be specified for an update")
    raise invalid(rt.plural, rt.group, name, [error])


FIELD_IMMUTABLE = "field is immutable"


def immutable_meta_errors(old_meta: dict[str, Any], meta: dict[str, Any]) -> list[FieldError]:
    """``ValidateObjectMetaAccessorUpdate``'s check of the uid: a write may leave it out (the
    stored one is kept) but not change it."""
    uid = meta.get("uid")
    if uid and uid != old_meta.get("uid"):
        return [FieldError("metadata.uid", INVALID, FIELD_IMMUTABLE, uid)]
    return []


STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})


def finalizer_warnings(meta: dict[str, Any], old_meta: dict[str, Any] | None) -> list[str]:
    """The warnings kube-apiserver (1.32) returns when a custom resource gains a finalizer
    whose name has no ``domain/`` path and is not a standard one (finalizers it already had
    are not warned about again)."""
    added = set(meta.get("finalizers") or [])
    if old_meta is not None:
        added -= set(old_meta.get("finalizers") or [])
    return [
        f'metadata.finalizers: "{name}": prefer a domain-qualified finalizer name including '
        "a path (/) to avoid accidental conflicts with other finalizer writers"
        for name in sorted(added)
        if "/" not in name and name not in STANDARD_FINALIZERS
    ]


def keep_server_fields(rt: ResourceType, old_meta: dict[str, Any], meta: dict[str, Any]) -> None:
    """Put back in ``meta`` what the server set and a client cannot change (in place)."""
    for key in KEPT_ON_UPDATE:
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    if rt.namespaced:
        meta["namespace"] = old_meta.get("namespace", "")


def spec_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether anything but metadata and status changed (``generation`` moves then)."""
    strip = ("metadata", "status", "apiVersion", "kind")
    return {k: v for k, v in old.items() if k not in strip} != {
        k: v for k, v in new.items() if k not in strip
    }


def same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a write changes nothing (managedFields times and the resourceVersion aside)."""

    def norm(o: dict[str, Any]) -> dict[str, Any]:
        meta = {
            k: v for k, v in o["metadata"].items() if k not in ("resourceVersion", "managedFields")
        }
        fields = [
            {k: v for k, v in e.items() if k != "time"}
            for e in o["metadata"].get("managedFields") or []
        ]
        return {**o, "metadata": meta, "_fields": fields}

    return norm(old) == norm(new)


def finalizer_error(added: list[str]) -> FieldError:
    """The 422 cause when finalizers are added to an object being deleted."""
    return FieldError(
        "metadata.finalizers",
        FORBIDDEN,
        "no new finalizers can be added if the object is being deleted, found new finalizers "
        + json.dumps(added),
    )


def check_preconditions(
    rt: ResourceType, name: str, meta: dict[str, Any], pre: dict[str, Any]
) -> None:
    """A delete's preconditions (uid, resourceVersion): 409 when one does not hold."""
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise conflict(
            rt.plural,
            rt.group,
            name,
            f"Precondition failed: UID in precondition: {pre['uid']}, "
            f"UID in object meta: {meta.get('uid')}",
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        raise conflict(rt.plural, rt.group, name, "Precondition failed: resourceVersion mismatch")


def deletion_finalizers(rt: ResourceType, policy: str, finalizers: list[str]) -> list[str]:
    """The finalizers an object keeps while it is deleted with ``policy``. The policy's
    finalizer replaces the other one: both are never set together."""
    finalizers = list(finalizers)
    if policy == "Foreground" and rt.kind != "Namespace":
        finalizers = [f for f in finalizers if f != "orphan"]
        if "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
    if policy == "Orphan":
        finalizers = [f for f in finalizers if f != "foregroundDeletion"]
        if "orphan" not in finalizers:
            finalizers.append("orphan")
    return finalizers


def patched(rt: ResourceType, current: dict[str, Any], content_type: str, body: Any) -> Any:
    """``current`` (a copy of the stored object) with a merge, JSON or strategic merge patch
    applied; strategic merge is for built-in kinds only (415 otherwise, as for CRDs)."""
    if content_type in (MERGE, "application/json"):
        return merge_patch(current, body)
    if content_type == JSON:
        return json_patch(current, body)
    if content_type == STRATEGIC:
        if not rt.builtin:
            raise unsupported_media_type(content_type)
        return strategic_merge_patch(current, body, rt.merge_keys)
    raise unsupported_media_type(content_type)


def encode_continue(rv: int, namespace: str, name: str) -> str:
    """The ``continue`` token of a paged list: where the next page starts, and when."""
    return base64.urlsafe_b64encode(
        json.dumps({"rv": rv, "ns": namespace, "name": name}).encode()
    ).decode()


def decode_continue(token: str, oldest_rv: int) -> tuple[str, str]:
    """Where a ``continue`` token starts (namespace, name); 410 when the history it needs is
    gone, 400 when it is not one of ours."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        start = (decoded["ns"], decoded["name"])
        if int(decoded["rv"]) < oldest_rv:
            raise APIError(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue parameter.",
            )
    except (ValueError, KeyError, TypeError):
        raise bad_request("invalid continue token") from None
    return start


def bound_pod(old: dict[str, Any], binding: Any, now: str) -> dict[str, Any]:
    """The pod ``old`` once a ``Binding`` assigns it to a node, as kube-apiserver's binding
    storage makes it: ``spec.nodeName`` set and ``PodScheduled=True``. A pod already bound, being
    deleted, or not the one the binding's uid names answers 409; a binding without a target
    node 422."""
    name = old["metadata"]["name"]
    if not isinstance(binding, dict):
        raise bad_request("a Binding must be a JSON object")
    meta = binding.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    target = binding.get("target")
    target = target if isinstance(target, dict) else {}
    node = target.get("name")
    if not isinstance(node, str) or not node:
        raise invalid("Binding", "", name, [FieldError("target.name", REQUIRED)])
    uid = meta.get("uid")
    if uid and uid != old["metadata"].get("uid"):
        raise conflict(
            "pods/binding",
            "",
            name,
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            f"{old['metadata'].get('uid')}",
        )
    if old["metadata"].get("deletionTimestamp"):
        raise conflict(
            "pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host"
        )
    current = (old.get("spec") or {}).get("nodeName")
    if current:
        raise conflict(
            "pods/binding", "", name, f'pod {name} is already assigned to node "{current}"'
        )
    new = copy.deepcopy(old)
    new.setdefault("spec", {})["nodeName"] = node
    status = new.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
    )
    status["conditions"] = conditions
    return new


DEFAULT_TERMINATION_GRACE = 30
"""A pod's ``terminationGracePeriodSeconds`` when unset."""


def pod_grace(pod: dict[str, Any], requested: int | None, *, has_node: bool) -> int:
    """How long a deleted pod is kept for its kubelet to stop it (the pod strategy's
    ``CheckGracefulDelete``): DeleteOptions' ``gracePeriodSeconds``, else the pod's
    ``terminationGracePeriodSeconds`` (30); 0, deleted at once, when the pod is not bound to
    a node, has finished, or names a node that does not exist (no kubelet can confirm it: the
    pod garbage collector's case); a negative request counts as 1."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or not has_node or phase in ("Succeeded", "Failed"):
        return 0
    if requested is None:
        value = spec.get("terminationGracePeriodSeconds")
        requested = DEFAULT_TERMINATION_GRACE if value is None else int(value)
    return 1 if requested < 0 else requested


MATCHES = ("Exact", "NotOlderThan")


def check_list_options(query: dict[str, str]) -> None:
    """A list's ``resourceVersionMatch`` checked as kube-apiserver checks ListOptions (a 422
    on ``ListOptions.meta.k8s.io``): it needs a ``resourceVersion``, goes without ``continue``,
    is ``Exact`` or ``NotOlderThan``, and ``Exact`` is not for version 0. This server always
    lists its current state, which satisfies every match it lets through."""
    match = query.get("resourceVersionMatch") or ""
    if not match:
        return
    rv, path = query.get("resourceVersion") or "", "resourceVersionMatch"
    errors: list[FieldError] = []
    if not rv:
        message = "resourceVersionMatch is forbidden unless resourceVersion is provided"
        errors.append(FieldError(path, FORBIDDEN, message))
    if query.get("continue"):
        message = "resourceVersionMatch is forbidden when continue is provided"
        errors.append(FieldError(path, FORBIDDEN, message))
    if match not in MATCHES:
        allowed = ", ".join(f'"{m}"' for m in (*MATCHES, ""))
        errors.append(FieldError(path, UNSUPPORTED, f"supported values: {allowed}", value=match))
    if match == "Exact" and rv == "0":
        message = 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
        errors.append(FieldError(path, FORBIDDEN, message))
    if errors:
        raise invalid("ListOptions", "meta.k8s.io", "", errors)
