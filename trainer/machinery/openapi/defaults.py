"""Defaulting and pruning of objects against a CRD structural schema, as kube-apiserver does.

Both functions are pure: they build and return a new object and never touch their input.
This module also holds the small schema helpers shared by :mod:`.cel` and :mod:`.validate`.
"""

from __future__ import annotations

import copy
import enum
import functools
import importlib
import re
from collections.abc import Mapping
from typing import Any, Final

from trainer.machinery import objectmeta
from trainer.machinery.errors import join_path

Schema = Mapping[str, Any]


class _Absent(enum.Enum):
    ABSENT = "absent"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent.ABSENT
"""Marks "no old object" (a create) for :func:`validate` and :func:`check`."""

# The fields of ObjectMeta: what survives pruning in ``metadata`` of a resource root or of an
# embedded resource. Kubernetes decodes metadata into ObjectMeta, which drops anything else.
OBJECT_META_FIELDS: Final = frozenset(objectmeta.OBJECT_META_FIELDS)
EMBEDDED_FIELDS: Final = ("apiVersion", "kind", "metadata")


def key_path(base: str, key: object) -> str:
    """The path of a map value (``additionalProperties``): ``base[key]``."""
    return f"{base}[{key}]"


def sub_schema(node: Any) -> Schema | None:
    """``node`` if it is a schema (a mapping), else None."""
    return node if isinstance(node, Mapping) else None


def properties_of(schema: Schema) -> Mapping[str, Any]:
    props = schema.get("properties")
    return props if isinstance(props, Mapping) else {}


def child_schema(schema: Schema, key: object) -> tuple[Schema | None, bool]:
    """The schema of the value under ``key`` of an object, and whether it is a property.

    Returns ``(None, False)`` when the key is unknown to the schema.
    """
    props = properties_of(schema)
    if isinstance(key, str) and key in props:
        return sub_schema(props[key]), True
    return sub_schema(schema.get("additionalProperties")), False


def child_path(base: str, key: object, is_property: bool) -> str:
    if is_property:
        return join_path(base, str(key))
    return key_path(base, key)


def is_nullable(schema: Schema | None) -> bool:
    return schema is not None and schema.get("nullable") is True


def preserves_unknown(schema: Schema) -> bool:
    return schema.get("x-kubernetes-preserve-unknown-fields") is True


def is_embedded(schema: Schema) -> bool:
    return schema.get("x-kubernetes-embedded-resource") is True


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value in which equal JSON values are equal.

    ``1`` and ``1.0`` are the same number; ``true`` and ``1`` are different values.
    """
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("num", value)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, list | tuple):
        return ("list", tuple(canonical(v) for v in value))
    if isinstance(value, Mapping):
        return ("obj", frozenset((str(k), canonical(v)) for k, v in value.items()))
    return ("other", repr(value))


def list_map_keys(schema: Schema) -> list[str]:
    keys = schema.get("x-kubernetes-list-map-keys")
    if not isinstance(keys, list):
        return []
    return [k for k in keys if isinstance(k, str)]


class _Unspecified:
    """A list-map item's key that is absent and has no default."""

    def __repr__(self) -> str:
        return "<unspecified>"


UNSPECIFIED: Final = _Unspecified()


def list_map_key_values(schema: Schema, item: Mapping[str, Any]) -> dict[str, Any]:
    """The key fields of one item of an ``x-kubernetes-list-type: map`` list.

    An absent key takes the default of its property, as the apiserver does; with no default it
    is :data:`UNSPECIFIED`.
    """
    items = sub_schema(schema.get("items")) or {}
    props = properties_of(items)
    out: dict[str, Any] = {}
    for key in list_map_keys(schema):
        if key in item:
            out[key] = item[key]
        else:
            prop = sub_schema(props.get(key))
            out[key] = prop["default"] if prop is not None and "default" in prop else UNSPECIFIED
    return out


def map_key_identity(key_values: Mapping[str, Any]) -> Any:
    """A hashable identity for list-map key values."""
    return tuple(
        (k, "<unspecified>" if v is UNSPECIFIED else canonical(v)) for k, v in key_values.items()
    )


@functools.lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> tuple[Any, str]:
    """Compile with RE2 (Go's regexp syntax, as the apiserver and CEL), else Python ``re``.

    Returns the compiled pattern (with ``search``/``finditer``) or None and the error text.
    """
    try:
        re2: Any = importlib.import_module("re2")
    except ImportError:  # pragma: no cover - google-re2 comes with cel-python
        re2 = None
    try:
        if re2 is not None:
            return re2.compile(pattern), ""
        return re.compile(pattern), ""  # pragma: no cover
    except Exception as exc:
        text = exc.args[0] if exc.args else exc
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return None, str(text)


# --- defaulting -----------------------------------------------------------------------------


def apply_defaults(schema: Schema, obj: Any, *, in_place: bool = False) -> Any:
    """Return a copy of ``obj`` with the schema's ``default`` values filled in.

    Like the apiserver's structural defaulting: an absent property (or a null one that is not
    ``nullable``) with a ``default`` gets a copy of it; null list items and map values that are
    not nullable get their schema's default too. Defaulting recurses into properties,
    ``additionalProperties`` values and list items, including into freshly set defaults.

    ``in_place``: default ``obj`` itself and return it (for a private copy, such as what
    :func:`prune` returns, so that a write is not copied twice).
    """
    result = obj if in_place else copy.deepcopy(obj)
    _default(schema, result)
    return result


def _non_nullable_null_with_default(value: Any, schema: Schema | None) -> bool:
    return value is None and schema is not None and not is_nullable(schema) and "default" in schema


