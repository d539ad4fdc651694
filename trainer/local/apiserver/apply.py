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
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.resources import ResourceType

Path = tuple[str, ...]
"""A field path: path elements such as ``("f:spec", "k:{\\"name\\":\\"a\\"}", "f:image")``."""

APPLY: Final = "Apply"
UPDATE: Final = "Update"
BEFORE_FIRST_APPLY: Final = "before-first-apply"
"""Manager that receives every existing field when an object without managedFields is applied."""

_CURRENT_OPERATION: Final = "\x00current-operation"
"""Identity of an Update in progress; it never matches a stored manager."""

_META_STRIPPED: Final = (
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_STRIPPED: Final[frozenset[Path]] = frozenset(
    {("f:apiVersion",), ("f:kind",), ("f:metadata",)}
    | {("f:metadata", f"f:{key}") for key in _META_STRIPPED}
)
"""Paths nobody owns: identity and server-managed metadata (exact paths, not subtrees)."""

_SYSTEM_META: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


class _Missing:
    """Marks an absent value (distinct from JSON ``null``)."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Final = _Missing()


# --- schema -------------------------------------------------------------------------------


class _Schema:
    """How the values at one position of an object merge.

    The base class is structured-merge-diff's *deduced* type: maps are granular and their keys
    are not declared fields, lists are atomic.
    """

    def __init__(
        self,
        *,
        atomic_map: bool = False,
        list_type: str = "atomic",
        list_keys: tuple[str, ...] = (),
        key_defaults: Mapping[str, Any] | None = None,
    ) -> None:
        self.atomic_map = atomic_map
        self.list_type = list_type
        self.list_keys = list_keys
        self.key_defaults: Mapping[str, Any] = key_defaults or {}

    def child(self, key: str) -> tuple[_Schema, bool]:
        """Schema of a map value and whether ``key`` is a declared (struct) field."""
        return _DEDUCED, False

    def item(self) -> _Schema:
        """Schema of a list item."""
        return _DEDUCED


_DEDUCED: Final = _Schema()


class _CRDSchema(_Schema):
    """A node of a CRD's structural openAPIV3Schema."""

    def __init__(self, node: Mapping[str, Any]) -> None:
        list_type = str(node.get("x-kubernetes-list-type") or "atomic")
        keys = tuple(str(k) for k in node.get("x-kubernetes-list-map-keys") or ())
        if list_type == "map" and not keys:
            list_type = "atomic"
        items = node.get("items")
        props = (items.get("properties") if isinstance(items, dict) else None) or {}
        defaults = {
            k: props[k]["default"]
            for k in keys
            if isinstance(props.get(k), dict) and "default" in props[k]
        }
        super().__init__(
            atomic_map=node.get("x-kubernetes-map-type") == "atomic",
            list_type=list_type,
            list_keys=keys,
            key_defaults=defaults,
        )
        self._node = node
        self._children: dict[str, tuple[_Schema, bool]] = {}
        self._item: _Schema | None = None

    def child(self, key: str) -> tuple[_Schema, bool]:
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = self._resolve_child(key)
        return found

    def _resolve_child(self, key: str) -> tuple[_Schema, bool]:
        props = self._node.get("properties")
        if isinstance(props, dict) and isinstance(props.get(key), dict):
            return _CRDSchema(props[key]), True
        if self._node.get("x-kubernetes-embedded-resource"):
            if key == "metadata":
                return _OBJECT_META, True
            if key in ("apiVersion", "kind"):
                return _DEDUCED, True
        extra = self._node.get("additionalProperties")
        if isinstance(extra, dict):
            return _CRDSchema(extra), False
        return _DEDUCED, False

    def item(self) -> _Schema:
        if self._item is None:
            items = self._node.get("items")
            self._item = _CRDSchema(items) if isinstance(items, dict) else _DEDUCED
        return self._item


class _BuiltinSchema(_Schema):
    """A position in a built-in kind, known only by its field name.

    Every map key is a declared field; lists named in ``merge_keys`` are list-maps (``""``: a
    set of scalars), others atomic. ``ports`` is keyed like Kubernetes does: by
    ``containerPort`` and ``protocol`` (``port`` and ``protocol`` in a Service), protocol
    defaulting to ``TCP``.
    """

    def __init__(self, kind: str, merge_keys: Mapping[str, str], name: str) -> None:
        key = merge_keys.get(name) if name else None
        if key is None:
            super().__init__()
        elif key == "":
            super().__init__(list_type="set")
        elif name == "ports":
            first = "port" if kind == "Service" else "containerPort"
            super().__init__(
                list_type="map", list_keys=(first, "protocol"), key_defaults={"protocol": "TCP"}
            )
        else:
            super().__init__(list_type="map", list_keys=(key,))
        self._kind = kind
        self._merge_keys = merge_keys
        self._children: dict[str, tuple[_Schema, bool]] = {}

    def child(self, key: str) -> tuple[_Schema, bool]:
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = (_BuiltinSchema(self._kind, self._merge_keys, key), True)
        return found

    def item(self) -> _Schema:
        return self.child("")[0]


class _ObjectMetaSchema(_Schema):
    """``metadata`` of any object: labels/annotations maps, ownerReferences by uid, finalizers."""

    _OWNER_REFERENCES: Final = _Schema(list_type="map", list_keys=("uid",))
    _FINALIZERS: Final = _Schema(list_type="set")

    def child(self, key: str) -> tuple[_Schema, bool]:
        if key == "ownerReferences":
            return self._OWNER_REFERENCES, True
        if key == "finalizers":
            return self._FINALIZERS, True
        return _DEDUCED, True


_OBJECT_META: Final = _ObjectMetaSchema()


class _RootSchema(_Schema):
    """The top of an object: ``apiVersion``, ``kind``, ``metadata``, then the kind's fields."""

    def __init__(self, inner: _Schema) -> None:
        super().__init__()
        self._inner = inner

    def child(self, key: str) -> tuple[_Schema, bool]:
        if key == "metadata":
            return _OBJECT_META, True
        if key in ("apiVersion", "kind"):
            return _DEDUCED, True
        return self._inner.child(key)


def _root_schema(rt: ResourceType) -> _Schema:
    if not rt.builtin:
        return _RootSchema(_CRDSchema(rt.schema) if rt.schema else _DEDUCED)
    return _RootSchema(_BuiltinSchema(rt.kind, rt.merge_keys, ""))


# --- path elements ---------------------------------------------------------------------------


def _go_json(value: Any) -> str:
    """Compact JSON with sorted keys, escaped like Go's encoding/json (how keys are spelled)."""
    text = json.dumps(
        _plain_numbers(value), separators=(",", ":"), sort_keys=True, ensure_ascii=False
    )
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _plain_numbers(value: Any) -> Any:
    """Integral floats as integers (Go prints ``1.0`` as ``1``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_numbers(v) for v in value]
    return value


def _item_pes(items: list[Any], sch: _Schema) -> list[str] | None:
    """Path elements of a granular list's items; None when the list must be treated atomically."""
    pes: list[str] = []
    if sch.list_type == "map":
        for item in items:
            if not isinstance(item, dict):
                return None
            key: dict[str, Any] = {}
            for name in sch.list_keys:
                if item.get(name) is not None:
                    key[name] = item[name]
                elif name in sch.key_defaults:
                    key[name] = sch.key_defaults[name]
                else:
                    return None
            pes.append("k:" + _go_json(key))
    elif sch.list_type == "set":
        for item in items:
            if isinstance(item, dict | list):
                return None
            pes.append("v:" + _go_json(item))
    else:
        return None
    return pes if len(set(pes)) == len(pes) else None


def _canonical_pe(text: str) -> str:
    """A path element read from FieldsV1, respelled canonically; ValueError if malformed."""
    prefix, body = text[:2], text[2:]
    if prefix == "f:":
        return text
    if prefix == "k:":
        key = json.loads(body)
        if not isinstance(key, dict) or not key:
            raise ValueError(f"invalid key path element {text!r}")
        return "k:" + _go_json(key)
    if prefix == "v:":
        return "v:" + _go_json(json.loads(body))
    if prefix == "i:":
        return f"i:{int(body)}"
    raise ValueError(f"invalid path element {text!r}")


def _value_key(value: Any) -> tuple[Any, ...]:
    """Total order of JSON values used by structured-merge-diff (numbers, strings, bools...)."""
    if isinstance(value, bool):
        return (2, value)
    if isinstance(value, int | float):
        return (0, float(value))
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, list):
        return (3, tuple(_value_key(v) for v in value))
    if isinstance(value, dict):
        return (4, tuple((k, _value_key(value[k])) for k in sorted(value)))
    return (5, 0)


