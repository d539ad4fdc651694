"""``x-kubernetes-validations``: CEL rules of a structural schema, evaluated with cel-python.

Each rule runs with ``self`` bound to the value at its schema node and, for a transition rule (one
that references ``oldSelf``), ``oldSelf`` bound to the old value at the same node. Values are
converted the way the apiserver types them from the schema: ``number`` fields are doubles,
``integer`` fields ints, ``date``/``date-time`` strings timestamps, ``duration`` strings
durations, ``byte`` strings bytes; object properties are reachable by their CEL-escaped names
(``x-y`` as ``x__dash__y``), and an absent property makes ``has(self.p)`` false.

cel-python differs from cel-go in places; this module narrows the gap:

* equality and ``in`` are CEL's heterogeneous equality (``true == 1`` and ``1 == null`` are
  false, not errors or true; ``1 == 1.0`` is true), ``<``/``<=``/``>``/``>=`` compare across
  int, uint and double, and lists with ``x-kubernetes-list-type`` ``set`` or ``map`` compare
  without regard to order, like Kubernetes;
* a subset of the Kubernetes CEL libraries is provided: ``lowerAscii``, ``upperAscii``, ``trim``,
  ``replace``, ``split``, ``join``, ``indexOf``, ``lastIndexOf``, ``substring``, ``charAt``,
  ``isSorted``, ``sum``, ``max``, ``find``, ``findAll``;
* ``optionalOldSelf`` binds ``oldSelf`` to an optional with ``hasValue()``, ``value()`` and
  ``orValue(x)``.

On an update, rules that do not reference ``oldSelf`` are not evaluated on a node whose value
equals the old one: kube-apiserver's CRD validation ratcheting (on by default since 1.30)
ignores their failures there, and skipping them saves a status patch from re-checking the
whole spec (docs/local-plane.md, "Throughput"). Transition rules always run.

Every failure (a syntax error, a missing key, a type mismatch) becomes a :class:`FieldError`;
nothing here raises.
"""

from __future__ import annotations

import base64
import binascii
import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, base_functions

from trainer.api.errors import DUPLICATE, FORBIDDEN, INVALID, REQUIRED, FieldError, join_path

from .defaults import (
    ABSENT,
    EMBEDDED_FIELDS,
    Schema,
    child_path,
    child_schema,
    compile_regex,
    is_embedded,
    list_map_key_values,
    map_key_identity,
    properties_of,
    sub_schema,
)
from .memo import Outcome, RuleMemo, value_key
from .readset import ReadSet, merge, project, read_set
from .readset import escape_property_name as _escape_property_name

# --- values ---------------------------------------------------------------------------------

escape_property_name: Final = _escape_property_name
"""The CEL name of an object property (defined with the read sets, which match on it)."""


class UnorderedList(celtypes.ListType):
    """A list with ``x-kubernetes-list-type`` ``set`` or ``map``: equality ignores order."""


@dataclass(frozen=True)
class OptionalValue:
    """CEL's ``optional(T)``, for ``oldSelf`` under ``optionalOldSelf: true``."""

    present: bool
    value: Any = None


