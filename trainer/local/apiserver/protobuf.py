"""Decoding Kubernetes protobuf request bodies (``application/vnd.kubernetes.protobuf``).

kubectl 1.32's typed clients (``kubectl create namespace|configmap|secret|serviceaccount|
priorityclass|token``, ``kubectl auth whoami|can-i``) send built-in kinds as protobuf: the 4-byte
magic ``k8s\\x00`` and a ``runtime.Unknown`` envelope (typeMeta, raw) whose ``raw`` is the
object's generated protobuf message. This module turns such a body into the object's JSON
form for the kinds those commands create; other kinds answer 415 Unsupported Media Type
(clients then need JSON). Unknown fields are skipped, as a protobuf decoder does.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from trainer.local.apiserver.errors import bad_request, unsupported_media_type
from trainer.machinery.times import time_from_epoch

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
ZERO_TIME = -62135596800  # 0001-01-01T00:00:00Z, Go's zero time.Time, in Unix seconds

# Message schemas: field number -> (JSON name, type). Types: "string", "int", "bool",
# "bytes" (base64 in JSON), "time" (RFC 3339), "map" (map<string,string>), "bytesmap"
# (map<string,bytes>), "strings" (repeated string), "fields" (FieldsV1: raw JSON),
# "msg:<Name>" and "msgs:<Name>" (one / repeated nested message).
SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "Unknown": {
        1: ("typeMeta", "msg:TypeMeta"),
        2: ("raw", "raw"),
        3: ("contentEncoding", "string"),
        4: ("contentType", "string"),
    },
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        4: ("selfLink", "string"),
        5: ("uid", "string"),
        6: ("resourceVersion", "string"),
        7: ("generation", "int"),
        8: ("creationTimestamp", "time"),
        9: ("deletionTimestamp", "time"),
        10: ("deletionGracePeriodSeconds", "int"),
        11: ("labels", "map"),
        12: ("annotations", "map"),
        13: ("ownerReferences", "msgs:OwnerReference"),
        14: ("finalizers", "strings"),
        17: ("managedFields", "msgs:ManagedFieldsEntry"),
    },
    "OwnerReference": {
        1: ("kind", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("controller", "bool"),
        7: ("blockOwnerDeletion", "bool"),
    },
    "ManagedFieldsEntry": {
        1: ("manager", "string"),
        2: ("operation", "string"),
        3: ("apiVersion", "string"),
        4: ("time", "time"),
        6: ("fieldsType", "string"),
        7: ("fieldsV1", "fields"),
        8: ("subresource", "string"),
    },
    "ObjectReference": {
        1: ("kind", "string"),
        2: ("namespace", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("resourceVersion", "string"),
        7: ("fieldPath", "string"),
    },
    "LocalObjectReference": {1: ("name", "string")},
    "Namespace": {
        1: ("metadata", "msg:ObjectMeta"),
        2: ("spec", "msg:NamespaceSpec"),
        3: ("status", "msg:NamespaceStatus"),
    },
    "NamespaceSpec": {1: ("finalizers", "strings")},
    "NamespaceStatus": {1: ("phase", "string")},
    "ConfigMap": {
        1: ("metadata", "msg:ObjectMeta"),
        2: ("data", "map"),
        3: ("binaryData", "bytesmap"),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", "msg:ObjectMeta"),
        2: ("data", "bytesmap"),
        3: ("type", "string"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
    "ServiceAccount": {
        1: ("metadata", "msg:ObjectMeta"),
        2: ("secrets", "msgs:ObjectReference"),
        3: ("imagePullSecrets", "msgs:LocalObjectReference"),
        4: ("automountServiceAccountToken", "bool"),
    },
    "PriorityClass": {
        1: ("metadata", "msg:ObjectMeta"),
        2: ("value", "int"),
        3: ("globalDefault", "bool"),
        4: ("description", "string"),
        5: ("preemptionPolicy", "string"),
    },
    # kubectl auth whoami / kubectl auth can-i (authentication.k8s.io/v1, authorization.k8s.io/v1)
    "SelfSubjectReview": {1: ("metadata", "msg:ObjectMeta")},
    "SelfSubjectAccessReview": {
        1: ("metadata", "msg:ObjectMeta"),
        2: ("spec", "msg:SelfSubjectAccessReviewSpec"),
    },
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "msg:ResourceAttributes"),
        2: ("nonResourceAttributes", "msg:NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: ("namespace", "string"),
        2: ("verb", "string"),
        3: ("group", "string"),
        4: ("version", "string"),
        5: ("resource", "string"),
        6: ("subresource", "string"),
        7: ("name", "string"),
    },
    "NonResourceAttributes": {1: ("path", "string"), 2: ("verb", "string")},
    # kubectl create token (authentication.k8s.io/v1 TokenRequest on serviceaccounts/token)
    "TokenRequest": {
        1: ("metadata", "msg:ObjectMeta"),
        2: ("spec", "msg:TokenRequestSpec"),
        3: ("status", "msg:TokenRequestStatus"),
    },
    "TokenRequestSpec": {
        1: ("audiences", "strings"),
        3: ("boundObjectRef", "msg:BoundObjectReference"),
        4: ("expirationSeconds", "int"),
    },
    "BoundObjectReference": {
        1: ("kind", "string"),
        2: ("apiVersion", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
    },
    "TokenRequestStatus": {1: ("token", "string"), 2: ("expirationTimestamp", "time")},
}
KINDS = {
    ("authentication.k8s.io/v1", "SelfSubjectReview"),
    ("authentication.k8s.io/v1", "TokenRequest"),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
    ("v1", "Namespace"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "ServiceAccount"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
}


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


def _time(data: bytes) -> str | None:
    """A metav1.Time; None for Go's zero time, which its JSON form omits. metav1.Time writes
    the zero time as an empty message (kubectl's TokenRequest ``status.expirationTimestamp``,
    every ``creationTimestamp``) and reads an empty message back as the zero time."""
    if not data:
        return None
    seconds = 0
    for number, _, value in _fields(data):
        if number == 1:
            seconds = _signed(value)
    if seconds == ZERO_TIME:
        return None
    return time_from_epoch(seconds)


def _entry(data: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for number, _, raw in _fields(data):
        if number == 1:
            key = raw.decode()
        elif number == 2:
            value = raw
    return key, value


def _message(name: str, data: bytes) -> dict[str, Any]:
    schema = SCHEMAS[name]
    out: dict[str, Any] = {}
    for number, wire, raw in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue  # unknown fields are skipped
        key, type_ = spec
        if type_ == "raw" and wire == 2:
            out[key] = raw
        elif type_ == "string" and wire == 2:
            # gogo-protobuf writes every non-pointer string, empty ones too; their JSON form
            # (omitempty) leaves them out, so defaulting on the server still applies.
            if raw:
                out[key] = raw.decode()
        elif type_ == "int" and wire == 0:
            out[key] = _signed(raw)
        elif type_ == "bool" and wire == 0:
            out[key] = bool(raw)
        elif type_ == "bytes" and wire == 2:
            out[key] = base64.b64encode(raw).decode()
        elif type_ == "time" and wire == 2:
            when = _time(raw)
            if when is not None:
                out[key] = when
        elif type_ == "map" and wire == 2:
            k, v = _entry(raw)
            out.setdefault(key, {})[k] = v.decode()
        elif type_ == "bytesmap" and wire == 2:
            k, v = _entry(raw)
            out.setdefault(key, {})[k] = base64.b64encode(v).decode()
        elif type_ == "strings" and wire == 2:
            out.setdefault(key, []).append(raw.decode())
        elif type_ == "fields" and wire == 2:
            out[key] = _fields_v1(raw)
        elif type_.startswith("msg:") and wire == 2:
            out[key] = _message(type_[4:], raw)
        elif type_.startswith("msgs:") and wire == 2:
            out.setdefault(key, []).append(_message(type_[5:], raw))
    return out


def _fields_v1(data: bytes) -> Any:
    for number, _, raw in _fields(data):
        if number == 1:
            return json.loads(raw or b"{}")
    return {}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object, or 400/415."""
    if not body.startswith(MAGIC):
        raise bad_request("the protobuf body does not start with the Kubernetes magic number")
    try:
        envelope = _message("Unknown", body[len(MAGIC) :])
        type_meta = envelope.get("typeMeta") or {}
        api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
        if envelope.get("contentEncoding"):
            raise unsupported_media_type(
                f"{CONTENT_TYPE} with encoding {envelope['contentEncoding']}"
            )
        if (api_version, kind) not in KINDS:
            raise unsupported_media_type(f"{CONTENT_TYPE} for {api_version} {kind}")
        obj = _message(kind, envelope.get("raw") or b"")
    except (_Truncated, UnicodeDecodeError, ValueError) as exc:
        raise bad_request(f"the request body is not valid protobuf: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
