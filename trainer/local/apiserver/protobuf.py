"""Decoding Kubernetes protobuf request bodies (``application/vnd.kubernetes.protobuf``).

client-go sends built-in kinds as protobuf when its ``ContentType`` asks for it: kubectl 1.32's
typed clients (``kubectl create namespace|configmap|secret|serviceaccount|priorityclass|token``,
``kubectl auth whoami|can-i``), kube-scheduler and kube-controller-manager for every write
(``--kube-api-content-type``'s default: a scheduler's Bindings and Events, the Job
controller's Pods and Job statuses), and controller-runtime's clients (JobSet's manager). A
body is the 4-byte magic ``k8s\\x00`` and a ``runtime.Unknown`` envelope (typeMeta, raw) whose
``raw`` is the object's generated protobuf message. This module turns it into the object's
JSON form, as kube-apiserver's decoding and Go's JSON encoding would, for the kinds of
``protobuf_schema.json`` (generated from the pinned k8s.io/api by ``hack/protobuf_schema.py``:
the groups of the kinds this server serves); other kinds answer 415 Unsupported Media Type
(clients then need JSON). Unknown fields are skipped, as a protobuf decoder does.
"""

from __future__ import annotations

import base64
import functools
import json
import struct
from importlib import resources
from typing import Any

from trainer.local.apiserver.errors import APIError, bad_request
from trainer.machinery.times import time_from_epoch

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
ZERO_TIME = -62135596800  # 0001-01-01T00:00:00Z, Go's zero time.Time, in Unix seconds
SCHEMA_FILE = "protobuf_schema.json"
ENVELOPE = "k8s.io.apimachinery.pkg.runtime.Unknown"
DELETE_OPTIONS = "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"
Field = tuple[str, str, str, str]
"""A message field: JSON name; one, list or map; type (a scalar, a special type or a message's
full name); flags (i: inlined in its parent's JSON, p: a Go pointer, o: omitempty)."""


@functools.cache
def _schema() -> tuple[dict[str, dict[int, Field]], dict[str, str]]:
    text = resources.files("trainer.local.apiserver").joinpath(SCHEMA_FILE).read_text()
    data = json.loads(text)
    messages = {
        name: {int(n): (f[0], f[1], f[2], f[3]) for n, f in fields.items()}
        for name, fields in data["messages"].items()
    }
    return messages, dict(data["kinds"])


def kinds() -> frozenset[tuple[str, str]]:
    """(apiVersion, kind) of every kind a protobuf body may hold."""
    return frozenset(tuple(k.split(" ", 1)) for k in _schema()[1])  # type: ignore[misc]