def to_cel(value: Any, schema: Schema | None = None, *, resource: bool = False) -> Any:
    """Convert a JSON value to a CEL value, typed by its schema node (None: untyped JSON).

    ``resource`` marks a resource root, where ``apiVersion``, ``kind`` and ``metadata`` are
    reachable even when the schema does not declare them (as in an embedded resource).
    Raises ``ValueError``/``TypeError`` for values CEL cannot hold (ints beyond 64 bits).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    schema_type = schema.get("type") if schema is not None else None
    if isinstance(value, int):
        if schema_type == "number":
            return celtypes.DoubleType(float(value))
        return celtypes.IntType(value)
    if isinstance(value, float):
        if schema_type == "integer" and value.is_integer():
            return celtypes.IntType(int(value))
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return _string_to_cel(value, schema)
    if isinstance(value, list | tuple):
        items = sub_schema(schema.get("items")) if schema is not None else None
        converted = [to_cel(item, items) for item in value]
        list_type = schema.get("x-kubernetes-list-type") if schema is not None else None
        if list_type in ("set", "map"):
            return UnorderedList(converted)
        return celtypes.ListType(converted)
    if isinstance(value, Mapping):
        return _object_to_cel(value, schema, resource=resource)
    raise TypeError(f"a value of type {type(value).__name__} cannot be used in CEL")


def _string_to_cel(value: str, schema: Schema | None) -> Any:
    fmt = schema.get("format") if schema is not None else None
    try:
        if fmt in ("date-time", "date"):
            return celtypes.TimestampType(value)
        if fmt == "duration":
            return celtypes.DurationType(value)
        if fmt == "byte":
            return celtypes.BytesType(base64.b64decode(value, validate=True))
    except (ValueError, TypeError, binascii.Error):
        pass  # not in its format: schema validation reports it; CEL sees the string
    return celtypes.StringType(value)


def _object_to_cel(value: Mapping[Any, Any], schema: Schema | None, *, resource: bool) -> Any:
    out = celtypes.MapType()
    props = properties_of(schema) if schema is not None else {}
    if schema is not None and props:
        # An object with properties: only declared properties are reachable, by CEL name.
        for key, item in value.items():
            if not isinstance(key, str) or key not in props:
                continue
            name = escape_property_name(key)
            if name is not None:
                out[celtypes.StringType(name)] = to_cel(item, sub_schema(props[key]))
        if resource or is_embedded(schema):
            for key in EMBEDDED_FIELDS:
                if key in value and key not in props:
                    out[celtypes.StringType(key)] = to_cel(value[key])
        return out
    items = sub_schema(schema.get("additionalProperties")) if schema is not None else None
    for key, item in value.items():
        out[celtypes.StringType(str(key))] = to_cel(item, items)
    return out


# --- equality -------------------------------------------------------------------------------

_NUMBERS: Final = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality, with Kubernetes' unordered ``set``/``map`` lists."""
    a_bool = isinstance(a, bool | celtypes.BoolType)
    b_bool = isinstance(b, bool | celtypes.BoolType)
    if a_bool or b_bool:
        return a_bool and b_bool and bool(a) == bool(b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, _NUMBERS) and isinstance(b, _NUMBERS):
        return _native_number(a) == _native_number(b)
    if isinstance(a, str) and isinstance(b, str):
        return str(a) == str(b)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        if isinstance(a, UnorderedList) or isinstance(b, UnorderedList):
            return _same_elements(a, b)
        return all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if len(a) != len(b):
            return False
        return all(key in b and cel_equal(item, b[key]) for key, item in a.items())
    if isinstance(a, OptionalValue) and isinstance(b, OptionalValue):
        return a.present == b.present and (not a.present or cel_equal(a.value, b.value))
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except TypeError:
        return False


def _native_number(value: Any) -> int | float:
    """A CEL number as a Python number: Python compares ints and floats exactly."""
    return float(value) if isinstance(value, celtypes.DoubleType) else int(value)


def _ordering(name: str, base: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``<``, ``<=``, ``>``, ``>=`` with cel-go's comparisons across int, uint and double."""
    compare: Callable[[Any, Any], bool] = getattr(operator, name)

    def ordering(a: Any, b: Any) -> Any:
        if (
            isinstance(a, _NUMBERS)
            and isinstance(b, _NUMBERS)
            and type(a) is not type(b)
            and not isinstance(a, celtypes.BoolType)
            and not isinstance(b, celtypes.BoolType)
        ):
            return celtypes.BoolType(compare(_native_number(a), _native_number(b)))
        return base(a, b)

    ordering.__name__ = f"cel_{name}"
    return ordering


def _same_elements(a: list[Any], b: list[Any]) -> bool:
    unmatched = list(b)
    for x in a:
        for i, y in enumerate(unmatched):
            if cel_equal(x, y):
                del unmatched[i]
                break
        else:
            return False
    return True


def _eq(a: Any, b: Any) -> Any:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    return celtypes.BoolType(cel_equal(a, b))


def _ne(a: Any, b: Any) -> Any:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    return celtypes.BoolType(not cel_equal(a, b))


def _in(item: Any, container: Any) -> Any:
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if isinstance(container, list):
        return celtypes.BoolType(any(cel_equal(item, x) for x in container))
    if isinstance(container, Mapping):
        return celtypes.BoolType(any(cel_equal(item, k) for k in container))
    raise TypeError(f"no such overload: in {type(container).__name__}")


# --- the Kubernetes CEL libraries (a subset) --------------------------------------------------


def _want_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"no such overload: expected string, got {type(value).__name__}")
    return str(value)


