"""OpenAPI documents describing the served resources, for kubectl.

kubectl 1.32 reads OpenAPI v3 (``/openapi/v3`` and one document per group/version):

- ``kubectl apply``/``create``/``replace`` look in the group/version document for the PATCH
  operation of the object's kind (by its ``x-kubernetes-group-version-kind`` extension) and
  for a ``fieldValidation`` query parameter on it; when present they let the server validate
  (``?fieldValidation=Strict``) instead of validating on the client. The PATCH request body's
  content types tell kubectl which patch types the kind accepts: custom resources list no
  strategic merge patch (the server answers 415), and neither do the built-in kinds here,
  whose schemas are too loose to compute one, so kubectl computes strategic merge patches for
  them from its compiled-in types, as it does when a server publishes no OpenAPI;
- ``kubectl explain`` finds the kind's schema in ``components.schemas`` by the same extension
  and walks ``properties``, ``items`` and ``allOf``/``$ref``.

Custom resources are published with their CRD version's ``openAPIV3Schema`` (``metadata``
replaced by a reference to ObjectMeta, as kube-apiserver does); built-in kinds with a
permissive schema (an object that keeps unknown fields, with ``apiVersion``, ``kind`` and
``metadata``). The index lists each document under a URL with the SHA-512 of its content, so
clients refetch exactly when a CRD changes what is served. Documents are cached until the
registry serves different resource types.

``/openapi/v2`` is the same content in Swagger 2.0 (CRD schemas converted as kube-apiserver
converts them for v2, see :func:`to_v2_schema`), as JSON or, when asked as kubectl asks, as the
gnostic ``openapi_v2.Document`` protobuf. kubectl validates on the client against v2 whenever
the server-side check does not apply: ``kind: List`` manifests, and kinds the server does not
serve (which must fail as "no matches for kind", not as a validation error); ``kubectl explain
--output=plaintext-openapiv2`` reads it too.
"""

from __future__ import annotations

import copy
import hashlib
import json
import struct
import weakref
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from trainer.local.apiserver.resources import Registry, ResourceType

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
STATUS = f"{META}.Status"
DELETE_OPTIONS = f"{META}.DeleteOptions"
PATCH = f"{META}.Patch"
INFO = {"title": "Kubernetes", "version": "v1.32.0"}
JSON_TYPES = ("application/json", "application/yaml")
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)
V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"
PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2"
PROTOBUF_V2_TYPE = f"{PROTOBUF_V2}@v1.0+protobuf"
# What kube-openapi answers with: Go's mime parser (client-go) rejects the "@" of the request's
# media type, so the response spells it with a dot.
PROTOBUF_V2_RESPONSE = f"{PROTOBUF_V2}.v1.0+protobuf"
# Keywords the v2 publishing of a CRD schema drops (Swagger 2.0 has no equivalent).
V2_DROPPED = ("nullable", "anyOf", "oneOf", "not", "x-kubernetes-validations")


# --- serving ---------------------------------------------------------------------------------


def serve(
    registry: Registry, parts: list[str], request: web.Request
) -> dict[str, Any] | web.StreamResponse | None:
    """``/openapi/v2``, ``/openapi/v3`` and ``/openapi/v3/{api/v1|apis/g/v}``."""
    cache = _cache(registry)
    if parts == ["v2"]:
        accept = request.headers.get("Accept", "")
        if PROTOBUF_V2 in accept:
            body, digest = cache.v2(protobuf=True)
            return _document_response(request, body, digest, content_type=PROTOBUF_V2_RESPONSE)
        if accept and not _accepts_json(accept):
            return _not_acceptable(accept)
        return _document_response(request, *cache.v2(protobuf=False))
    if parts == ["v3"]:
        return cache.index()
    if len(parts) >= 3 and parts[0] == "v3":
        found = cache.group_version_document("/".join(parts[1:]))
        if found is None:
            return None
        return _document_response(request, *found)
    return None


def _accepts_json(accept: str) -> bool:
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media in ("application/json", "application/*", "*/*", "*"):
            return True
    return False


def _not_acceptable(accept: str) -> web.Response:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"OpenAPI v2 is served as application/json or {PROTOBUF_V2_TYPE}, not {accept}",
        "reason": "NotAcceptable",
        "code": 406,
    }
    return web.Response(
        body=json.dumps(status).encode(), status=406, content_type="application/json"
    )