class _Truncated(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _Truncated("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Truncated("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message: ints for varints, bytes otherwise."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise _Truncated("truncated field")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise _Truncated(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _time(data: bytes, micro: bool = False) -> str | None:
    """A metav1.Time (or MicroTime); None for Go's zero time, which its JSON form omits.
    metav1.Time writes the zero time as an empty message (kubectl's TokenRequest
    ``status.expirationTimestamp``, every ``creationTimestamp``) and reads an empty message
    back as the zero time. Time's JSON has whole seconds, MicroTime's six decimals."""
    if not data:
        return None
    seconds = nanos = 0
    for number, _, value in _fields(data):
        if number == 1:
            seconds = _signed(value)
        elif number == 2:
            nanos = _signed(value)
    if seconds == ZERO_TIME:
        return None
    text = time_from_epoch(seconds)
    if micro:
        text = f"{text[:-1]}.{nanos // 1000:06d}Z"
    return text


def _entry(data: bytes) -> tuple[bytes, tuple[int, Any] | None]:
    """A map entry's key and (wire type, value)."""
    key, value = b"", None
    for number, wire, raw in _fields(data):
        if number == 1:
            key = raw
        elif number == 2:
            value = (wire, raw)
    return key, value


def _duration(nanos: int) -> str:
    """Go's time.Duration.String() for metav1.Duration's JSON (whole units and seconds)."""
    if nanos == 0:
        return "0s"
    sign, nanos = ("-", -nanos) if nanos < 0 else ("", nanos)
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = f"{rest / 1e9:.9f}".rstrip("0").rstrip(".")
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"


def _special(type_: str, data: bytes) -> Any:
    """The JSON form of the messages whose MarshalJSON writes a scalar, and of the lists of
    strings protobuf wraps in a message of ``items`` (``type ExtraValue []string``)."""
    if type_ == "strings":
        return [bytes(value).decode() for number, _, value in _fields(data) if number == 1]
    fields = {number: value for number, _, value in _fields(data)}
    if type_ == "quantity":
        return bytes(fields.get(1, b"")).decode()
    if type_ == "intorstring":
        if fields.get(1, 0) == 1:
            return bytes(fields.get(3, b"")).decode()
        return _signed(fields.get(2, 0))
    if type_ == "duration":
        return _duration(_signed(fields.get(1, 0)))
    if type_ == "fields":
        return json.loads(fields.get(1) or b"{}")
    # rawext: the raw object a client embeds (JSON), as runtime.RawExtension writes it back
    raw = bytes(fields.get(1, b""))
    return json.loads(raw) if raw else None


def _scalar(type_: str, wire: int, raw: Any) -> Any:
    """A scalar field's value; raises _Truncated for a wire type that does not fit."""
    if type_ == "string" and wire == 2:
        return bytes(raw).decode()
    if type_ == "bytes" and wire == 2:
        return base64.b64encode(raw).decode()
    if type_ == "int" and wire == 0:
        return _signed(raw)
    if type_ == "bool" and wire == 0:
        return bool(raw)
    if type_ == "double" and wire == 1:
        return struct.unpack("<d", raw)[0]
    if type_ == "float" and wire == 5:
        return struct.unpack("<f", raw)[0]
    raise _Truncated(f"wire type {wire} for a {type_}")


def _packed(type_: str, raw: bytes) -> list[Any]:
    """A packed repeated scalar (ints and bools as varints)."""
    out: list[Any] = []
    pos = 0
    while pos < len(raw):
        value, pos = _varint(raw, pos)
        out.append(_signed(value) if type_ == "int" else bool(value))
    return out


SPECIAL = frozenset({"quantity", "intorstring", "duration", "fields", "rawext", "strings"})
SCALAR = frozenset({"string", "bytes", "int", "bool", "double", "float"})


def _value(type_: str, wire: int, raw: Any) -> Any:
    if type_ in SCALAR:
        return _scalar(type_, wire, raw)
    if wire != 2:
        raise _Truncated(f"wire type {wire} for a {type_}")
    if type_ in ("time", "microtime"):
        return _time(raw, micro=type_ == "microtime")
    if type_ in SPECIAL:
        return _special(type_, raw)
    return _message(type_, raw)


def _zero(value: Any) -> bool:
    return value is None or (not isinstance(value, dict) and not value)


def _message(name: str, data: bytes) -> dict[str, Any]:
    schema = _schema()[0].get(name)
    if schema is None:
        raise _Truncated(f"no schema for {name}")
    out: dict[str, Any] = {}
    for number, wire, raw in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue  # unknown fields are skipped
        key, shape, type_, flags = spec
        if shape == "map":
            k, entry = _entry(raw)
            if entry is None:  # a zero value is left out of its entry
                entry = (0, 0) if type_ in ("int", "bool") else (2, b"")
            value = _value(type_, *entry)
            out.setdefault(key, {})[k.decode()] = value
        elif shape == "list":
            if wire == 2 and type_ in ("int", "bool"):
                out.setdefault(key, []).extend(_packed(type_, raw))
            else:
                out.setdefault(key, []).append(_value(type_, wire, raw))
        else:
            value = _value(type_, wire, raw)
            if "i" in flags:
                out.update(value)  # an inlined struct: its fields are the parent's in JSON
            elif value is None or ("p" not in flags and _dropped(type_, flags, value)):
                continue
            else:
                out[key] = value
    return out


def _dropped(type_: str, flags: str, value: Any) -> bool:
    """Whether Go's JSON leaves out this non-pointer field's value. gogo-protobuf writes every
    non-pointer scalar, zeros too: ``omitempty`` ones are left out, as is every empty string
    (kube-apiserver's JSON keeps a few non-omitempty ones; left out, the server's defaulting
    applies to them as to a field never set)."""
    if type_ == "string":
        return not value
    return type_ in SCALAR and "o" in flags and _zero(value)


def _envelope(data: bytes) -> tuple[str, str, bytes, str]:
    """runtime.Unknown: apiVersion, kind, raw, contentEncoding."""
    api_version = kind = encoding = ""
    raw = b""
    for number, wire, value in _fields(data):
        if wire != 2:
            continue
        if number == 1:
            for inner, inner_wire, part in _fields(value):
                if inner_wire == 2 and inner == 1:
                    api_version = bytes(part).decode()
                elif inner_wire == 2 and inner == 2:
                    kind = bytes(part).decode()
        elif number == 2:
            raw = value
        elif number == 3:
            encoding = bytes(value).decode()
    return api_version, kind, raw, encoding


def _unsupported(what: str) -> APIError:
    """kube-apiserver's 415 for a body its serializers cannot decode (a custom resource's
    protobuf, say): the media types it would have decoded."""
    return APIError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        f'application/json, application/yaml (got "{what}")',
    )


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object, or 400/415."""
    if not body.startswith(MAGIC):
        raise bad_request("the protobuf body does not start with the Kubernetes magic number")
    try:
        api_version, kind, raw, encoding = _envelope(body[len(MAGIC) :])
        if encoding:
            raise _unsupported(f"{CONTENT_TYPE} with encoding {encoding}")
        message = _schema()[1].get(f"{api_version} {kind}")
        if message is None and kind == "DeleteOptions":
            # client-go's typed clients encode DeleteOptions in their own group's version
            message = DELETE_OPTIONS
        if message is None:
            raise _unsupported(f"{CONTENT_TYPE} for {api_version} {kind}")
        obj = _message(message, raw)
    except (_Truncated, UnicodeDecodeError, ValueError, struct.error) as exc:
        raise bad_request(f"the request body is not valid protobuf: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