def _want_int(value: Any) -> int:
    if isinstance(value, bool | celtypes.BoolType) or not isinstance(value, int):
        raise TypeError(f"no such overload: expected int, got {type(value).__name__}")
    return int(value)


def _want_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"no such overload: expected list, got {type(value).__name__}")
    return value


def _lower_ascii(s: Any) -> Any:
    return celtypes.StringType(
        "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in _want_str(s))
    )


def _upper_ascii(s: Any) -> Any:
    return celtypes.StringType(
        "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in _want_str(s))
    )


def _trim(s: Any) -> Any:
    return celtypes.StringType(_want_str(s).strip())


def _replace(s: Any, old: Any, new: Any, n: Any = -1) -> Any:
    return celtypes.StringType(_want_str(s).replace(_want_str(old), _want_str(new), _want_int(n)))


def _split(s: Any, sep: Any, n: Any = -1) -> Any:
    text, separator, limit = _want_str(s), _want_str(sep), _want_int(n)
    if limit == 0:
        return celtypes.ListType()
    if separator == "":
        parts = list(text)
        if limit > 0 and len(parts) > limit:
            parts = [*parts[: limit - 1], "".join(parts[limit - 1 :])]
    else:
        parts = text.split(separator, limit - 1 if limit > 0 else -1)
    return celtypes.ListType(celtypes.StringType(p) for p in parts)


def _join(items: Any, sep: Any = "") -> Any:
    return celtypes.StringType(
        _want_str(sep).join(_want_str(x) for x in _want_list(items)),
    )


def _index_of(target: Any, x: Any, start: Any = 0) -> Any:
    if isinstance(target, list):
        for i, item in enumerate(target):
            if cel_equal(item, x):
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, begin = _want_str(target), _want_int(start)
    if not 0 <= begin <= len(text):
        raise IndexError(f"index out of range: {begin}")
    return celtypes.IntType(text.find(_want_str(x), begin))


def _last_index_of(target: Any, x: Any) -> Any:
    if isinstance(target, list):
        for i in range(len(target) - 1, -1, -1):
            if cel_equal(target[i], x):
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    return celtypes.IntType(_want_str(target).rfind(_want_str(x)))


def _substring(s: Any, start: Any, end: Any = None) -> Any:
    text = _want_str(s)
    begin = _want_int(start)
    stop = len(text) if end is None else _want_int(end)
    if not 0 <= begin <= stop <= len(text):
        raise IndexError(f"index out of range: {begin}..{stop}")
    return celtypes.StringType(text[begin:stop])


def _char_at(s: Any, i: Any) -> Any:
    text, index = _want_str(s), _want_int(i)
    if not 0 <= index <= len(text):
        raise IndexError(f"index out of range: {index}")
    return celtypes.StringType(text[index : index + 1])


def _is_sorted(items: Any) -> Any:
    values = _want_list(items)
    return celtypes.BoolType(all(values[i] <= values[i + 1] for i in range(len(values) - 1)))


def _sum(items: Any) -> Any:
    values = _want_list(items)
    if not values:
        return celtypes.IntType(0)
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


def _max(items: Any) -> Any:
    values = _want_list(items)
    if not values:
        raise ValueError("max called on empty list")
    best = values[0]
    for v in values[1:]:
        best = max(best, v)
    return best


def _regex(pattern: Any) -> Any:
    compiled, error = compile_regex(_want_str(pattern))
    if compiled is None:
        raise ValueError(f"invalid regex {pattern!r}: {error}")
    return compiled