def _document_response(
    request: web.Request, body: bytes, digest: str, *, content_type: str = "application/json"
) -> web.Response:
    etag = f'"{digest}"'
    headers = {"ETag": etag, "Vary": "Accept"}
    if request.query.get("hash") == digest:
        headers["Cache-Control"] = "public, immutable"
        headers["Expires"] = "Thu, 01 Jan 2099 00:00:00 GMT"
    else:
        headers["Cache-Control"] = "no-cache, private"
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = content_type
    return web.Response(body=body, headers=headers)


# --- the cache -------------------------------------------------------------------------------


@dataclass
class _Document:
    types: tuple[ResourceType, ...]  # held, so identity comparison is sound
    body: bytes
    digest: str


class _Cache:
    """Serialized documents per group/version, rebuilt when the served types change (a CRD
    update replaces its ResourceType objects, so identity is the change signal)."""

    def __init__(self, registry: Registry) -> None:
        # a weak reference: the cache lives in a WeakKeyDictionary keyed by the registry
        self._registry_ref = weakref.ref(registry)
        self._v3: dict[str, _Document] = {}
        self._v2: dict[bool, _Document] = {}

    def _registry(self) -> Registry:
        registry = self._registry_ref()
        assert registry is not None, "the registry of an OpenAPI cache is gone"
        return registry

    def _by_group_version(self) -> dict[str, tuple[ResourceType, ...]]:
        out: dict[str, list[ResourceType]] = {}
        for rt in self._registry():
            out.setdefault(_gv_path(rt.group, rt.version), []).append(rt)
        return {k: tuple(v) for k, v in out.items()}

    def _document(self, path: str, types: tuple[ResourceType, ...]) -> _Document:
        cached = self._v3.get(path)
        if cached is not None and _same_types(cached.types, types):
            return cached
        body = json.dumps(group_version_document(types), separators=(",", ":")).encode()
        doc = _Document(types, body, _digest(body))
        self._v3[path] = doc
        return doc

    def index(self) -> dict[str, Any]:
        groups = self._by_group_version()
        for stale in set(self._v3) - set(groups):
            del self._v3[stale]
        paths = {}
        for path, types in sorted(groups.items()):
            doc = self._document(path, types)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={doc.digest}"}
        return {"paths": paths}

    def group_version_document(self, path: str) -> tuple[bytes, str] | None:
        types = self._by_group_version().get(path)
        if types is None:
            return None
        doc = self._document(path, types)
        return doc.body, doc.digest

    def v2(self, *, protobuf: bool) -> tuple[bytes, str]:
        types = tuple(self._registry())
        cached = self._v2.get(protobuf)
        if cached is None or not _same_types(cached.types, types):
            document = swagger_document(types)
            if protobuf:
                body = swagger_protobuf(document)
            else:
                body = json.dumps(document, separators=(",", ":")).encode()
            cached = self._v2[protobuf] = _Document(types, body, _digest(body))
        return cached.body, cached.digest


_CACHES: weakref.WeakKeyDictionary[Registry, _Cache] = weakref.WeakKeyDictionary()


def _cache(registry: Registry) -> _Cache:
    cache = _CACHES.get(registry)
    if cache is None:
        cache = _CACHES[registry] = _Cache(registry)
    return cache


