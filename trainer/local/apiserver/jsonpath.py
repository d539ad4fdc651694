"""The JSONPath subset Kubernetes uses (client-go ``util/jsonpath``), for CRD
``additionalPrinterColumns`` and anything else that selects values out of an object.

Supported, as client-go parses them:

- ``.a.b``, ``.a['x.y']`` / ``.a["x.y"]``, escaped dots ``.a.x\\.y``, an optional leading ``$``
  and optional surrounding ``{...}`` (CRD columns are written without braces, kubectl
  templates with them);
- ``[0]``, ``[-1]``, slices ``[1:3]``, ``[-1:]``, ``[::2]``, unions ``[0,2]`` and ``['a','b']``;
- wildcards ``[*]`` and ``.*`` (list elements or map values), recursive descent ``..name``;
- filters ``[?(@.status=="True")]`` with ``==``, ``!=``, ``<``, ``>``, ``<=``, ``>=`` against
  string, number, ``true``/``false``/``null`` literals or another ``@``/``$`` path, and
  existence filters ``[?(@.name)]``.

Evaluation follows client-go with ``AllowMissingKeys(true)``, the mode the API server uses
for printer columns: a missing key, an index out of range or a field step on a non-object
yields no result rather than an error. Comparisons between values of different types (a
string against a number, a bool against anything else) never match, where client-go would
fail the whole expression; integers and floats compare numerically.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["JSONPathError", "Path", "find", "first", "format_value", "parse"]


class JSONPathError(ValueError):
    """The expression is not valid JSONPath."""


# --- the parsed form -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    names: tuple[str, ...]  # a union of keys ("*" handled by _Wildcard)


@dataclass(frozen=True)
class _Wildcard:
    pass


@dataclass(frozen=True)
class _Recursive:
    """``..``: the current values and every value below them, depth first."""


@dataclass(frozen=True)
class _Slice:
    start: int | None
    end: int | None
    step: int | None
    single: bool  # ``[i]``: one element (``end`` is derived)


@dataclass(frozen=True)
class _Union:
    parts: tuple[_Slice, ...]


@dataclass(frozen=True)
class _Literal:
    value: Any


@dataclass(frozen=True)
class _Filter:
    left: Path | _Literal
    op: str  # "exists" when there is no right-hand side
    right: Path | _Literal | None


_Step = _Field | _Wildcard | _Recursive | _Slice | _Union | _Filter


@dataclass(frozen=True)
class Path:
    """A parsed expression; ``relative`` paths start at ``@`` (inside filters)."""

    steps: tuple[_Step, ...]
    relative: bool = False
    text: str = ""

    def find(self, obj: Any) -> list[Any]:
        """Every value the path selects in ``obj``, in document order."""
        values = [obj]
        for step in self.steps:
            values = _apply(step, values)
            if not values:
                break
        return values


# --- parsing ---------------------------------------------------------------------------------

_STOP = set(" \t\n.[](){}=!<>,'\"@$")
_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str) -> JSONPathError:
        return JSONPathError(f"invalid JSONPath {self.text!r} at {self.pos}: {message}")

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def eof(self) -> bool:
        return self.pos >= len(self.text)

    def skip_spaces(self) -> None:
        while not self.eof() and self.text[self.pos] in " \t\n":
            self.pos += 1

    def expect(self, s: str) -> None:
        if self.peek(len(s)) != s:
            raise self.error(f"expected {s!r}")
        self.pos += len(s)

    def path(self, *, stop: str = "") -> Path:
        """A path up to the end of the text or a character in ``stop`` (at bracket depth 0)."""
        start = self.pos
        relative = False
        if self.peek() == "@":
            relative = True
            self.pos += 1
        elif self.peek() == "$":
            self.pos += 1
        steps: list[_Step] = []
        while not self.eof() and self.text[self.pos] not in stop:
            c = self.text[self.pos]
            if c == ".":
                if self.peek(2) == "..":
                    self.pos += 2
                    steps.append(_Recursive())
                    if self.peek() == "[":
                        continue
                else:
                    self.pos += 1
                if self.eof() or self.text[self.pos] in stop:
                    if steps and isinstance(steps[-1], _Recursive):
                        raise self.error("'..' must be followed by a field")
                    break  # a lone "." (or a trailing one) is the current object
                if self.peek() == "*":
                    self.pos += 1
                    steps.append(_Wildcard())
                elif self.peek() == "[":
                    continue
                else:
                    steps.append(_Field((self.identifier(),)))
            elif c == "[":
                steps.append(self.bracket())
            elif c in " \t\n":
                break
            elif not steps and not relative:
                # "metadata.name" without the leading dot: client-go accepts a bare field
                steps.append(_Field((self.identifier(),)))
            else:
                raise self.error(f"unexpected {c!r}")
        return Path(tuple(steps), relative, self.text[start : self.pos])

    def identifier(self) -> str:
        out: list[str] = []
        while not self.eof():
            c = self.text[self.pos]
            if c == "\\" and self.pos + 1 < len(self.text):
                out.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if c in _STOP:
                break
            out.append(c)
            self.pos += 1
        if not out:
            raise self.error("expected a field name")
        return "".join(out)

    def quoted(self) -> str:
        quote = self.text[self.pos]
        self.pos += 1
        out: list[str] = []
        while True:
            if self.eof():
                raise self.error("unterminated string")
            c = self.text[self.pos]
            if c == "\\" and self.pos + 1 < len(self.text):
                out.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            self.pos += 1
            if c == quote:
                return "".join(out)
            out.append(c)

    def integer(self) -> int | None:
        self.skip_spaces()
        start = self.pos
        if self.peek() == "-":
            self.pos += 1
        while not self.eof() and self.text[self.pos].isdigit():
            self.pos += 1
        token = self.text[start : self.pos]
        self.skip_spaces()
        if token in ("", "-"):
            if token == "-":
                raise self.error("expected a number after '-'")
            return None
        return int(token)

    def bracket(self) -> _Step:
        self.expect("[")
        self.skip_spaces()
        c = self.peek()
        if c == "*":
            self.pos += 1
            self.skip_spaces()
            self.expect("]")
            return _Wildcard()
        if c == "?":
            self.pos += 1
            self.skip_spaces()
            self.expect("(")
            flt = self.filter()
            self.skip_spaces()
            self.expect(")")
            self.skip_spaces()
            self.expect("]")
            return flt
        if c in ("'", '"'):
            names = [self.quoted()]
            self.skip_spaces()
            while self.peek() == ",":
                self.pos += 1
                self.skip_spaces()
                if self.peek() not in ("'", '"'):
                    raise self.error("expected a quoted key")
                names.append(self.quoted())
                self.skip_spaces()
            self.expect("]")
            return _Field(tuple(names))
        parts = [self.slice()]
        while self.peek() == ",":
            self.pos += 1
            parts.append(self.slice())
        self.expect("]")
        return parts[0] if len(parts) == 1 else _Union(tuple(parts))

    def slice(self) -> _Slice:
        start = self.integer()
        if self.peek() != ":":
            if start is None:
                raise self.error("expected an index, a slice, '*', a quoted key or a filter")
            return _Slice(start, None, None, single=True)
        self.pos += 1
        end = self.integer()
        step = None
        if self.peek() == ":":
            self.pos += 1
            step = self.integer()
            if step is not None and step <= 0:
                raise self.error("the step of a slice must be positive")
        return _Slice(start, end, step, single=False)

    def filter(self) -> _Filter:
        self.skip_spaces()
        left = self.operand()
        self.skip_spaces()
        for op in _OPERATORS:
            if self.peek(len(op)) == op:
                self.pos += len(op)
                self.skip_spaces()
                return _Filter(left, op, self.operand())
        if isinstance(left, _Literal):
            raise self.error("a filter without an operator must test a path")
        return _Filter(left, "exists", None)

    def operand(self) -> Path | _Literal:
        c = self.peek()
        if c in ("@", "$"):
            return self.path(stop=" \t\n)=!<>")
        if c in ("'", '"'):
            return _Literal(self.quoted())
        start = self.pos
        while not self.eof() and self.text[self.pos] not in " \t\n)=!<>":
            self.pos += 1
        token = self.text[start : self.pos]
        if token in ("true", "false"):
            return _Literal(token == "true")
        if token in ("null", "nil"):
            return _Literal(None)
        try:
            return _Literal(int(token))
        except ValueError:
            pass
        try:
            number = float(token)
        except ValueError:
            self.pos = start
            raise self.error(f"expected a path or a literal, found {token!r}") from None
        if not math.isfinite(number):
            raise self.error(f"expected a finite number, found {token!r}")
        return _Literal(number)


@functools.lru_cache(maxsize=512)
def parse(expr: str) -> Path:
    """Parse an expression (``.a.b``, ``{.a.b}`` or ``$.a.b``); cached, raises JSONPathError."""
    text = expr.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text:
        raise JSONPathError(f"invalid JSONPath {expr!r}: empty expression")
    parser = _Parser(text)
    path = parser.path()
    parser.skip_spaces()
    if not parser.eof():
        raise parser.error(f"unexpected {parser.peek()!r}")
    return path


def find(expr: str | Path, obj: Any) -> list[Any]:
    """Every value ``expr`` selects in ``obj`` (a missing path gives ``[]``)."""
    path = parse(expr) if isinstance(expr, str) else expr
    return path.find(obj)


def first(expr: str | Path, obj: Any, default: Any = None) -> Any:
    """The first value ``expr`` selects, or ``default``: what a printer column shows."""
    found = find(expr, obj)
    return found[0] if found else default


# --- evaluation ------------------------------------------------------------------------------


def _apply(step: _Step, values: list[Any]) -> list[Any]:
    out: list[Any] = []
    if isinstance(step, _Field):
        for v in values:
            if isinstance(v, dict):
                out.extend(v[n] for n in step.names if n in v)
    elif isinstance(step, _Wildcard):
        for v in values:
            if isinstance(v, dict):
                out.extend(v.values())
            elif isinstance(v, list):
                out.extend(v)
    elif isinstance(step, _Recursive):
        for v in values:
            _descend(v, out)
    elif isinstance(step, _Slice):
        for v in values:
            if isinstance(v, list):
                out.extend(_slice(step, v))
    elif isinstance(step, _Union):
        for v in values:
            if isinstance(v, list):
                for part in step.parts:
                    out.extend(_slice(part, v))
    else:
        for v in values:
            if isinstance(v, list):
                out.extend(item for item in v if _passes(step, item))
    return out


def _descend(value: Any, out: list[Any]) -> None:
    out.append(value)
    if isinstance(value, dict):
        for child in value.values():
            _descend(child, out)
    elif isinstance(value, list):
        for child in value:
            _descend(child, out)


def _slice(s: _Slice, items: list[Any]) -> list[Any]:
    n = len(items)
    if s.single:
        assert s.start is not None
        i = s.start + n if s.start < 0 else s.start
        return [items[i]] if 0 <= i < n else []
    start = 0 if s.start is None else (s.start + n if s.start < 0 else s.start)
    end = n if s.end is None else (s.end + n if s.end < 0 else s.end)
    start, end = max(start, 0), min(end, n)
    return items[start : end : s.step or 1] if start < end else []


def _operand(op: Path | _Literal, item: Any) -> list[Any]:
    if isinstance(op, _Literal):
        return [op.value]
    return op.find(item)


def _passes(f: _Filter, item: Any) -> bool:
    lefts = _operand(f.left, item)
    if f.op == "exists":
        return bool(lefts)
    assert f.right is not None
    rights = _operand(f.right, item)
    if len(lefts) != 1 or len(rights) != 1:
        return False  # client-go compares exactly one value with one value
    return _compare(f.op, lefts[0], rights[0])


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"


def _compare(op: str, left: Any, right: Any) -> bool:
    kind = _kind(left)
    if kind != _kind(right) or kind == "other":
        return False
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if kind in ("null", "bool"):
        return False  # only == and != are defined on these
    if op == "<":
        return bool(left < right)
    if op == ">":
        return bool(left > right)
    if op == "<=":
        return bool(left <= right)
    return bool(left >= right)


# --- printing --------------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """A selected value as client-go's ``PrintResults`` writes it: strings as they are, maps
    and lists as compact JSON, numbers and bools in Go's notation."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        # Python's repr is the shortest round-trip form; for the non-integral floats left here
        # its exponent thresholds and notation ("1e+21", "1.5e-05") are Go's too.
        return repr(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
