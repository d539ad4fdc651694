"""Plain JSON values as CEL values, typed by their schema node, and CEL's equality on them.

A CRD rule sees the object the way kube-apiserver types it from the structural schema (see
"Type system integration" in https://kubernetes.io/docs/reference/using-api/cel/): ``number``
fields are doubles, ``integer`` fields ints, ``date``/``date-time`` strings timestamps,
``duration`` strings durations, ``byte`` strings bytes; object properties are reachable by
their CEL-escaped names (``x-y`` as ``x__dash__y``, ``namespace`` as ``__namespace__``), and an
absent property makes ``has(self.p)`` false. :func:`to_cel` does that conversion. A property
named like a CEL reserved word is also reachable by its plain name (``self.metadata.namespace``),
as from Kubernetes 1.32, the version the local API server reports (cel-go's
``SetRecognizeKeywordAsFieldName``; before 1.32 only ``__namespace__`` compiled).

:func:`cel_equal` is CEL's heterogeneous equality, which cel-python does not implement as
cel-go does: ``true == 1`` and ``1 == null`` are false (not errors, not true), ``1 == 1.0`` is
true, and lists with ``x-kubernetes-list-type`` ``set`` or ``map`` (:class:`UnorderedList`)
compare without regard to order, as Kubernetes compares them. The operators and library
functions built on it live in :mod:`.cel_library`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from celpy import celtypes

from .defaults import EMBEDDED_FIELDS, Schema, is_embedded, properties_of, sub_schema
from .readset import escape_property_name, is_reserved


class ObjectMap(celtypes.MapType):
    """An object with declared properties, keyed by CEL-escaped names; a property named like a
    reserved word is also found by its plain name (``self.namespace`` for ``__namespace__``),
    without a second key, so ``size()``, equality and macros see each property once."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            if isinstance(key, str) and is_reserved(key):
                return super().__getitem__(celtypes.StringType(f"__{key}__"))
            raise


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
    props = properties_of(schema) if schema is not None else {}
    if schema is not None and props:
        out: celtypes.MapType = ObjectMap()
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
    out = celtypes.MapType()
    for key, item in value.items():
        out[celtypes.StringType(str(key))] = to_cel(item, items)
    return out


NUMBERS: Final = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)
"""CEL's number types, which compare with one another by value."""


def cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality, with Kubernetes' unordered ``set``/``map`` lists."""
    a_bool = isinstance(a, bool | celtypes.BoolType)
    b_bool = isinstance(b, bool | celtypes.BoolType)
    if a_bool or b_bool:
        return a_bool and b_bool and bool(a) == bool(b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, NUMBERS) and isinstance(b, NUMBERS):
        return native_number(a) == native_number(b)
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


def native_number(value: Any) -> int | float:
    """A CEL number as a Python number: Python compares ints and floats exactly."""
    return float(value) if isinstance(value, celtypes.DoubleType) else int(value)


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