def _same_types(a: tuple[ResourceType, ...], b: tuple[ResourceType, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _digest(body: bytes) -> str:
    return hashlib.sha512(body).hexdigest().upper()


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


# --- names -----------------------------------------------------------------------------------


def definition_name(rt: ResourceType, kind: str | None = None) -> str:
    """The schema name kube-apiserver uses: ``io.k8s.api.core.v1.Pod`` for built-in kinds,
    the reversed group for custom resources (``org.kubeflow.trainer.v1alpha1.TrainJob``)."""
    kind = kind or rt.kind
    if rt.builtin:
        if rt.group == "apiextensions.k8s.io":
            prefix = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions"
        else:
            prefix = f"io.k8s.api.{rt.group.split('.')[0] if rt.group else 'core'}"
        return f"{prefix}.{rt.version}.{kind}"
    return ".".join([*reversed(rt.group.split(".")), rt.version, kind])


def _gvk(rt: ResourceType, kind: str | None = None) -> dict[str, str]:
    return {"group": rt.group, "kind": kind or rt.kind, "version": rt.version}


def _camel(text: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in text.replace("-", ".").split(".") if p)


# --- shared schemas --------------------------------------------------------------------------


def _ref(name: str, ref: str) -> dict[str, Any]:
    return {"$ref": f"{ref}{name}"}


def _all_of(name: str, ref: str, description: str) -> dict[str, Any]:
    return {"allOf": [_ref(name, ref)], "description": description}


def _string(description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **kw}


def _meta_schemas(ref: str) -> dict[str, dict[str, Any]]:
    time = f"{META}.Time"
    return {
        time: {
            "type": "string",
            "format": "date-time",
            "description": "Time is a wrapper around time.Time which supports correct "
            "marshaling to YAML and JSON. Wrappers are provided for many of the factory "
            "methods that the time package offers.",
        },
        f"{META}.FieldsV1": {
            "type": "object",
            "description": "FieldsV1 stores a set of fields in a data structure like a Trie, "
            "in JSON format.",
        },
        f"{META}.OwnerReference": {
            "type": "object",
            "description": "OwnerReference contains enough information to let you identify "
            "an owning object. An owning object must be in the same namespace as the "
            "dependent, or be cluster-scoped, so there is no namespace field.",
            "required": ["apiVersion", "kind", "name", "uid"],
            "properties": {
                "apiVersion": _string("API version of the referent."),
                "kind": _string("Kind of the referent."),
                "name": _string("Name of the referent."),
                "uid": _string("UID of the referent."),
                "controller": {
                    "type": "boolean",
                    "description": "If true, this reference points to the managing controller.",
                },
                "blockOwnerDeletion": {
                    "type": "boolean",
                    "description": 'If true, AND if the owner has the "foregroundDeletion" '
                    "finalizer, then the owner cannot be deleted from the key-value store "
                    "until this reference is removed.",
                },
            },
            "x-kubernetes-map-type": "atomic",
        },
        f"{META}.ManagedFieldsEntry": {
            "type": "object",
            "description": "ManagedFieldsEntry is a workflow-id, a FieldSet and the group "
            "version of the resource that the fieldset applies to.",
            "properties": {
                "apiVersion": _string("The version of the resource the field set applies to."),
                "fieldsType": _string('The format of the fields field: "FieldsV1".'),
                "fieldsV1": _all_of(
                    f"{META}.FieldsV1", ref, "The set of fields changed by the manager."
                ),
                "manager": _string("An identifier of the workflow managing these fields."),
                "operation": _string('"Apply" or "Update".'),
                "subresource": _string("The subresource the fields were written through."),
                "time": _all_of(time, ref, "When this entry was last changed."),
            },
        },
        OBJECT_META: {
            "type": "object",
            "description": "ObjectMeta is metadata that all persisted resources must have, "
            "which includes all objects users must create.",
            "properties": {
                "name": _string(
                    "Name must be unique within a namespace. Is required when creating "
                    "resources, although some resources may allow a client to request the "
                    "generation of an appropriate name automatically. Cannot be updated."
                ),
                "generateName": _string(
                    "GenerateName is an optional prefix, used by the server, to generate a "
                    "unique name ONLY IF the Name field has not been provided."
                ),
                "namespace": _string(
                    "Namespace defines the space within which each name must be unique. An "
                    'empty namespace is equivalent to the "default" namespace. Cannot be '
                    "updated."
                ),
                "uid": _string(
                    "UID is the unique in time and space value for this object. Populated by "
                    "the system. Read-only."
                ),
                "resourceVersion": _string(
                    "An opaque value that represents the internal version of this object, "
                    "used for optimistic concurrency, change detection, and watches. "
                    "Populated by the system. Read-only."
                ),
                "generation": {
                    "type": "integer",
                    "format": "int64",
                    "description": "A sequence number representing a specific generation of "
                    "the desired state. Populated by the system. Read-only.",
                },
                "creationTimestamp": _all_of(
                    time,
                    ref,
                    "A timestamp representing the server time when this object was created. "
                    "Populated by the system. Read-only.",
                ),
                "deletionTimestamp": _all_of(
                    time,
                    ref,
                    "RFC 3339 date and time at which this resource will be deleted. Set by "
                    "the server when a graceful deletion is requested. Read-only.",
                ),
                "deletionGracePeriodSeconds": {
                    "type": "integer",
                    "format": "int64",
                    "description": "Number of seconds allowed for this object to gracefully "
                    "terminate before it will be removed from the system. Read-only.",
                },
                "labels": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "default": ""},
                    "description": "Map of string keys and values that can be used to "
                    "organize and categorize (scope and select) objects.",
                },
                "annotations": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "default": ""},
                    "description": "Annotations is an unstructured key value map stored with a "
                    "resource that may be set by external tools to store and retrieve "
                    "arbitrary metadata.",
                },
                "ownerReferences": {
                    "type": "array",
                    "items": {"default": {}, "allOf": [_ref(f"{META}.OwnerReference", ref)]},
                    "description": "List of objects depended by this object. If ALL objects "
                    "in the list have been deleted, this object will be garbage collected.",
                    "x-kubernetes-list-map-keys": ["uid"],
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "uid",
                    "x-kubernetes-patch-strategy": "merge",
                },
                "finalizers": {
                    "type": "array",
                    "items": {"type": "string", "default": ""},
                    "description": "Must be empty before the object is deleted from the "
                    "registry. Each entry is an identifier for the responsible component "
                    "that will remove the entry from the list.",
                    "x-kubernetes-list-type": "set",
                    "x-kubernetes-patch-strategy": "merge",
                },
                "managedFields": {
                    "type": "array",
                    "items": {"default": {}, "allOf": [_ref(f"{META}.ManagedFieldsEntry", ref)]},
                    "description": "ManagedFields maps workflow-id and version to the set of "
                    "fields that are managed by that workflow.",
                    "x-kubernetes-list-type": "atomic",
                },
                "selfLink": _string("Deprecated: selfLink is a legacy read-only field."),
            },
        },
        LIST_META: {
            "type": "object",
            "description": "ListMeta describes metadata that synthetic resources must have, "
            "including lists and various status objects.",
            "properties": {
                "resourceVersion": _string("The version of the list, for watches."),
                "continue": _string("Set when the list was truncated by a limit."),
                "remainingItemCount": {
                    "type": "integer",
                    "format": "int64",
                    "description": "The number of items left after this page.",
                },
                "selfLink": _string("Deprecated: selfLink is a legacy read-only field."),
            },
        },
        STATUS: {
            "type": "object",
            "description": "Status is a return value for calls that don't return other objects.",
            "properties": {
                "apiVersion": _string("APIVersion of this representation of an object."),
                "kind": _string("Kind of this representation of an object."),
                "metadata": _all_of(LIST_META, ref, "Standard list metadata."),
                "status": _string('Status of the operation: "Success" or "Failure".'),
                "message": _string("A human-readable description of the status."),
                "reason": _string("A machine-readable description of a failure."),
                "code": {"type": "integer", "format": "int32", "description": "HTTP code."},
                "details": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "description": "Extended data associated with the reason.",
                },
            },
        },
        DELETE_OPTIONS: {
            "type": "object",
            "description": "DeleteOptions may be provided when deleting an API object.",
            "properties": {
                "apiVersion": _string("APIVersion of this representation of an object."),
                "kind": _string("Kind of this representation of an object."),
                "dryRun": {
                    "type": "array",
                    "items": {"type": "string", "default": ""},
                    "description": "When present, modifications are not persisted.",
                    "x-kubernetes-list-type": "atomic",
                },
                "gracePeriodSeconds": {"type": "integer", "format": "int64"},
                "orphanDependents": {"type": "boolean"},
                "propagationPolicy": _string(
                    '"Orphan", "Background" or "Foreground": whether and how garbage '
                    "collection is performed."
                ),
                "preconditions": {
                    "type": "object",
                    "properties": {
                        "resourceVersion": {"type": "string"},
                        "uid": {"type": "string"},
                    },
                },
            },
        },
        PATCH: {
            "type": "object",
            "description": "Patch is provided to give a concrete name and type to the "
            "Kubernetes PATCH request body.",
        },
    }


