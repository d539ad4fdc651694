"""Server-side apply: the managers of ``metadata.managedFields``.

Decoding and encoding the entries, the 409 a conflicting apply gets (naming each field and
its owner), and how an update or an apply takes fields from the other managers.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from trainer.local.apiserver.apply.common import APPLY, CURRENT_OPERATION, UPDATE, Path
from trainer.local.apiserver.apply.fieldsets import (
    Trie,
    ensure_named,
    field_set,
    parse_fields_v1,
    path_string,
    strip_meta,
)
from trainer.local.apiserver.apply.schema import Schema
from trainer.local.apiserver.apply.values import Diff, diff_objects, remove_paths
from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.resources import ResourceType

# --- managers --------------------------------------------------------------------------------


def manager_identity(manager: str, operation: str, api_version: str, subresource: str) -> str:
    """The manager identifier Kubernetes keys field sets by (BuildManagerIdentifier): appliers
    are one manager across versions, updaters one per apiVersion; subresources are distinct."""
    ident: dict[str, str] = {}
    if manager:
        ident["manager"] = manager
    ident["operation"] = operation
    if operation == UPDATE and api_version:
        ident["apiVersion"] = api_version
    if subresource:
        ident["subresource"] = subresource
    return json.dumps(ident, separators=(",", ":"))


@dataclass
class Entry:
    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    fields: set[Path]
    encoded: tuple[frozenset[Path], dict[str, Any]] | None = field(
        default=None, compare=False, repr=False
    )
    """The fields as last decoded or encoded, and their FieldsV1: an entry whose fields did not
    change is written back as it was read (encoding is most of the cost of tracking fields on
    a status update, and most entries do not change)."""

    @property
    def identity(self) -> str:
        return manager_identity(self.manager, self.operation, self.api_version, self.subresource)

    def describe(self) -> str:
        """How conflict messages name the manager (printManager)."""
        text = json.dumps(self.manager, ensure_ascii=False)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        if self.encoded is None or self.encoded[0] != self.fields:
            fields = frozenset(self.fields)
            self.encoded = (fields, canonical_fields_v1(fields))
        out["fieldsV1"] = self.encoded[1]
        if self.subresource:
            out["subresource"] = self.subresource
        return out


Managers = dict[str, Entry]

CANONICAL_ENTRIES: Final = 4096
_canonical: OrderedDict[frozenset[Path], dict[str, Any]] = OrderedDict()


def canonical_fields_v1(fields: frozenset[Path]) -> dict[str, Any]:
    """The FieldsV1 of ``fields``, one shared document per distinct set among the last
    ``CANONICAL_ENTRIES`` encoded: the pods of one template, the Events of one component, have
    the same managed fields, and each stored copy was most of its object's memory (a pod's
    managedFields were 22 of its 25 KB). Never changed in place: a stored object's
    managedFields are only ever replaced whole."""
    found = _canonical.get(fields)
    if found is not None:
        _canonical.move_to_end(fields)
        return found
    found = Trie.of(fields).fields_v1()
    _canonical[fields] = found
    if len(_canonical) > CANONICAL_ENTRIES:
        _canonical.popitem(last=False)
    return found


_parsed: OrderedDict[int, tuple[dict[str, Any], frozenset[Path]]] = OrderedDict()


def _parsed_fields(v1: Any) -> frozenset[Path] | None:
    """The paths of a stored FieldsV1 document, parsed once per shared document
    (:func:`canonical_fields_v1`: the stored objects of one template share theirs, and every
    update of one parsed it again: 7 % of the API server's time in hack/bench/simulate.py).
    Keyed by identity, which the held reference keeps from being reused; None for a document
    not seen (then parsed by the caller). Never changed in place, as said there."""
    if not isinstance(v1, dict) or not v1:
        return None
    found = _parsed.get(id(v1))
    if found is not None and found[0] is v1:
        _parsed.move_to_end(id(v1))
        return found[1]
    out: set[Path] = set()
    parse_fields_v1(v1, (), out)
    fields = frozenset(out)
    _parsed[id(v1)] = (v1, fields)
    if len(_parsed) > CANONICAL_ENTRIES:
        _parsed.popitem(last=False)
    return fields


def decode(entries: Any, *, stored: bool = False) -> Managers:
    """managedFields as stored on the wire; ValueError when they are not valid. ``stored``:
    they are a stored object's (this server encoded them), so an entry that does not change is
    written back as it is; a client's are always encoded again, as Kubernetes does."""
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    out: Managers = {}
    for i, raw in enumerate(entries):
        if not isinstance(raw, dict):
            raise ValueError(f"managed fields entry {i} must be an object")
        operation = raw.get("operation")
        if operation not in (APPLY, UPDATE):
            raise ValueError("operation must be `Apply` or `Update`")
        api_version = raw.get("apiVersion")
        if not isinstance(api_version, str) or not api_version:
            raise ValueError("apiVersion must not be empty")
        if raw.get("fieldsType") != "FieldsV1":
            raise ValueError(f"invalid fieldsType in managed fields entry {i}")
        v1 = raw.get("fieldsV1")
        parsed = _parsed_fields(v1) if stored else None
        if parsed is None:
            found: set[Path] = set()
            parse_fields_v1(v1 or {}, (), found)
            parsed = frozenset(found)
        fields = set(parsed)
        time = raw.get("time")
        kept = (parsed, v1) if stored and isinstance(v1, dict) and v1 else None
        entry = Entry(
            manager=str(raw.get("manager") or ""),
            operation=str(operation),
            api_version=api_version,
            subresource=str(raw.get("subresource") or ""),
            time=time if isinstance(time, str) and time else None,
            fields=fields,
            encoded=kept,
        )
        out[entry.identity] = entry
    return out


def decode_or_empty(entries: Any) -> Managers:
    if entries is None:
        return {}
    try:
        return decode(entries, stored=True)
    except (ValueError, TypeError):
        return {}


def _encode(managers: Managers) -> list[dict[str, Any]]:
    """Entries in Kubernetes' order: Apply before Update, then by time, manager, version."""
    entries = [e for e in managers.values() if e.fields]
    entries.sort(
        key=lambda e: (e.operation, (e.time or "")[:19], e.manager, e.api_version, e.subresource)
    )
    return [e.wire() for e in entries]


def store(meta: dict[str, Any], managers: Managers) -> None:
    for entry in managers.values():
        entry.fields = strip_meta(entry.fields)
    encoded = _encode(managers)
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)