def _find(s: Any, pattern: Any) -> Any:
    match = _regex(pattern).search(_want_str(s))
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(s: Any, pattern: Any, n: Any = -1) -> Any:
    limit = _want_int(n)
    found = [m.group(0) for m in _regex(pattern).finditer(_want_str(s))]
    if limit >= 0:
        found = found[:limit]
    return celtypes.ListType(celtypes.StringType(f) for f in found)


def _want_optional(value: Any) -> OptionalValue:
    if not isinstance(value, OptionalValue):
        raise TypeError(f"no such overload: expected optional, got {type(value).__name__}")
    return value


def _has_value(o: Any) -> Any:
    return celtypes.BoolType(_want_optional(o).present)


def _value(o: Any) -> Any:
    opt = _want_optional(o)
    if not opt.present:
        raise ValueError("optional.none() dereference")
    return opt.value


def _or_value(o: Any, default: Any) -> Any:
    opt = _want_optional(o)
    return opt.value if opt.present else default


_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "_==_": _eq,
    "_!=_": _ne,
    "_in_": _in,
    "_<_": _ordering("lt", base_functions["_<_"]),
    "_<=_": _ordering("le", base_functions["_<=_"]),
    "_>_": _ordering("gt", base_functions["_>_"]),
    "_>=_": _ordering("ge", base_functions["_>=_"]),
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "trim": _trim,
    "replace": _replace,
    "split": _split,
    "join": _join,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": _char_at,
    "isSorted": _is_sorted,
    "sum": _sum,
    "max": _max,
    "find": _find,
    "findAll": _find_all,
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
}

# --- compiling and running ------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledRule:
    """A rule compiled once: either a program or the compile error, never both."""

    rule: str
    program: Any = None
    error: str = ""
    transition: bool = False
    reads_self: ReadSet = None
    """What the rule reads of ``self`` (:mod:`.readset`); None: all of it."""
    reads_old: ReadSet = None


class _Runner(celpy.InterpretedRunner):
    """cel-python's interpreter, with the base activation built once per program.

    ``InterpretedRunner`` rebuilds it (loading every well-known type annotation) on each
    evaluation; the evaluator only ever clones it to bind the variables, so one is enough.
    """

    _base: Any = None

    def new_activation(self) -> Any:
        if self._base is None:
            self._base = super().new_activation()
        return self._base


@functools.cache
def _environment() -> Any:
    return celpy.Environment(runner_class=_Runner)


@functools.lru_cache(maxsize=4096)
def compile_rule(rule: str) -> CompiledRule:
    """Compile a CEL expression (cached per text); errors are returned, not raised."""
    env = _environment()
    try:
        ast = env.compile(rule)
        program = env.program(ast, functions=_FUNCTIONS)
    except CELParseError as exc:
        line = getattr(exc, "line", None)
        column = getattr(exc, "column", None)
        where = f" at line {line}, column {column}" if line is not None else ""
        return CompiledRule(rule, error=f"syntax error{where}: {rule.strip()}")
    except Exception as exc:
        return CompiledRule(rule, error=_exception_text(exc))
    return CompiledRule(
        rule,
        program=program,
        transition=_references_old_self(ast),
        reads_self=read_set(ast, "self"),
        reads_old=read_set(ast, "oldSelf"),
    )


def _references_old_self(ast: Any) -> bool:
    """Whether the parse tree uses the variable ``oldSelf`` (not a field or string of that name)."""
    find_data = getattr(ast, "find_data", None)
    if find_data is None:
        return False
    return any(
        isinstance(child, str) and child == "oldSelf"
        for node in find_data("ident")
        for child in node.children
    )


_NO_SUCH_MEMBER: Final = re.compile(r"^no such member in mapping: '(.*)'$")