def _default(schema: Schema | None, value: Any) -> None:
    """Default ``value`` in place (it is always a private copy)."""
    if schema is None:
        return
    if isinstance(value, dict):
        for name, prop_node in properties_of(schema).items():
            prop = sub_schema(prop_node)
            if prop is None or "default" not in prop:
                continue
            if name not in value or _non_nullable_null_with_default(value[name], prop):
                value[name] = copy.deepcopy(prop["default"])
        for key in list(value):
            sub, _ = child_schema(schema, key)
            if sub is None:
                continue
            if _non_nullable_null_with_default(value[key], sub):
                value[key] = copy.deepcopy(sub["default"])
            _default(sub, value[key])
    elif isinstance(value, list):
        items = sub_schema(schema.get("items"))
        if items is None:
            return
        for i, item in enumerate(value):
            if _non_nullable_null_with_default(item, items):
                value[i] = copy.deepcopy(items["default"])
            _default(items, value[i])


# --- pruning --------------------------------------------------------------------------------

_IMMUTABLE: Final = frozenset({str, int, float, bool, type(None)})


def prune(
    schema: Schema,
    obj: Any,
    *,
    drop_nulls: bool = True,
    resource_root: bool = True,
) -> tuple[Any, list[str]]:
    """Return a copy of ``obj`` without the fields the schema does not know, and their paths.

    The copy shares no mutable part with ``obj`` (only strings, numbers, booleans and None).

    Unknown fields are kept under ``x-kubernetes-preserve-unknown-fields: true`` (at that level
    only: declared properties below are still pruned) and ``additionalProperties: true``. At a
    resource root (``resource_root``, the default: the schema is a CRD's ``openAPIV3Schema``) and
    in ``x-kubernetes-embedded-resource`` objects, ``apiVersion``, ``kind`` and ``metadata`` are
    kept, and ``metadata`` is cut down to the fields of ObjectMeta.

    With ``drop_nulls``, a null property or map value whose schema is not ``nullable`` is dropped
    (silently, as the apiserver does; absent, it may then be defaulted). Null list items stay.

    The removed paths read like kubectl's warnings: ``spec.foo``, ``spec.items[0].bar``,
    ``spec.labels[key].x``.
    """
    removed: list[str] = []
    result = _prune(schema, obj, "", removed, drop_nulls=drop_nulls, embedded=resource_root)
    return result, removed


def _prune(
    schema: Schema | None,
    value: Any,
    path: str,
    removed: list[str],
    *,
    drop_nulls: bool,
    embedded: bool = False,
) -> Any:
    if type(value) in _IMMUTABLE:
        return value  # what deepcopy returns for these, without its bookkeeping
    if schema is None:
        return copy.deepcopy(value)
    if isinstance(value, dict):
        embedded = embedded or is_embedded(schema)
        preserve = preserves_unknown(schema) or schema.get("additionalProperties") is True
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if embedded and key == "metadata":
                # ObjectMeta, not the schema, decides what metadata keeps.
                out[key] = _prune_metadata(item, join_path(path, key), removed)
                continue
            sub, is_prop = child_schema(schema, key)
            if sub is not None:
                if item is None and drop_nulls and not is_nullable(sub):
                    continue
                out[key] = _prune(
                    sub, item, child_path(path, key, is_prop), removed, drop_nulls=drop_nulls
                )
            elif preserve or (embedded and key in EMBEDDED_FIELDS):
                out[key] = item if type(item) in _IMMUTABLE else copy.deepcopy(item)
            else:
                removed.append(join_path(path, str(key)))
        return out
    if isinstance(value, list):
        items = sub_schema(schema.get("items"))
        if items is None:
            return copy.deepcopy(value)
        return [
            _prune(items, item, join_path(path, i), removed, drop_nulls=drop_nulls)
            for i, item in enumerate(value)
        ]
    return copy.deepcopy(value)


def _prune_metadata(value: Any, path: str, removed: list[str]) -> Any:
    if not isinstance(value, dict):
        return copy.deepcopy(value)
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if key in OBJECT_META_FIELDS:
            out[key] = item if type(item) in _IMMUTABLE else copy.deepcopy(item)
        else:
            removed.append(join_path(path, str(key)))
    return out


def defaults_are_pruned(schema: Any) -> bool:
    """Whether pruning can never change what defaulting adds: every ``default`` of the schema
    survives :func:`prune` at its node as it is, and none lies under a ``metadata`` property
    (pruned to ObjectMeta's fields, whatever the schema says).

    kube-apiserver requires this of a CRD's defaults; when it holds, an object that was pruned
    and then defaulted is unchanged by pruning and defaulting again, so the admission chain can
    skip that second pass when no mutating webhook changed the object.
    """
    if isinstance(schema, list):
        return all(defaults_are_pruned(v) for v in schema)
    if not isinstance(schema, Mapping):
        return True
    if "default" in schema:
        default = schema["default"]
        if default is None and not is_nullable(schema):
            return False  # a null property is dropped by pruning
        removed: list[str] = []
        if _prune(schema, default, "", removed, drop_nulls=True) != default or removed:
            return False
    props = schema.get("properties")
    if isinstance(props, Mapping) and "metadata" in props and _has_default(props["metadata"]):
        return False
    return all(defaults_are_pruned(v) for k, v in schema.items() if k != "default")


def _has_default(schema: Any) -> bool:
    if isinstance(schema, Mapping):
        return "default" in schema or any(_has_default(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_default(v) for v in schema)
    return False