def _conflict_error(conflicts: dict[str, set[Path]], managers: Managers) -> APIError:
    """409 in Kubernetes' shape (NewConflictError)."""
    found: list[tuple[Entry, Path]] = [
        (managers[ident], path)
        for ident in sorted(conflicts)
        for path in Trie.of(conflicts[ident]).iterate()
    ]
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {entry.describe()}",
            "field": path_string(path),
        }
        for entry, path in found
    ]
    if len(found) == 1:
        entry, path = found[0]
        message = (
            f"Apply failed with 1 conflict: conflict with {entry.describe()}: {path_string(path)}"
        )
    else:
        lines: list[str] = []
        for ident in sorted(conflicts):
            lines.append(f"conflicts with {managers[ident].describe()}:")
            lines.extend(f"- {path_string(p)}" for p in Trie.of(conflicts[ident]).iterate())
        message = f"Apply failed with {len(found)} conflicts: " + "\n".join(lines)
    return APIError(409, "Conflict", message, {"causes": causes})


def reassign(
    old: dict[str, Any],
    new: dict[str, Any],
    managers: Managers,
    me: str,
    *,
    force: bool,
    sch: Schema,
    ignored: set[Path],
) -> Diff:
    """Take changed fields away from every manager but ``me`` (Updater.update).

    A field another manager owns whose value changes (or appears) is a conflict; without
    ``force`` that is an error, with it the other manager loses the field. Removed fields leave
    every other manager. Managers left with nothing are dropped.
    """
    diff = diff_objects(old, new, sch, ignored)
    changed = diff.modified | diff.added
    conflicts = {
        ident: entry.fields & changed
        for ident, entry in managers.items()
        if ident != me and entry.fields & changed
    }
    if conflicts and not force:
        raise _conflict_error(conflicts, managers)
    for ident, entry in managers.items():
        if ident != me:
            entry.fields = entry.fields - changed - diff.removed
    for ident in [i for i, e in managers.items() if not e.fields]:
        del managers[ident]
    return diff


def record_update(
    old: dict[str, Any],
    new: dict[str, Any],
    managers: Managers,
    manager: str,
    *,
    rt: ResourceType,
    subresource: str,
    now: str,
    sch: Schema,
    ignored: set[Path],
) -> None:
    """Give ``manager`` (operation Update) the fields that changed from ``old`` to ``new``."""
    diff = reassign(old, new, managers, CURRENT_OPERATION, force=True, sch=sch, ignored=ignored)
    current = strip_meta((diff.modified | diff.added) - diff.removed)
    if not current:
        return  # nothing changed: the manager's entry and its time stay as they were
    ident = manager_identity(manager, UPDATE, rt.api_version, subresource)
    previous = managers.get(ident)
    managers[ident] = Entry(
        manager=manager,
        operation=UPDATE,
        api_version=rt.api_version,
        subresource=subresource,
        time=now or (previous.time if previous else None),
        fields=current | (previous.fields if previous else set()),
    )


def prune(
    merged: dict[str, Any],
    managers: Managers,
    last: Entry | None,
    sch: Schema,
) -> dict[str, Any]:
    """Remove what the applier applied last time, no longer applies, and nobody else owns
    (Updater.prune with addBackOwnedItems and addBackDanglingItems)."""
    if last is None or not last.fields:
        return merged
    last_set = ensure_named(last.fields, sch)
    pruned = remove_paths(merged, last_set, sch)
    owned: set[Path] = set().union(*(entry.fields for entry in managers.values()))
    merged_set = ensure_named(field_set(merged, sch), sch)
    pruned_set = ensure_named(field_set(pruned, sch), sch)
    owned_set = ensure_named(owned, sch)
    pruned = remove_paths(merged, merged_set - (pruned_set | owned_set), sch)
    pruned_set = ensure_named(field_set(pruned, sch), sch)
    return remove_paths(merged, (merged_set - pruned_set) & last_set, sch)