def _exception_text(exc: BaseException) -> str:
    if isinstance(exc, CELEvalError) and exc.args and isinstance(exc.args[0], str):
        text = exc.args[0]
        missing = _NO_SUCH_MEMBER.match(text)
        if missing:
            return f"no such key: {missing.group(1)}"
        return text
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def evaluate(compiled: CompiledRule, activation: Mapping[str, Any]) -> tuple[Any, str]:
    """Run a compiled rule: ``(result, "")`` or ``(None, error text)``. Never raises."""
    if compiled.program is None:
        return None, compiled.error or "not compiled"
    try:
        result = compiled.program.evaluate(dict(activation))
    except Exception as exc:
        return None, _exception_text(exc)
    if isinstance(result, CELEvalError):
        return None, _exception_text(result)
    return result, ""


def evaluate_rule(rule: str, variables: Mapping[str, Any]) -> tuple[Any, str]:
    """Compile (cached) and run ``rule`` on plain JSON ``variables``; for ad-hoc checks."""
    compiled = compile_rule(rule)
    if compiled.error:
        return None, f"rule compile error: {compiled.error}"
    try:
        activation = {name: to_cel(value) for name, value in variables.items()}
    except (TypeError, ValueError) as exc:
        return None, f"rule evaluation error: {_exception_text(exc)}"
    result, error = evaluate(compiled, activation)
    if error:
        return None, f"rule evaluation error: {error}"
    return result, ""


# --- walking the schema -----------------------------------------------------------------------

_REASONS: Final = {
    "FieldValueForbidden": FORBIDDEN,
    "FieldValueRequired": REQUIRED,
    "FieldValueDuplicate": DUPLICATE,
    "FieldValueInvalid": INVALID,
}


def compile_rules(schema: Any) -> int:
    """Compile every rule and messageExpression of a schema now (cached by text), as
    kube-apiserver does when a CRD is registered, rather than on the first write; the count."""
    count = 0
    if isinstance(schema, Mapping):
        specs = schema.get("x-kubernetes-validations")
        for spec in specs if isinstance(specs, list) else ():
            if not isinstance(spec, Mapping):
                continue
            for text in (spec.get("rule"), spec.get("messageExpression")):
                if isinstance(text, str) and text.strip():
                    compile_rule(text)
                    count += 1
        children: Iterable[Any] = schema.values()
    elif isinstance(schema, list):
        children = schema
    else:
        return 0
    return count + sum(compile_rules(v) for v in children)


def has_rules(schema: Any) -> bool:
    """Whether any node of the schema carries ``x-kubernetes-validations``."""
    if isinstance(schema, Mapping):
        if schema.get("x-kubernetes-validations"):
            return True
        return any(has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_rules(v) for v in schema)
    return False


def validate_rules(
    schema: Schema, obj: Any, old: Any = ABSENT, *, path: str = "", memo: RuleMemo | None = None
) -> list[FieldError]:
    """Evaluate every ``x-kubernetes-validations`` rule of the schema on ``obj``.

    ``old`` is the previous object of an update (``ABSENT`` on create); transition rules run
    only where the node exists in both, unless the rule sets ``optionalOldSelf``. Old values are
    correlated by property name, map key and ``x-kubernetes-list-type: map`` keys; items of
    other lists have no old value. ``memo`` (for this schema only) remembers rule outcomes.
    """
    errors: list[FieldError] = []
    _walk(schema, obj, old, path, errors, resource=True, memo=memo)
    return errors


def _walk(
    schema: Schema,
    value: Any,
    old: Any,
    path: str,
    errors: list[FieldError],
    *,
    resource: bool,
    unchanged: bool = False,
    memo: RuleMemo | None = None,
) -> None:
    """``unchanged``: an ancestor object equals its old value, so this node does too
    (ratcheting)."""
    if value is None:
        return
    if memo is not None and not memo.node_fact(schema, has_rules):
        return  # no rule at or below this node
    if not unchanged and old is not ABSENT and old is not None:
        unchanged = bool(value == old)
    rules = schema.get("x-kubernetes-validations")
    if isinstance(rules, list) and rules:
        _run_rules(
            schema,
            rules,
            value=value,
            old=old,
            path=path,
            errors=errors,
            resource=resource,
            ratchet=unchanged,
            memo=memo,
        )
    if isinstance(value, Mapping):
        for key, item in value.items():
            sub, is_prop = child_schema(schema, key)
            if sub is None:
                continue
            old_item = old.get(key, ABSENT) if isinstance(old, Mapping) else ABSENT
            _walk(
                sub,
                item,
                old_item,
                child_path(path, key, is_prop),
                errors,
                resource=False,
                unchanged=unchanged,
                memo=memo,
            )
    elif isinstance(value, list):
        items = sub_schema(schema.get("items"))
        if items is None:
            return
        old_items = _correlatable(schema, old)
        for i, item in enumerate(value):
            old_value: Any = ABSENT
            if old_items and isinstance(item, Mapping):
                identity = map_key_identity(list_map_key_values(schema, item))
                old_value = old_items.get(identity, ABSENT)
            # Items are not ratcheted through their list: only map-list items are correlated
            # with an old item (and compared with it), as kube-apiserver correlates them.
            _walk(items, item, old_value, join_path(path, i), errors, resource=False, memo=memo)


