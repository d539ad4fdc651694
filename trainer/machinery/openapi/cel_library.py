"""The functions a compiled rule can call beyond cel-python's own: :data:`FUNCTIONS`.

Three groups, each bound by its CEL overload name when a rule is compiled (:mod:`.cel_compile`):

* operators where cel-python differs from cel-go: ``==``, ``!=`` and ``in`` use CEL's
  heterogeneous equality (:func:`.cel_values.cel_equal`), and ``<``, ``<=``, ``>``, ``>=``
  compare across int, uint and double as cel-go does;
* a subset of the Kubernetes CEL libraries
  (https://kubernetes.io/docs/reference/using-api/cel/, "Kubernetes CEL libraries"):
  ``lowerAscii``, ``upperAscii``, ``trim``, ``replace``, ``split``, ``join``, ``substring``,
  ``charAt`` (strings), ``indexOf``, ``lastIndexOf`` (strings and lists), ``isSorted``, ``sum``,
  ``max`` (lists), ``find``, ``findAll`` (regexes);
* the methods of the optional that ``oldSelf`` is under ``optionalOldSelf: true``:
  ``hasValue()``, ``value()``, ``orValue(x)``.

A function given arguments of the wrong type raises ``TypeError`` ("no such overload"), an
index out of range ``IndexError``: cel-python turns either into an evaluation error of the rule.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, Final

from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

from .cel_values import NUMBERS, OptionalValue, cel_equal, native_number
from .defaults import compile_regex

# --- operators ------------------------------------------------------------------------------


def _ordering(name: str, base: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``<``, ``<=``, ``>``, ``>=`` with cel-go's comparisons across int, uint and double."""
    compare: Callable[[Any, Any], bool] = getattr(operator, name)

    def ordering(a: Any, b: Any) -> Any:
        if (
            isinstance(a, NUMBERS)
            and isinstance(b, NUMBERS)
            and type(a) is not type(b)
            and not isinstance(a, celtypes.BoolType)
            and not isinstance(b, celtypes.BoolType)
        ):
            return celtypes.BoolType(compare(native_number(a), native_number(b)))
        return base(a, b)

    ordering.__name__ = f"cel_{name}"
    return ordering


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


# --- the optional of ``optionalOldSelf`` -------------------------------------------------------


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


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
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
"""Every function above by the name (or operator overload) a rule calls it by."""
