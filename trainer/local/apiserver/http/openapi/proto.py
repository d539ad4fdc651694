"""OpenAPI publishing: the v2 document as a gnostic ``openapi_v2.Document`` protobuf, what
kubectl asks for (a hand-written encoder for the few message types it uses)."""

from __future__ import annotations

import struct
from typing import Any

from trainer.machinery import yamlout
from trainer.machinery.protowire import field, length_delimited, varint

# --- OpenAPI v2 in protobuf (gnostic openapi_v2.Document), what kubectl asks for ------------

_SCHEMA_STRINGS = {
    "$ref": 1,
    "format": 2,
    "title": 3,
    "description": 4,
    "pattern": 13,
    "discriminator": 26,
}
_SCHEMA_DOUBLES = {"multipleOf": 6, "maximum": 7, "minimum": 9}
_SCHEMA_BOOLS = {"exclusiveMaximum": 8, "exclusiveMinimum": 10, "uniqueItems": 16, "readOnly": 27}
_SCHEMA_INTS = {
    "maxLength": 11,
    "minLength": 12,
    "maxItems": 14,
    "minItems": 15,
    "maxProperties": 17,
    "minProperties": 18,
}


def _pb_string(number: int, text: str) -> bytes:
    return length_delimited(number, text.encode()) if text else b""


def _pb_any(number: int, value: Any) -> bytes:
    """gnostic's ``Any``: the value as YAML text (field 2)."""
    text = yamlout.dump(value)
    return length_delimited(number, _pb_string(2, text))


def _pb_named_any(number: int, name: str, value: Any) -> bytes:
    return length_delimited(number, _pb_string(1, name) + _pb_any(2, value))


def _pb_schema(schema: dict[str, Any]) -> bytes:
    """One ``openapi_v2.Schema`` message."""
    out = bytearray()
    for key, number in _SCHEMA_STRINGS.items():
        if isinstance(schema.get(key), str):
            out += _pb_string(number, schema[key])
    if "default" in schema:
        out += _pb_any(5, schema["default"])
    for key, number in _SCHEMA_DOUBLES.items():
        value = schema.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out += field(number, 1, struct.pack("<d", float(value)))
    for key, number in _SCHEMA_BOOLS.items():
        if schema.get(key) is True:
            out += field(number, 0, b"\x01")
    for key, number in _SCHEMA_INTS.items():
        value = schema.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out += field(number, 0, varint(value))
    for name in schema.get("required") or []:
        out += _pb_string(19, str(name))
    for value in schema.get("enum") or []:
        out += _pb_any(20, value)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out += length_delimited(21, length_delimited(1, _pb_schema(extra)))
    elif isinstance(extra, bool):
        out += length_delimited(21, field(2, 0, b"\x01" if extra else b"\x00"))
    types = schema.get("type")
    if types:
        names = types if isinstance(types, list) else [types]
        out += length_delimited(22, b"".join(_pb_string(1, str(t)) for t in names))
    items = schema.get("items")
    if items:
        listed = items if isinstance(items, list) else [items]
        out += length_delimited(23, b"".join(length_delimited(1, _pb_schema(i)) for i in listed))
    for sub in schema.get("allOf") or []:
        out += length_delimited(24, _pb_schema(sub))
    props = schema.get("properties")
    if isinstance(props, dict):
        named = b"".join(
            length_delimited(1, _pb_string(1, name) + length_delimited(2, _pb_schema(sub)))
            for name, sub in props.items()
        )
        out += length_delimited(25, named)
    if "example" in schema:
        out += _pb_any(30, schema["example"])
    for key, value in schema.items():
        if key.startswith("x-"):
            out += _pb_named_any(31, key, value)
    return bytes(out)


def swagger_protobuf(document: dict[str, Any]) -> bytes:
    """The ``application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` form of a Swagger
    document: version, info and definitions (kubectl reads schemas by their
    ``x-kubernetes-group-version-kind``; it does not read paths from v2)."""
    info = document.get("info") or {}
    out = bytearray(_pb_string(1, str(document.get("swagger", "2.0"))))
    out += length_delimited(
        2, _pb_string(1, info.get("title", "")) + _pb_string(2, info.get("version", ""))
    )
    definitions = b"".join(
        length_delimited(1, _pb_string(1, name) + length_delimited(2, _pb_schema(schema)))
        for name, schema in (document.get("definitions") or {}).items()
    )
    out += length_delimited(9, definitions)
    return bytes(out)
