"""Label and field selectors, parsed once and matched against stored objects."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from trainer.local.apiserver.errors import bad_request

_REQ = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_.\-/]+)\s*"
    r"(?:(?P<op>==|=|!=|\s+in\s+|\s+notin\s+)\s*(?P<value>\([^)]*\)|[^,]*))?\s*$"
)


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, Any]) -> bool:
        if not isinstance(labels, Mapping):
            labels = _EMPTY
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        return not present or value not in self.values  # notin


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def parse_label_selector(selector: str | None) -> list[Requirement]:
    if not selector:
        return []
    out = []
    for part in _split(selector):
        m = _REQ.match(part)
        if not m:
            raise bad_request(f"unable to parse requirement: {part!r}")
        key, op, raw = m["key"], (m["op"] or "").strip(), (m["value"] or "").strip()
        if m["neg"]:
            if op:
                raise bad_request(f"unable to parse requirement: {part!r}")
            out.append(Requirement(key, "!exists"))
        elif not op:
            out.append(Requirement(key, "exists"))
        elif op in ("in", "notin"):
            if not (raw.startswith("(") and raw.endswith(")")):
                raise bad_request(f"unable to parse requirement: {part!r}: expected (values)")
            values = tuple(v.strip() for v in raw[1:-1].split(",") if v.strip())
            out.append(Requirement(key, op, values))
        else:
            out.append(Requirement(key, "!=" if op == "!=" else "=", (raw,)))
    return out


def parse_field_selector(selector: str | None) -> list[tuple[str, str, str]]:
    """``a.b=x,c!=y`` -> [(path, op, value)] with op ``=`` or ``!=``."""
    if not selector:
        return []
    out = []
    for part in _split(selector):
        for op in ("!=", "==", "="):
            if op in part:
                path, value = part.split(op, 1)
                out.append((path.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            raise bad_request(f"invalid field selector: {part!r}")
    return out


def field_value(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


Matcher = Callable[[dict[str, Any]], bool]
LabelTest = Callable[[Mapping[str, Any]], bool]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def label_test(req: Requirement) -> LabelTest:
    """``req.matches`` as a closure specialised to its operator, for matching many objects.

    Selector values are strings, so ``labels.get(key)`` (None when absent) compares exactly
    as the presence checks of :meth:`Requirement.matches` do.
    """
    key, values = req.key, req.values
    if req.op == "exists":
        return lambda labels: key in labels
    if req.op == "!exists":
        return lambda labels: key not in labels
    if req.op == "=":
        value = values[0]
        return lambda labels: labels.get(key) == value
    if req.op == "!=":
        value = values[0]
        return lambda labels: labels.get(key) != value
    if req.op == "in":
        return lambda labels: labels.get(key) in values
    return lambda labels: labels.get(key) not in values  # notin


def labels_of(obj: Any) -> Mapping[str, Any]:
    """An object's labels, or an empty mapping when it has none or they are not a map (a
    stored object is validated on write, but a reader never trusts a type)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else _EMPTY


def matcher(label_selector: str | None, field_selector: str | None) -> Matcher | None:
    """A predicate for objects, or None when there is no selector (matches everything).

    The selectors are parsed and compiled once: a list or watch then runs one small closure
    per requirement and object.
    """
    labels = [label_test(r) for r in parse_label_selector(label_selector)]
    fields = parse_field_selector(field_selector)
    if not labels and not fields:
        return None
    if len(labels) == 1 and not fields:
        (test,) = labels

        def match_one(obj: dict[str, Any]) -> bool:
            return test(labels_of(obj))

        return match_one

    def match(obj: dict[str, Any]) -> bool:
        meta_labels = labels_of(obj)
        for test in labels:
            if not test(meta_labels):
                return False
        for path, op, value in fields:
            got = field_value(obj, path)
            if (got == value) != (op == "="):
                return False
        return True

    return match


TRUE_VALUES = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def flag(value: str | None) -> bool:
    """A boolean query parameter, parsed like Go's strconv.ParseBool (clients send ``true``,
    ``True`` or ``1``)."""
    return value in TRUE_VALUES