# --- resource schemas ------------------------------------------------------------------------

ROOT_DESCRIPTIONS = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an "
    "object. Servers should convert recognized schemas to the latest internal value, and may "
    "reject unrecognized values.",
    "kind": "Kind is a string value representing the REST resource this object represents. "
    "Servers may infer this from the endpoint the client submits requests to. Cannot be "
    "updated. In CamelCase.",
    "metadata": "Standard object's metadata.",
}


def kind_schema(rt: ResourceType, ref: str = V3_REF) -> dict[str, Any]:
    """The schema of a kind as published: the CRD's openAPIV3Schema (metadata referencing
    ObjectMeta) or a permissive object for built-in kinds."""
    if rt.schema is not None and not rt.builtin:
        schema = copy.deepcopy(rt.schema)
        schema.setdefault("type", "object")
        props = schema.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            entry = props.setdefault(key, {"type": "string"})
            entry.setdefault("description", ROOT_DESCRIPTIONS[key])
        props["metadata"] = _all_of(OBJECT_META, ref, ROOT_DESCRIPTIONS["metadata"])
    else:
        schema = {
            "type": "object",
            "description": f"{rt.kind} ({rt.api_version}); this server publishes only its "
            "object metadata.",
            "properties": {
                "apiVersion": _string(ROOT_DESCRIPTIONS["apiVersion"]),
                "kind": _string(ROOT_DESCRIPTIONS["kind"]),
                "metadata": _all_of(OBJECT_META, ref, ROOT_DESCRIPTIONS["metadata"]),
            },
            "x-kubernetes-preserve-unknown-fields": True,
        }
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return schema