def _correlatable(schema: Schema, old: Any) -> dict[Any, Any]:
    """Old items of an ``x-kubernetes-list-type: map`` list by their keys; else nothing."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return {}
    out: dict[Any, Any] = {}
    for item in old:
        if isinstance(item, Mapping):
            out.setdefault(map_key_identity(list_map_key_values(schema, item)), item)
    return out


def _run_rules(
    schema: Schema,
    rules: Iterable[Any],
    *,
    value: Any,
    old: Any,
    path: str,
    errors: list[FieldError],
    resource: bool,
    ratchet: bool = False,
    memo: RuleMemo | None = None,
) -> None:
    """Evaluate ``rules`` at one node; with ``ratchet`` (the node is unchanged by an update)
    only the transition rules."""
    has_old = old is not ABSENT and old is not None
    for spec in rules:
        if not isinstance(spec, Mapping):
            continue
        rule = spec.get("rule")
        if not isinstance(rule, str):
            errors.append(FieldError(path, INVALID, "rule compile error: no rule", value))
            continue
        compiled = compile_rule(rule)
        if compiled.error:
            errors.append(FieldError(path, INVALID, f"rule compile error: {compiled.error}", value))
            continue
        if ratchet and not compiled.transition:
            continue  # unchanged: kube-apiserver would ignore its failure (ratcheting)
        optional_old = spec.get("optionalOldSelf") is True
        if compiled.transition and not has_old and not optional_old:
            continue  # a transition rule runs only on update, where the node existed
        kind, text = _outcome(
            schema,
            spec,
            compiled,
            value=value,
            old=old if has_old and compiled.transition else ABSENT,
            optional_old=optional_old,
            resource=resource,
            memo=memo,
        )
        if kind == "ok":
            continue
        if kind == "error":
            errors.append(FieldError(path, INVALID, text or "", value))
            continue
        errors.append(_failure(schema, spec, rule=rule, value=value, path=path, message=text))


def _outcome(
    schema: Schema,
    spec: Mapping[str, Any],
    compiled: CompiledRule,
    *,
    value: Any,
    old: Any,
    optional_old: bool,
    resource: bool,
    memo: RuleMemo | None,
) -> Outcome:
    """The outcome of one rule on the values it reads, from ``memo`` when it is there."""
    expression = spec.get("messageExpression")
    message = None
    if isinstance(expression, str) and expression.strip():
        message = compile_rule(expression)
    reads_self, reads_old = compiled.reads_self, compiled.reads_old
    if message is not None and message.program is not None:
        reads_self = merge(reads_self, message.reads_self)
        reads_old = merge(reads_old, message.reads_old)
    self_value = project(value, reads_self)
    old_value = project(old, reads_old) if old is not ABSENT else ABSENT
    key: tuple[Any, ...] | None = None
    if memo is not None:
        self_key = value_key(self_value, memo.max_key_bytes)
        old_key = b"" if old_value is ABSENT else value_key(old_value, memo.max_key_bytes)
        if self_key is not None and old_key is not None:
            # The node and the entry both: one entry object may sit in two nodes of a schema
            # built in code (or copied with its aliases), typed differently.
            place = (id(schema), id(spec))
            key = (place, compiled.rule, expression, optional_old, resource, self_key, old_key)
            found = memo.get(key)
            if found is not None:
                return found
    outcome = _evaluate_outcome(
        schema,
        compiled,
        message,
        value=self_value,
        old=old_value,
        optional_old=optional_old,
        resource=resource,
    )
    if memo is not None and key is not None:
        memo.put(key, outcome, keep=(schema, spec))
    return outcome


def _evaluate_outcome(
    schema: Schema,
    compiled: CompiledRule,
    message: CompiledRule | None,
    *,
    value: Any,
    old: Any,
    optional_old: bool,
    resource: bool,
) -> Outcome:
    rule = compiled.rule
    try:
        activation: dict[str, Any] = {"self": to_cel(value, schema, resource=resource)}
        if compiled.transition:
            has_old = old is not ABSENT
            old_cel = to_cel(old, schema, resource=resource) if has_old else None
            activation["oldSelf"] = OptionalValue(has_old, old_cel) if optional_old else old_cel
    except (TypeError, ValueError, OverflowError) as exc:
        return "error", f"rule evaluation error: {_exception_text(exc)}"
    result, error = evaluate(compiled, activation)
    if error:
        return "error", f"rule evaluation error: {error} evaluating rule: {rule.strip()}"
    if not isinstance(result, bool | celtypes.BoolType):
        return "error", f"rule evaluation error: rule did not evaluate to a bool: {rule.strip()}"
    if result:
        return "ok", None
    return "failed", _message_from_expression(message, activation)


def _failure(
    schema: Schema,
    spec: Mapping[str, Any],
    *,
    rule: str,
    value: Any,
    path: str,
    message: str | None,
) -> FieldError:
    if message is None:
        text = spec.get("message")
        if isinstance(text, str) and text.strip():
            message = text.strip()
        else:
            message = f"failed rule: {rule.strip()}"
    field_path = spec.get("fieldPath")
    if isinstance(field_path, str) and field_path:
        path = _join_field_path(schema, path, field_path)
    error_type = _REASONS.get(str(spec.get("reason")), INVALID)
    if error_type in (FORBIDDEN, REQUIRED):
        return FieldError(path, error_type, message)
    return FieldError(path, error_type, message, value)


def _message_from_expression(
    compiled: CompiledRule | None, activation: Mapping[str, Any]
) -> str | None:
    """The messageExpression's text; None (fall back to ``message``) if it fails or is blank."""
    if compiled is None or compiled.error:
        return None
    result, error = evaluate(compiled, activation)
    if error or not isinstance(result, str):
        return None
    text = str(result)
    if not text.strip() or "\n" in text:
        return None
    return text


