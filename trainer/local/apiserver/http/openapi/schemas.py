"""OpenAPI publishing: schemas. The shared meta types (ObjectMeta, ListMeta, Status,
DeleteOptions...), each served kind's schema and its list's (a CRD version's
``openAPIV3Schema`` with ``metadata`` replaced by a reference, a permissive one for built-in
kinds), and their Swagger 2.0 conversion (:func:`to_v2_schema`)."""

from __future__ import annotations

import copy
from typing import Any

from trainer.local.apiserver.http.openapi.common import (
    DELETE_OPTIONS,
    LIST_META,
    META,
    OBJECT_META,
    PATCH,
    STATUS,
    V2_DROPPED,
    V2_REF,
    V3_REF,
)
from trainer.local.apiserver.resources import ResourceType

# --- names -----------------------------------------------------------------------------------


def gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


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


def gvk(rt: ResourceType, kind: str | None = None) -> dict[str, str]:
    return {"group": rt.group, "kind": kind or rt.kind, "version": rt.version}


def camel(text: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in text.replace("-", ".").split(".") if p)


# --- shared schemas --------------------------------------------------------------------------


def schema_ref(name: str, ref: str) -> dict[str, Any]:
    return {"$ref": f"{ref}{name}"}


def _all_of(name: str, ref: str, description: str) -> dict[str, Any]:
    return {"allOf": [schema_ref(name, ref)], "description": description}


def _string(description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **kw}


def meta_schemas(ref: str) -> dict[str, dict[str, Any]]:
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
                    "items": {"default": {}, "allOf": [schema_ref(f"{META}.OwnerReference", ref)]},
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
                    "items": {
                        "default": {},
                        "allOf": [schema_ref(f"{META}.ManagedFieldsEntry", ref)],
                    },
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
    schema["x-kubernetes-group-version-kind"] = [gvk(rt)]
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
                "items": schema_ref(definition_name(rt), ref),
            },
        },
        "x-kubernetes-group-version-kind": [gvk(rt, rt.list_kind)],
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
