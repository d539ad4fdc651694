"""Server-side apply and managed-fields tracking, with structured-merge-diff semantics.

Kubernetes records which *field manager* owns which field of an object in
``metadata.managedFields``. This module reproduces the algorithms of
sigs.k8s.io/structured-merge-diff (the library behind the API server's field manager) over
plain JSON dicts, so that the embedded API server behaves like a real one:

* :func:`apply` handles ``PATCH`` with ``application/apply-patch+yaml``: the applied
  configuration is merged into the live object (maps merged, list-map items merged by their
  keys, sets unioned, atomic lists and scalars replaced); fields the manager applied last time
  but no longer applies are removed when no other manager owns them; changing a field another
  manager owns is a conflict (409) unless ``force``.
* :func:`track_update` handles every other write (create, update, merge / JSON / strategic
  patches): the fields that changed become owned by the writer (operation ``Update``) and are
  taken away from the other managers.

Field sets are held as Python sets of paths. A path is a tuple of *path elements* spelled as
in the ``FieldsV1`` wire format: ``f:<field>`` for a map key, ``k:{"name":"x"}`` for a
list-map item (its key fields JSON-encoded in sorted order), ``v:<json>`` for a set item.
How a position merges comes from the resource's schema: for custom resources the CRD's
``x-kubernetes-list-type`` / ``x-kubernetes-list-map-keys`` / ``x-kubernetes-map-type``; for
built-in kinds the strategic-merge keys by field name (:attr:`ResourceType.merge_keys`). Parts
without schema (``x-kubernetes-preserve-unknown-fields``) are granular maps and atomic lists,
like structured-merge-diff's "deduced" type.

Deliberate simplifications: one schema serves every version of a resource (no conversion of
field sets between versions); ``null`` values in an applied configuration are dropped before
applying; a list-map whose items lack key fields or repeat a key is treated as atomic; a map or
list emptied by field removal disappears instead of becoming ``null``; the ten-``Update``-manager
cap ("ancient-changes") and the kubectl last-applied annotation are not reproduced.

Modules: :mod:`.common` (shared names), :mod:`.schema` (how a position merges),
:mod:`.fieldsets` (paths and field sets), :mod:`.values` (compare, merge, remove),
:mod:`.managers` (managedFields entries, conflicts, ownership); this module holds the two
entry points and the rules on whole objects.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from trainer.local.apiserver.apply.common import APPLY, BEFORE_FIRST_APPLY, SYSTEM_META, Path
from trainer.local.apiserver.apply.fieldsets import field_set, path_string, without
from trainer.local.apiserver.apply.managers import (
    Entry,
    decode,
    decode_or_empty,
    manager_identity,
    prune,
    reassign,
    record_update,
    store,
)
from trainer.local.apiserver.apply.schema import root_schema
from trainer.local.apiserver.apply.values import equal, merge
from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.resources import ResourceType
from trainer.machinery.nulls import drop_nulls

__all__ = ["apply", "path_string", "track_update"]

# --- helpers on objects ----------------------------------------------------------------------


def _ignored(rt: ResourceType, subresource: str) -> set[Path]:
    """Fields a write cannot own (the strategy's reset fields): status through the main
    resource of a kind with a status subresource, spec through ``/status``."""
    if subresource == "status":
        return {("f:spec",)}
    if rt.status and not subresource:
        return {("f:status",)}
    return set()


def _empty_object(rt: ResourceType) -> dict[str, Any]:
    """What Kubernetes compares a created object against."""
    return {"apiVersion": rt.api_version, "kind": rt.kind}


def _without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` without its managedFields, sharing everything else with it: only read by the
    field tracking that follows (a deep copy of every object at every write was a fifth of the
    API server's time at cluster scale, hack/bench/simulate.py)."""
    out = dict(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def _bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def _check_config(rt: ResourceType, config: Any) -> None:
    if not isinstance(config, dict):
        raise _bad_request("an apply configuration must be an object")
    meta = config.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise _bad_request("metadata must be an object")
    if isinstance(meta, dict) and meta.get("managedFields") is not None:
        raise _bad_request("metadata.managedFields must be nil")
    api_version, kind = config.get("apiVersion"), config.get("kind")
    if api_version != rt.api_version or kind != rt.kind:
        group, _, version = str(api_version or "").rpartition("/")
        raise _bad_request(f"invalid object type: {group}/{version}, Kind={kind or ''}")


def _applied_config(rt: ResourceType, config: dict[str, Any], subresource: str) -> dict[str, Any]:
    """The part of the configuration this endpoint applies: status only through ``/status``,
    everything but status through the main resource of a kind with a status subresource."""
    cfg: dict[str, Any] = drop_nulls(config)  # a fresh copy
    if subresource == "status":
        meta = cfg.get("metadata") or {}
        out: dict[str, Any] = {k: cfg[k] for k in ("apiVersion", "kind") if k in cfg}
        identity = {k: meta[k] for k in ("name", "namespace") if k in meta}
        if identity:
            out["metadata"] = identity
        if "status" in cfg:
            out["status"] = cfg["status"]
        return out
    if rt.status:
        cfg.pop("status", None)
    return cfg


def _restore_identity(obj: dict[str, Any], live: Mapping[str, Any]) -> None:
    """Identity and server-managed metadata are never removed by apply."""
    for key in ("apiVersion", "kind"):
        if key in live and key not in obj:
            obj[key] = live[key]
    live_meta = live.get("metadata")
    if not isinstance(live_meta, dict):
        return
    meta = obj.setdefault("metadata", {})
    for key in SYSTEM_META:
        if key in live_meta and key not in meta:
            meta[key] = copy.deepcopy(live_meta[key])


# --- public API ------------------------------------------------------------------------------


def apply(
    rt: ResourceType,
    live: dict[str, Any] | None,
    config: dict[str, Any],
    manager: str,
    *,
    force: bool,
    subresource: str = "",
    now: str = "",
) -> dict[str, Any]:
    """The object after ``manager`` server-side-applies ``config`` to ``live``.

    ``live`` None means create. The result carries the updated ``metadata.managedFields`` of
    every manager; ``live`` and ``config`` are not modified. Raises :class:`APIError` 409
    ``Conflict`` when the configuration changes a field another manager owns and ``force`` is
    false, and 400 for a configuration of another kind or one carrying managedFields.
    The applier's entry gets ``now`` as its time when the apply changes the object or the entry
    is new, and keeps its time otherwise (as Kubernetes does), so re-applying the same
    configuration returns an object equal to ``live``, managedFields included. An existing
    object without managedFields first gets them all owned by ``before-first-apply``
    (operation Update), as on a real server.
    """
    _check_config(rt, config)
    sch = root_schema(rt)
    ignored = _ignored(rt, subresource)
    applied = _applied_config(rt, config, subresource)
    if live is None:
        live_obj, managers = _empty_object(rt), {}
    else:
        # A copy of its own: merging and pruning below may change what they are given.
        live_obj = copy.deepcopy(_without_managed_fields(live))
        managers = decode_or_empty((live.get("metadata") or {}).get("managedFields"))
        if not managers:
            record_update(
                _empty_object(rt),
                live_obj,
                managers,
                BEFORE_FIRST_APPLY,
                rt=rt,
                subresource=subresource,
                now=now,
                sch=sch,
                ignored=ignored,
            )
    me = manager_identity(manager, APPLY, rt.api_version, subresource)
    last = managers.get(me)
    merged = merge(live_obj, applied, sch)
    managers[me] = Entry(
        manager=manager,
        operation=APPLY,
        api_version=rt.api_version,
        subresource=subresource,
        time=last.time if last else None,
        fields=without(field_set(applied, sch), ignored),
    )
    merged = prune(merged, managers, last, sch)
    reassign(live_obj, merged, managers, me, force=force, sch=sch, ignored=ignored)
    result: dict[str, Any] = copy.deepcopy(merged)
    _restore_identity(result, live_obj)
    entry = managers.get(me)
    if entry is not None and now and (last is None or not equal(result, live_obj)):
        entry.time = now
    meta = result.get("metadata")
    if not isinstance(meta, dict):
        meta = result["metadata"] = {}
    store(meta, managers)
    return result


def track_update(
    rt: ResourceType,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    *,
    subresource: str = "",
    now: str = "",
) -> None:
    """Record a non-apply write in ``new["metadata"]["managedFields"]`` (in place).

    ``old`` None means create. The fields that differ between ``old`` and ``new`` (all of them
    on create) become owned by ``manager`` with operation ``Update`` (one entry per manager,
    apiVersion and subresource; its time changes only when it gains fields) and leave the other
    managers; entries left empty are dropped. Server-managed metadata is never tracked.

    The managedFields the client sent in ``new`` are the starting point when they are a valid,
    non-empty list (so a client may rewrite them), ``[]`` or ``[{}]`` clears them, and anything
    else (absent, invalid, or any write through a subresource) keeps ``old``'s.
    """
    meta = new.get("metadata")
    if not isinstance(meta, dict):
        meta = new["metadata"] = {}
    sch = root_schema(rt)
    live = decode_or_empty((old.get("metadata") or {}).get("managedFields")) if old else {}
    if subresource or meta.get("managedFields") is None:
        managers = live
    elif meta["managedFields"] in ([], [{}]):
        managers = {}
    else:
        try:
            managers = decode(meta["managedFields"]) or live
        except (ValueError, TypeError):
            managers = live
    record_update(
        _without_managed_fields(old) if old is not None else _empty_object(rt),
        _without_managed_fields(new),
        managers,
        manager,
        rt=rt,
        subresource=subresource,
        now=now,
        sch=sch,
        ignored=_ignored(rt, subresource),
    )
    store(meta, managers)
