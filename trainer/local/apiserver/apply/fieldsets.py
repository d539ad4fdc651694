"""Server-side apply: path elements and field sets.

A path element is spelled as in the ``FieldsV1`` wire format (``f:<field>``, ``k:{...}`` for a
list-map item, ``v:<json>`` for a set item); a field set is a Python set of paths, turned to
and from the nested ``fieldsV1`` maps of ``managedFields`` (:class:`Trie`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from trainer.local.apiserver.apply.common import STRIPPED, Path
from trainer.local.apiserver.apply.schema import Schema

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


def item_pes(items: list[Any], sch: Schema) -> list[str] | None:
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


class Trie:
    """Field set as a tree, for the FieldsV1 encoding and Kubernetes' iteration order."""

    __slots__ = ("children", "member")

    def __init__(self) -> None:
        self.member = False
        self.children: dict[str, Trie] = {}

    @classmethod
    def of(cls, paths: Iterable[Path]) -> Trie:
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


def parse_fields_v1(node: Any, prefix: Path, out: set[Path]) -> None:
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
        parse_fields_v1(sub, path, out)


def field_set(value: Any, sch: Schema, path: Path = (), out: set[Path] | None = None) -> set[Path]:
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
            field_set(sub, child, sub_path, out)
            if not declared:
                out.add(sub_path)
    elif isinstance(value, list):
        pes = item_pes(value, sch)
        if pes is None:
            out.add(path)
            return out
        item = sch.item()
        for pe, sub in zip(pes, value, strict=True):
            field_set(sub, item, (*path, pe), out)
            out.add((*path, pe))
    else:
        out.add(path)
    return out


def ensure_named(paths: set[Path], root: Schema) -> set[Path]:
    """``paths`` plus every declared field that has a descendant in it.

    (Set.EnsureNamedFieldsAreMembers: removal works on members, and owning ``a.b.c`` must also
    protect the struct fields ``a`` and ``a.b`` that hold it.)
    """
    out = set(paths)
    nodes: dict[Path, tuple[Schema, bool]] = {(): (root, False)}

    def node(prefix: Path) -> tuple[Schema, bool]:
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


def without(paths: set[Path], prefixes: Iterable[Path]) -> set[Path]:
    """``paths`` minus everything at or below ``prefixes`` (Set.RecursiveDifference)."""
    roots = tuple(prefixes)
    if not roots:
        return paths
    return {p for p in paths if not any(p[: len(r)] == r for r in roots)}


def strip_meta(paths: set[Path]) -> set[Path]:
    return paths - STRIPPED