def list_schema(rt: ResourceType, ref: str = V3_REF) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"{rt.list_kind} is a list of {rt.kind}.",
        "required": ["items"],
        "properties": {
            "apiVersion": _string(ROOT_DESCRIPTIONS["apiVersion"]),
            "kind": _string(ROOT_DESCRIPTIONS["kind"]),
            "metadata": _all_of(LIST_META, ref, "Standard list metadata."),
            "items": {
                "type": "array",
                "description": f"List of {rt.plural}.",
                "items": _ref(definition_name(rt), ref),
            },
        },
        "x-kubernetes-group-version-kind": [_gvk(rt, rt.list_kind)],
    }


def to_v2_schema(schema: Any) -> Any:
    """A structural v3 schema as kube-apiserver publishes it in Swagger 2.0 (its
    ``ToStructuralOpenAPIV2``): no ``allOf``/``anyOf``/``oneOf``/``not`` (a single-``$ref``
    ``allOf`` becomes the ``$ref``), no CEL rules; ``nullable`` drops the type, properties and
    items, ``x-kubernetes-preserve-unknown-fields`` drops properties and items (kubectl's v2
    validation would reject the unknown fields they allow), int-or-string drops the type."""
    if isinstance(schema, list):
        return [to_v2_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
        out["$ref"] = str(all_of[0]["$ref"]).replace(V3_REF, V2_REF)
    for key, value in schema.items():
        if key in V2_DROPPED or key == "allOf":
            continue
        if key == "$ref" and isinstance(value, str):
            out[key] = value.replace(V3_REF, V2_REF)
        elif key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: to_v2_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = to_v2_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    if schema.get("nullable"):
        for key in ("type", "items", "properties"):
            out.pop(key, None)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("items", None)
        out.pop("properties", None)
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.pop("format", None)
    return out


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


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values take ten bytes, as in Go
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire) + payload


def _pb_bytes(number: int, data: bytes) -> bytes:
    return _field(number, 2, _varint(len(data)) + data)


def _pb_string(number: int, text: str) -> bytes:
    return _pb_bytes(number, text.encode()) if text else b""


def _pb_any(number: int, value: Any) -> bytes:
    """gnostic's ``Any``: the value as YAML text (field 2)."""
    text = yaml.safe_dump(value, default_flow_style=False, sort_keys=False)
    return _pb_bytes(number, _pb_string(2, text))