_FIELD_PATH_PART: Final = re.compile(r"\.([^.\[]+)|\[\s*'((?:[^'\\]|\\.)*)'\s*\]|\[(\d+)\]")


def _join_field_path(schema: Schema | None, base: str, field_path: str) -> str:
    """Append a rule's ``fieldPath`` (``.a.b``, ``.m['key']``) to the node path.

    A bracketed name is a child if the schema declares it as a property, else a map key. An
    unparsable fieldPath is appended as written, so the error still points somewhere.
    """
    path = base
    pos = 0
    node = schema
    while pos < len(field_path):
        match = _FIELD_PATH_PART.match(field_path, pos)
        if match is None:
            return base + field_path if field_path.startswith((".", "[")) else base
        pos = match.end()
        if match.group(3) is not None:
            path = join_path(path, int(match.group(3)))
            node = sub_schema(node.get("items")) if node is not None else None
            continue
        name = match.group(1) if match.group(1) is not None else match.group(2)
        if match.group(2) is not None:
            name = name.replace("\\'", "'")
        if node is not None and name in properties_of(node):
            path = join_path(path, name)
            node = sub_schema(properties_of(node)[name])
        elif match.group(1) is not None:
            path = join_path(path, name)
            node = None
        else:
            path = f"{path}[{name}]"
            node = sub_schema(node.get("additionalProperties")) if node is not None else None
    return path
