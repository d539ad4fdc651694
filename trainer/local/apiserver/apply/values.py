"""Server-side apply: comparing, merging and removing values along a schema (which fields
changed between two objects, the applied configuration merged into the live object, removed
fields taken out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.local.apiserver.apply.common import MISSING, Path
from trainer.local.apiserver.apply.fieldsets import item_pes, without
from trainer.local.apiserver.apply.schema import Schema

# --- values: compare, merge, remove ---------------------------------------------------------


def equal(a: Any, b: Any) -> bool:
    """JSON equality (``True`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(b, dict | list):
        return False
    return bool(a == b)


def _pair_kind(lhs: Any, rhs: Any, sch: Schema) -> str:
    """``map``/``list`` when both present values merge granularly, ``mixed`` on a type change,
    else ``leaf`` (scalars, atomic or empty containers). Called for every node of every
    object written: written without building anything."""
    l_missing, r_missing = lhs is MISSING, rhs is MISSING
    l_dict, r_dict = isinstance(lhs, dict), isinstance(rhs, dict)
    if (l_dict or l_missing) and (r_dict or r_missing):
        if sch.atomic_map or not ((l_dict and lhs) or (r_dict and rhs)):
            return "leaf"
        return "map"
    l_list, r_list = isinstance(lhs, list), isinstance(rhs, list)
    if (l_list or l_missing) and (r_list or r_missing):
        if not ((l_list and lhs) or (r_list and rhs)):
            return "leaf"
        if (l_list and item_pes(lhs, sch) is None) or (r_list and item_pes(rhs, sch) is None):
            return "leaf"
        return "list"
    if not (l_missing or r_missing) and (l_dict or r_dict or l_list or r_list):
        return "mixed"
    return "leaf"


@dataclass
class Diff:
    added: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)


def _compare(lhs: Any, rhs: Any, sch: Schema, path: Path, diff: Diff) -> None:
    """Record what changed from ``lhs`` to ``rhs`` (TypedValue.Compare)."""
    if lhs is rhs or (type(lhs) is type(rhs) and isinstance(lhs, dict | list) and lhs == rhs):
        # Nothing below changed: most of an object, on most writes (a status update leaves
        # the spec alone). Python's ``==`` compares in C; it takes ``True`` for ``1`` where
        # :func:`equal` does not, which only a schemaless field could hold either way.
        return
    kind = _pair_kind(lhs, rhs, sch)
    if kind == "leaf":
        if lhs is MISSING:
            diff.added.add(path)
        elif rhs is MISSING:
            diff.removed.add(path)
        elif not equal(lhs, rhs):
            diff.modified.add(path)
        return
    if kind == "mixed":
        diff.modified.add(path)
        for old, new in ((lhs, MISSING), (MISSING, rhs)):
            single = _pair_kind(old, new, sch)
            if single in ("map", "list"):
                _compare_items(old, new, single, sch, path=path, diff=diff)
        return
    _compare_items(lhs, rhs, kind, sch, path=path, diff=diff)
    if lhs is MISSING:
        diff.added.add(path)
    elif rhs is MISSING:
        diff.removed.add(path)


def _compare_items(lhs: Any, rhs: Any, kind: str, sch: Schema, *, path: Path, diff: Diff) -> None:
    if kind == "map":
        left = lhs if isinstance(lhs, dict) else {}
        right = rhs if isinstance(rhs, dict) else {}
        for key in [*left, *(k for k in right if k not in left)]:
            child = sch.child(key)[0]
            _compare(
                left.get(key, MISSING), right.get(key, MISSING), child, (*path, f"f:{key}"), diff
            )
        return
    left_items = _index(lhs, sch) if isinstance(lhs, list) else {}
    right_items = _index(rhs, sch) if isinstance(rhs, list) else {}
    item = sch.item()
    for pe, value in right_items.items():
        _compare(left_items.get(pe, MISSING), value, item, (*path, pe), diff)
    for pe, value in left_items.items():
        if pe not in right_items:
            _compare(value, MISSING, item, (*path, pe), diff)


def _index(items: list[Any], sch: Schema) -> dict[str, Any]:
    pes = item_pes(items, sch) or []
    return dict(zip(pes, items, strict=True))


def diff_objects(old: dict[str, Any], new: dict[str, Any], sch: Schema, ignored: set[Path]) -> Diff:
    diff = Diff()
    _compare(old, new, sch, (), diff)
    return Diff(
        without(diff.added, ignored),
        without(diff.modified, ignored),
        without(diff.removed, ignored),
    )


def merge(lhs: Any, rhs: Any, sch: Schema) -> Any:
    """``rhs`` (the applied configuration) merged into ``lhs`` (TypedValue.Merge)."""
    if rhs is MISSING:
        return lhs
    if lhs is MISSING:
        return rhs
    kind = _pair_kind(lhs, rhs, sch)
    if kind == "map":
        out = {
            key: merge(value, rhs.get(key, MISSING), sch.child(key)[0])
            for key, value in lhs.items()
        }
        out.update((key, value) for key, value in rhs.items() if key not in lhs)
        return out
    if kind == "list":
        return _merge_list(lhs, rhs, sch)
    return rhs


def _merge_list(lhs: list[Any], rhs: list[Any], sch: Schema) -> list[Any]:
    """Merge two granular lists item by item, ordered like structured-merge-diff does:
    items keep the live order, the configuration's order wins among the items both share,
    and new items are inserted where the configuration puts them."""
    left_order, right_order = item_pes(lhs, sch) or [], item_pes(rhs, sch) or []
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
                out.append(merge(left[pe], right[pe], item))
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
            out.append(merge(left.get(pe, MISSING), right[pe], item))
            done.add(pe)
            ri += 1
            if next_shared is not None and next_shared == pe:
                next_shared = shared.pop(0) if shared else None
            continue
        li += 1  # defensive: a live item the configuration already placed
    return out


def _remove(value: Any, sch: Schema, paths: set[Path], prefixes: set[Path], path: Path) -> Any:
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
                if kept_value is MISSING:
                    continue
            out[key] = kept_value
        return out if out else MISSING
    if isinstance(value, list) and value:
        pes = item_pes(value, sch)
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
                if kept_value is MISSING:
                    continue
            kept.append(kept_value)
        return kept if kept else MISSING
    return value


def remove_paths(obj: dict[str, Any], paths: set[Path], sch: Schema) -> dict[str, Any]:
    if not paths:
        return obj
    prefixes = {p[:i] for p in paths for i in range(1, len(p))}
    out = _remove(obj, sch, paths, prefixes, ())
    return out if isinstance(out, dict) else {}