def _pb_named_any(number: int, name: str, value: Any) -> bytes:
    return _pb_bytes(number, _pb_string(1, name) + _pb_any(2, value))


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
            out += _field(number, 1, struct.pack("<d", float(value)))
    for key, number in _SCHEMA_BOOLS.items():
        if schema.get(key) is True:
            out += _field(number, 0, b"\x01")
    for key, number in _SCHEMA_INTS.items():
        value = schema.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out += _field(number, 0, _varint(value))
    for name in schema.get("required") or []:
        out += _pb_string(19, str(name))
    for value in schema.get("enum") or []:
        out += _pb_any(20, value)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out += _pb_bytes(21, _pb_bytes(1, _pb_schema(extra)))
    elif isinstance(extra, bool):
        out += _pb_bytes(21, _field(2, 0, b"\x01" if extra else b"\x00"))
    types = schema.get("type")
    if types:
        names = types if isinstance(types, list) else [types]
        out += _pb_bytes(22, b"".join(_pb_string(1, str(t)) for t in names))
    items = schema.get("items")
    if items:
        listed = items if isinstance(items, list) else [items]
        out += _pb_bytes(23, b"".join(_pb_bytes(1, _pb_schema(i)) for i in listed))
    for sub in schema.get("allOf") or []:
        out += _pb_bytes(24, _pb_schema(sub))
    props = schema.get("properties")
    if isinstance(props, dict):
        named = b"".join(
            _pb_bytes(1, _pb_string(1, name) + _pb_bytes(2, _pb_schema(sub)))
            for name, sub in props.items()
        )
        out += _pb_bytes(25, named)
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
    out += _pb_bytes(
        2, _pb_string(1, info.get("title", "")) + _pb_string(2, info.get("version", ""))
    )
    definitions = b"".join(
        _pb_bytes(1, _pb_string(1, name) + _pb_bytes(2, _pb_schema(schema)))
        for name, schema in (document.get("definitions") or {}).items()
    )
    out += _pb_bytes(9, definitions)
    return bytes(out)


# --- operations ------------------------------------------------------------------------------

_QUERY = {
    "pretty": ("string", "If 'true', then the output is pretty printed."),
    "dryRun": (
        "string",
        "When present, indicates that modifications should not be persisted. Valid values: All.",
    ),
    "fieldManager": (
        "string",
        "A name associated with the actor or entity that is making these changes. Required "
        "for apply requests (application/apply-patch).",
    ),
    "fieldValidation": (
        "string",
        "How the server handles unknown and duplicate fields in the request: Ignore, Warn or "
        "Strict (the default for kubectl).",
    ),
    "force": (
        "boolean",
        "Force an apply request to take over fields other managers own (re-acquire "
        "conflicting fields).",
    ),
    "labelSelector": ("string", "A selector to restrict the list of returned objects."),
    "fieldSelector": ("string", "A selector to restrict the list of returned objects."),
    "limit": ("integer", "The maximum number of responses to return for a list call."),
    "continue": ("string", "The continue option from a previous, truncated list."),
    "resourceVersion": (
        "string",
        "Constrains which resource versions a request may be served from.",
    ),
    "resourceVersionMatch": ("string", "How resourceVersion is applied to list calls."),
    "sendInitialEvents": ("boolean", "Send synthetic ADDED events before the watch stream."),
    "timeoutSeconds": ("integer", "Timeout for the list/watch call."),
    "watch": ("boolean", "Watch for changes to the described resources."),
    "allowWatchBookmarks": ("boolean", "Request watch events with type BOOKMARK."),
    "gracePeriodSeconds": ("integer", "The duration in seconds before the object is deleted."),
    "propagationPolicy": ("string", "Whether and how garbage collection is performed."),
    "orphanDependents": ("boolean", "Deprecated: use propagationPolicy."),
    "container": ("string", "The container for which to stream logs."),
    "follow": ("boolean", "Follow the log stream of the pod."),
    "tailLines": ("integer", "The number of lines from the end of the logs to show."),
}
_LIST = (
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "pretty",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
)
_WRITE = ("dryRun", "fieldManager", "fieldValidation", "pretty")
_DELETE = ("dryRun", "gracePeriodSeconds", "orphanDependents", "pretty", "propagationPolicy")