def _pe_sort_key(pe: str) -> tuple[Any, ...]:
    """Field names first, then keys, then values, then indices (PathElement.Compare)."""
    prefix, body = pe[:2], pe[2:]
    if prefix == "f:":
        return (0, body)
    if prefix == "k:":
        key = json.loads(body)
        return (1, tuple((name, _value_key(key[name])) for name in sorted(key)))
    if prefix == "v:":
        return (2, _value_key(json.loads(body)))
    return (3, int(body))


def _value_string(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return _go_json(value)


def path_string(path: Path) -> str:
    """A path as Kubernetes prints it in conflicts: ``.spec.containers[name="a"].image``."""
    out: list[str] = []
    for pe in path:
        prefix, body = pe[:2], pe[2:]
        if prefix == "f:":
            out.append("." + body)
        elif prefix == "k:":
            key = json.loads(body)
            out.append("[" + ",".join(f"{k}={_value_string(key[k])}" for k in sorted(key)) + "]")
        elif prefix == "v:":
            out.append(f"[={_value_string(json.loads(body))}]")
        else:
            out.append(f"[{body}]")
    return "".join(out)


# --- field sets ------------------------------------------------------------------------------


class _Trie:
    """Field set as a tree, for the FieldsV1 encoding and Kubernetes' iteration order."""

    __slots__ = ("children", "member")

    def __init__(self) -> None:
        self.member = False
        self.children: dict[str, _Trie] = {}

    @classmethod
    def of(cls, paths: Iterable[Path]) -> _Trie:
        root = cls()
        for path in paths:
            node = root
            for pe in path:
                node = node.children.setdefault(pe, cls())
            node.member = True
        return root

    def fields_v1(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for pe in sorted(self.children, key=_pe_sort_key):
            child = self.children[pe]
            body: dict[str, Any] = {}
            if child.children:
                if child.member:
                    body["."] = {}
                body.update(child.fields_v1())
            out[pe] = body
        return out

    def iterate(self, prefix: Path = ()) -> Iterator[Path]:
        """Members of a level first, then the subtrees (fieldpath.Set.Iterate)."""
        ordered = sorted(self.children, key=_pe_sort_key)
        for pe in ordered:
            if self.children[pe].member:
                yield (*prefix, pe)
        for pe in ordered:
            yield from self.children[pe].iterate((*prefix, pe))


def _parse_fields_v1(node: Any, prefix: Path, out: set[Path]) -> None:
    if not isinstance(node, dict):
        raise ValueError("fieldsV1 nodes must be objects")
    for key, sub in node.items():
        if key == ".":
            continue
        path = (*prefix, _canonical_pe(str(key)))
        if not isinstance(sub, dict):
            raise ValueError("fieldsV1 nodes must be objects")
        if not sub or "." in sub:
            out.add(path)
        _parse_fields_v1(sub, path, out)


def _field_set(
    value: Any, sch: _Schema, path: Path = (), out: set[Path] | None = None
) -> set[Path]:
    """The fields a value sets (TypedValue.ToFieldSet).

    Scalars, atomic maps and atomic lists are leaves; list items are always members; a map key
    that is not a declared field is a member (so ``labels.app`` and unknown keys of
    preserve-unknown-fields objects are owned as such); declared fields holding granular maps
    are only implied by their children.
    """
    out = set() if out is None else out
    if isinstance(value, dict):
        if sch.atomic_map:
            out.add(path)
            return out
        for key, sub in value.items():
            child, declared = sch.child(key)
            sub_path = (*path, f"f:{key}")
            _field_set(sub, child, sub_path, out)
            if not declared:
                out.add(sub_path)
    elif isinstance(value, list):
        pes = _item_pes(value, sch)
        if pes is None:
            out.add(path)
            return out
        item = sch.item()
        for pe, sub in zip(pes, value, strict=True):
            _field_set(sub, item, (*path, pe), out)
            out.add((*path, pe))
    else:
        out.add(path)
    return out


def _ensure_named(paths: set[Path], root: _Schema) -> set[Path]:
    """``paths`` plus every declared field that has a descendant in it.

    (Set.EnsureNamedFieldsAreMembers: removal works on members, and owning ``a.b.c`` must also
    protect the struct fields ``a`` and ``a.b`` that hold it.)
    """
    out = set(paths)
    nodes: dict[Path, tuple[_Schema, bool]] = {(): (root, False)}

    def node(prefix: Path) -> tuple[_Schema, bool]:
        found = nodes.get(prefix)
        if found is None:
            parent = node(prefix[:-1])[0]
            pe = prefix[-1]
            found = parent.child(pe[2:]) if pe.startswith("f:") else (parent.item(), False)
            nodes[prefix] = found
        return found

    for path in paths:
        for i in range(1, len(path)):
            prefix = path[:i]
            if prefix not in out and node(prefix)[1]:
                out.add(prefix)
    return out


def _without(paths: set[Path], prefixes: Iterable[Path]) -> set[Path]:
    """``paths`` minus everything at or below ``prefixes`` (Set.RecursiveDifference)."""
    roots = tuple(prefixes)
    if not roots:
        return paths
    return {p for p in paths if not any(p[: len(r)] == r for r in roots)}


def _strip_meta(paths: set[Path]) -> set[Path]:
    return paths - _STRIPPED


# --- values: compare, merge, remove ---------------------------------------------------------


def _equal(a: Any, b: Any) -> bool:
    """JSON equality (``True`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(b, dict | list):
        return False
    return bool(a == b)


def _pair_kind(lhs: Any, rhs: Any, sch: _Schema) -> str:
    """``map``/``list`` when both present values merge granularly, ``mixed`` on a type change,
    else ``leaf`` (scalars, atomic or empty containers)."""
    values = [v for v in (lhs, rhs) if v is not _MISSING]
    if all(isinstance(v, dict) for v in values):
        return "leaf" if sch.atomic_map or not any(values) else "map"
    if all(isinstance(v, list) for v in values):
        if not any(values) or any(_item_pes(v, sch) is None for v in values):
            return "leaf"
        return "list"
    if len(values) == 2 and any(isinstance(v, dict | list) for v in values):
        return "mixed"
    return "leaf"


@dataclass
class _Diff:
    added: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)


def _compare(lhs: Any, rhs: Any, sch: _Schema, path: Path, diff: _Diff) -> None:
    """Record what changed from ``lhs`` to ``rhs`` (TypedValue.Compare)."""
    kind = _pair_kind(lhs, rhs, sch)
    if kind == "leaf":
        if lhs is _MISSING:
            diff.added.add(path)
        elif rhs is _MISSING:
            diff.removed.add(path)
        elif not _equal(lhs, rhs):
            diff.modified.add(path)
        return
    if kind == "mixed":
        diff.modified.add(path)
        for old, new in ((lhs, _MISSING), (_MISSING, rhs)):
            single = _pair_kind(old, new, sch)
            if single in ("map", "list"):
                _compare_items(old, new, single, sch, path=path, diff=diff)
        return
    _compare_items(lhs, rhs, kind, sch, path=path, diff=diff)
    if lhs is _MISSING:
        diff.added.add(path)
    elif rhs is _MISSING:
        diff.removed.add(path)


def _compare_items(lhs: Any, rhs: Any, kind: str, sch: _Schema, *, path: Path, diff: _Diff) -> None:
    if kind == "map":
        left = lhs if isinstance(lhs, dict) else {}
        right = rhs if isinstance(rhs, dict) else {}
        for key in [*left, *(k for k in right if k not in left)]:
            child = sch.child(key)[0]
            _compare(
                left.get(key, _MISSING), right.get(key, _MISSING), child, (*path, f"f:{key}"), diff
            )
        return
    left_items = _index(lhs, sch) if isinstance(lhs, list) else {}
    right_items = _index(rhs, sch) if isinstance(rhs, list) else {}
    item = sch.item()
    for pe, value in right_items.items():
        _compare(left_items.get(pe, _MISSING), value, item, (*path, pe), diff)
    for pe, value in left_items.items():
        if pe not in right_items:
            _compare(value, _MISSING, item, (*path, pe), diff)


def _index(items: list[Any], sch: _Schema) -> dict[str, Any]:
    pes = _item_pes(items, sch) or []
    return dict(zip(pes, items, strict=True))


def _diff(old: dict[str, Any], new: dict[str, Any], sch: _Schema, ignored: set[Path]) -> _Diff:
    diff = _Diff()
    _compare(old, new, sch, (), diff)
    return _Diff(
        _without(diff.added, ignored),
        _without(diff.modified, ignored),
        _without(diff.removed, ignored),
    )


def _merge(lhs: Any, rhs: Any, sch: _Schema) -> Any:
    """``rhs`` (the applied configuration) merged into ``lhs`` (TypedValue.Merge)."""
    if rhs is _MISSING:
        return lhs
    if lhs is _MISSING:
        return rhs
    kind = _pair_kind(lhs, rhs, sch)
    if kind == "map":
        out = {
            key: _merge(value, rhs.get(key, _MISSING), sch.child(key)[0])
            for key, value in lhs.items()
        }
        out.update((key, value) for key, value in rhs.items() if key not in lhs)
        return out
    if kind == "list":
        return _merge_list(lhs, rhs, sch)
    return rhs


def _merge_list(lhs: list[Any], rhs: list[Any], sch: _Schema) -> list[Any]:
    """Merge two granular lists item by item, ordered like structured-merge-diff does:
    items keep the live order, the configuration's order wins among the items both share,
    and new items are inserted where the configuration puts them."""
    left_order, right_order = _item_pes(lhs, sch) or [], _item_pes(rhs, sch) or []
    left, right = dict(zip(left_order, lhs, strict=True)), dict(zip(right_order, rhs, strict=True))
    shared = [pe for pe in right_order if pe in left]
    next_shared = shared.pop(0) if shared else None
    item = sch.item()
    out: list[Any] = []
    done: set[str] = set()
    li = ri = 0
    while li < len(left_order) or ri < len(right_order):
        if li < len(left_order) and left_order[li] in done:
            li += 1
            continue
        if li < len(left_order) and ri < len(right_order):
            pe = left_order[li]
            if pe == right_order[ri]:
                out.append(_merge(left[pe], right[pe], item))
                done.add(pe)
                li, ri = li + 1, ri + 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in right and next_shared is not None and next_shared != pe:
                li += 1  # a shared item the configuration wants later: taken from there
                continue
        if li < len(left_order) and left_order[li] not in right:
            out.append(left[left_order[li]])
            li += 1
            continue
        if ri < len(right_order):
            pe = right_order[ri]
            out.append(_merge(left.get(pe, _MISSING), right[pe], item))
            done.add(pe)
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
            continue
        li += 1  # defensive: a live item the configuration already placed
    return out


def _remove(value: Any, sch: _Schema, paths: set[Path], prefixes: set[Path], path: Path) -> Any:
    """``value`` without the members of ``paths`` (TypedValue.RemoveItems); a container left
    empty by the removal becomes missing."""
    if isinstance(value, dict) and value and not sch.atomic_map:
        out: dict[str, Any] = {}
        for key, sub in value.items():
            sub_path = (*path, f"f:{key}")
            kept_value = sub
            if sub_path in paths:
                continue
            if sub_path in prefixes:
                kept_value = _remove(sub, sch.child(key)[0], paths, prefixes, sub_path)
                if kept_value is _MISSING:
                    continue
            out[key] = kept_value
        return out if out else _MISSING
    if isinstance(value, list) and value:
        pes = _item_pes(value, sch)
        if pes is None:
            return value
        kept: list[Any] = []
        for pe, sub in zip(pes, value, strict=True):
            sub_path = (*path, pe)
            kept_value = sub
            if sub_path in paths:
                continue
            if sub_path in prefixes:
                kept_value = _remove(sub, sch.item(), paths, prefixes, sub_path)
                if kept_value is _MISSING:
                    continue
            kept.append(kept_value)
        return kept if kept else _MISSING
    return value


def _remove_paths(obj: dict[str, Any], paths: set[Path], sch: _Schema) -> dict[str, Any]:
    if not paths:
        return obj
    prefixes = {p[:i] for p in paths for i in range(1, len(p))}
    out = _remove(obj, sch, paths, prefixes, ())
    return out if isinstance(out, dict) else {}


# --- managers --------------------------------------------------------------------------------


def _identity(manager: str, operation: str, api_version: str, subresource: str) -> str:
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
class _Entry:
    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    fields: set[Path]

    @property
    def identity(self) -> str:
        return _identity(self.manager, self.operation, self.api_version, self.subresource)

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
        out["fieldsV1"] = _Trie.of(self.fields).fields_v1()
        if self.subresource:
            out["subresource"] = self.subresource
        return out


Managers = dict[str, _Entry]


def _decode(entries: Any) -> Managers:
    """managedFields as stored on the wire; ValueError when they are not valid."""
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
        fields: set[Path] = set()
        _parse_fields_v1(raw.get("fieldsV1") or {}, (), fields)
        time = raw.get("time")
        entry = _Entry(
            manager=str(raw.get("manager") or ""),
            operation=str(operation),
            api_version=api_version,
            subresource=str(raw.get("subresource") or ""),
            time=time if isinstance(time, str) and time else None,
            fields=fields,
        )
        out[entry.identity] = entry
    return out


def _decode_or_empty(entries: Any) -> Managers:
    if entries is None:
        return {}
    try:
        return _decode(entries)
    except (ValueError, TypeError):
        return {}


def _encode(managers: Managers) -> list[dict[str, Any]]:
    """Entries in Kubernetes' order: Apply before Update, then by time, manager, version."""
    entries = [e for e in managers.values() if e.fields]
    entries.sort(
        key=lambda e: (e.operation, (e.time or "")[:19], e.manager, e.api_version, e.subresource)
    )
    return [e.wire() for e in entries]


def _store(meta: dict[str, Any], managers: Managers) -> None:
    for entry in managers.values():
        entry.fields = _strip_meta(entry.fields)
    encoded = _encode(managers)
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)


def _conflict_error(conflicts: dict[str, set[Path]], managers: Managers) -> APIError:
    """409 in Kubernetes' shape (NewConflictError)."""
    found: list[tuple[_Entry, Path]] = [
        (managers[ident], path)
        for ident in sorted(conflicts)
        for path in _Trie.of(conflicts[ident]).iterate()
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
            lines.extend(f"- {path_string(p)}" for p in _Trie.of(conflicts[ident]).iterate())
        message = f"Apply failed with {len(found)} conflicts: " + "\n".join(lines)
    return APIError(409, "Conflict", message, {"causes": causes})


def _reassign(
    old: dict[str, Any],
    new: dict[str, Any],
    managers: Managers,
    me: str,
    *,
    force: bool,
    sch: _Schema,
    ignored: set[Path],
) -> _Diff:
    """Take changed fields away from every manager but ``me`` (Updater.update).

    A field another manager owns whose value changes (or appears) is a conflict; without
    ``force`` that is an error, with it the other manager loses the field. Removed fields leave
    every other manager. Managers left with nothing are dropped.
    """
    diff = _diff(old, new, sch, ignored)
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


def _record_update(
    old: dict[str, Any],
    new: dict[str, Any],
    managers: Managers,
    manager: str,
    *,
    rt: ResourceType,
    subresource: str,
    now: str,
    sch: _Schema,
    ignored: set[Path],
) -> None:
    """Give ``manager`` (operation Update) the fields that changed from ``old`` to ``new``."""
    diff = _reassign(old, new, managers, _CURRENT_OPERATION, force=True, sch=sch, ignored=ignored)
    current = _strip_meta((diff.modified | diff.added) - diff.removed)
    if not current:
        return  # nothing changed: the manager's entry and its time stay as they were
    ident = _identity(manager, UPDATE, rt.api_version, subresource)
    previous = managers.get(ident)
    managers[ident] = _Entry(
        manager=manager,
        operation=UPDATE,
        api_version=rt.api_version,
        subresource=subresource,
        time=now or (previous.time if previous else None),
        fields=current | (previous.fields if previous else set()),
    )


def _prune(
    merged: dict[str, Any],
    managers: Managers,
    last: _Entry | None,
    sch: _Schema,
) -> dict[str, Any]:
    """Remove what the applier applied last time, no longer applies, and nobody else owns
    (Updater.prune with addBackOwnedItems and addBackDanglingItems)."""
    if last is None or not last.fields:
        return merged
    last_set = _ensure_named(last.fields, sch)
    pruned = _remove_paths(merged, last_set, sch)
    owned: set[Path] = set().union(*(entry.fields for entry in managers.values()))
    merged_set = _ensure_named(_field_set(merged, sch), sch)
    pruned_set = _ensure_named(_field_set(pruned, sch), sch)
    owned_set = _ensure_named(owned, sch)
    pruned = _remove_paths(merged, merged_set - (pruned_set | owned_set), sch)
    pruned_set = _ensure_named(_field_set(pruned, sch), sch)
    return _remove_paths(merged, (merged_set - pruned_set) & last_set, sch)


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
    out = copy.deepcopy(dict(obj))
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return out


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


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
    cfg: dict[str, Any] = _drop_nulls(copy.deepcopy(config))
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
    for key in _SYSTEM_META:
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
    sch = _root_schema(rt)
    ignored = _ignored(rt, subresource)
    applied = _applied_config(rt, config, subresource)
    if live is None:
        live_obj, managers = _empty_object(rt), {}
    else:
        live_obj = _without_managed_fields(live)
        managers = _decode_or_empty((live.get("metadata") or {}).get("managedFields"))
        if not managers:
            _record_update(
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
    me = _identity(manager, APPLY, rt.api_version, subresource)
    last = managers.get(me)
    merged = _merge(live_obj, applied, sch)
    managers[me] = _Entry(
        manager=manager,
        operation=APPLY,
        api_version=rt.api_version,
        subresource=subresource,
        time=last.time if last else None,
        fields=_without(_field_set(applied, sch), ignored),
    )
    merged = _prune(merged, managers, last, sch)
    _reassign(live_obj, merged, managers, me, force=force, sch=sch, ignored=ignored)
    result: dict[str, Any] = copy.deepcopy(merged)
    _restore_identity(result, live_obj)
    entry = managers.get(me)
    if entry is not None and now and (last is None or not _equal(result, live_obj)):
        entry.time = now
    meta = result.get("metadata")
    if not isinstance(meta, dict):
        meta = result["metadata"] = {}
    _store(meta, managers)
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
    sch = _root_schema(rt)
    live = _decode_or_empty((old.get("metadata") or {}).get("managedFields")) if old else {}
    if subresource or meta.get("managedFields") is None:
        managers = live
    elif meta["managedFields"] in ([], [{}]):
        managers = {}
    else:
        try:
            managers = _decode(meta["managedFields"]) or live
        except (ValueError, TypeError):
            managers = live
    _record_update(
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
    _store(meta, managers)