@dataclass(frozen=True)
class _Op:
    method: str
    action: str  # x-kubernetes-action
    verb: str  # operationId: verb + Group + Version + scope + Kind + suffix
    scope: str  # "Namespaced" or ""
    suffix: str
    query: tuple[str, ...]
    body: str = ""  # the request body schema name, "" for none
    body_types: tuple[str, ...] = JSON_TYPES
    response: str = ""  # the 200 response schema name
    created: bool = False  # also answers 201


def _operations(rt: ResourceType) -> dict[str, list[_Op]]:
    """Path suffix (relative to the group/version prefix) -> operations."""
    kind, lst = definition_name(rt), definition_name(rt, rt.list_kind)
    ns = "Namespaced" if rt.namespaced else ""
    base = f"namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else rt.plural
    item = f"{base}/{{name}}"
    patch_query = (*_WRITE, "force")
    out: dict[str, list[_Op]] = {
        base: [
            _Op("get", "list", "list", ns, "", _LIST, response=lst),
            _Op("post", "post", "create", ns, "", _WRITE, body=kind, response=kind, created=True),
            _Op(
                "delete",
                "deletecollection",
                "deleteCollection",
                ns,
                "",
                tuple(sorted({*_LIST, *_DELETE})),
                body=DELETE_OPTIONS,
                response=STATUS,
            ),
        ],
        item: [
            _Op("get", "get", "read", ns, "", ("pretty",), response=kind),
            _Op("put", "put", "replace", ns, "", _WRITE, body=kind, response=kind, created=True),
            _Op(
                "patch",
                "patch",
                "patch",
                ns,
                "",
                patch_query,
                body=PATCH,
                body_types=PATCH_TYPES,
                response=kind,
                created=True,
            ),
            _Op("delete", "delete", "delete", ns, "", _DELETE, body=DELETE_OPTIONS, response=kind),
        ],
    }
    if rt.namespaced:
        out[rt.plural] = [_Op("get", "list", "list", "", "ForAllNamespaces", _LIST, response=lst)]
    if rt.status:
        out[f"{item}/status"] = [
            _Op("get", "get", "read", ns, "Status", ("pretty",), response=kind),
            _Op("put", "put", "replace", ns, "Status", _WRITE, body=kind, response=kind),
            _Op(
                "patch",
                "patch",
                "patch",
                ns,
                "Status",
                patch_query,
                body=PATCH,
                body_types=PATCH_TYPES,
                response=kind,
            ),
        ]
    if rt.log:
        log_query = ("container", "follow", "pretty", "tailLines")
        out[f"{item}/log"] = [_Op("get", "connect", "read", ns, "Log", log_query)]
    return out


def _prefix(rt: ResourceType) -> str:
    return f"/{_gv_path(rt.group, rt.version)}"


def _operation_id(rt: ResourceType, op: _Op) -> str:
    """``listTrainerKubeflowOrgV1alpha1NamespacedTrainJob``, ``readCoreV1NamespacedPodLog``."""
    group = _camel(rt.group.removesuffix(".k8s.io")) if rt.group else "Core"
    return f"{op.verb}{group}{_camel(rt.version)}{op.scope}{rt.kind}{op.suffix}"


def _path_params(suffix: str) -> list[str]:
    return [p for p in ("namespace", "name") if f"{{{p}}}" in suffix]


def _query_param(name: str) -> tuple[str, str]:
    return _QUERY.get(name, ("string", name))


def _v3_operation(rt: ResourceType, op: _Op) -> dict[str, Any]:
    params = [
        {
            "name": name,
            "in": "query",
            "description": _query_param(name)[1],
            "schema": {"type": _query_param(name)[0], "uniqueItems": True},
        }
        for name in op.query
    ]
    out: dict[str, Any] = {
        "tags": [_tag(rt)],
        "description": f"{op.action} {rt.kind}",
        "operationId": _operation_id(rt, op),
        "parameters": params,
        "responses": {"401": {"description": "Unauthorized"}},
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": _gvk(rt),
    }
    if op.body:
        out["requestBody"] = {
            "content": {t: {"schema": _ref(op.body, V3_REF)} for t in op.body_types},
            "required": op.method != "delete",
        }
    if op.response:
        content = {t: {"schema": _ref(op.response, V3_REF)} for t in JSON_TYPES}
        out["responses"]["200"] = {"description": "OK", "content": content}
        if op.created:
            out["responses"]["201"] = {"description": "Created", "content": content}
    else:
        out["responses"]["200"] = {
            "description": "OK",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    return out


def _v2_operation(rt: ResourceType, op: _Op) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "query",
            "description": _query_param(name)[1],
            "type": _query_param(name)[0],
            "uniqueItems": True,
        }
        for name in op.query
    ]
    if op.body:
        params.insert(
            0,
            {
                "name": "body",
                "in": "body",
                "required": op.method != "delete",
                "schema": _ref(op.body, V2_REF),
            },
        )
    responses: dict[str, Any] = {"401": {"description": "Unauthorized"}}
    if op.response:
        responses["200"] = {"description": "OK", "schema": _ref(op.response, V2_REF)}
        if op.created:
            responses["201"] = {"description": "Created", "schema": _ref(op.response, V2_REF)}
    else:
        responses["200"] = {"description": "OK", "schema": {"type": "string"}}
    return {
        "tags": [_tag(rt)],
        "description": f"{op.action} {rt.kind}",
        "operationId": _operation_id(rt, op),
        "consumes": list(op.body_types if op.body else ["*/*"]),
        "produces": ["application/json", "application/yaml"],
        "schemes": ["https"],
        "parameters": params,
        "responses": responses,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": _gvk(rt),
    }


def _tag(rt: ResourceType) -> str:
    group = _camel(rt.group) if rt.group else "core"
    return f"{group}_{rt.version}"


def _path_item(rt: ResourceType, suffix: str, ops: list[_Op], *, v3: bool) -> dict[str, Any]:
    item: dict[str, Any] = {}
    for op in ops:
        item[op.method] = _v3_operation(rt, op) if v3 else _v2_operation(rt, op)
    params: list[dict[str, Any]] = []
    for name in _path_params(suffix):
        desc = "object name and auth scope, such as for teams and projects"
        if name == "name":
            desc = f"name of the {rt.kind}"
        param: dict[str, Any] = {
            "name": name,
            "in": "path",
            "description": desc,
            "required": True,
        }
        if v3:
            param["schema"] = {"type": "string", "uniqueItems": True}
        else:
            param.update({"type": "string", "uniqueItems": True})
        params.append(param)
    if params:
        item["parameters"] = params
    return item


# --- documents -------------------------------------------------------------------------------


def group_version_document(types: tuple[ResourceType, ...]) -> dict[str, Any]:
    """The OpenAPI v3 document of one group/version."""
    schemas = _meta_schemas(V3_REF)
    paths: dict[str, Any] = {}
    for rt in types:
        schemas[definition_name(rt)] = kind_schema(rt, V3_REF)
        schemas[definition_name(rt, rt.list_kind)] = list_schema(rt, V3_REF)
        for suffix, ops in _operations(rt).items():
            paths[f"{_prefix(rt)}/{suffix}"] = _path_item(rt, suffix, ops, v3=True)
    return {
        "openapi": "3.0.0",
        "info": dict(INFO),
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "description": "Bearer Token authentication",
                    "name": "authorization",
                    "in": "header",
                }
            },
        },
        "security": [{"BearerToken": []}],
    }


def swagger_document(types: tuple[ResourceType, ...]) -> dict[str, Any]:
    """The OpenAPI v2 (Swagger 2.0) document of every served kind."""
    definitions = {k: to_v2_schema(v) for k, v in _meta_schemas(V2_REF).items()}
    paths: dict[str, Any] = {}
    for rt in types:
        definitions[definition_name(rt)] = to_v2_schema(kind_schema(rt, V2_REF))
        definitions[definition_name(rt, rt.list_kind)] = to_v2_schema(list_schema(rt, V2_REF))
        for suffix, ops in _operations(rt).items():
            paths[f"{_prefix(rt)}/{suffix}"] = _path_item(rt, suffix, ops, v3=False)
    return {
        "swagger": "2.0",
        "info": dict(INFO),
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
        "securityDefinitions": {
            "BearerToken": {
                "type": "apiKey",
                "description": "Bearer Token authentication",
                "name": "authorization",
                "in": "header",
            }
        },
        "security": [{"BearerToken": []}],
    }
