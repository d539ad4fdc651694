"""OpenAPI publishing: the operations of each served kind (paths, verbs, parameters, request
and response bodies) and the documents built from them (v3 per group/version, v2 whole)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.local.apiserver.http.openapi.common import (
    DELETE_OPTIONS,
    INFO,
    JSON_TYPES,
    PATCH,
    PATCH_TYPES,
    STATUS,
    V2_REF,
    V3_REF,
)
from trainer.local.apiserver.http.openapi.schemas import (
    camel,
    definition_name,
    gv_path,
    gvk,
    kind_schema,
    list_schema,
    meta_schemas,
    schema_ref,
    to_v2_schema,
)
from trainer.local.apiserver.resources import ResourceType

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
        "How the server handles unknown and duplicate fields in the request: Ignore, Warn "
        "(the default) or Strict (what kubectl sends).",
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
    return f"/{gv_path(rt.group, rt.version)}"


def _operation_id(rt: ResourceType, op: _Op) -> str:
    """``listTrainerKubeflowOrgV1alpha1NamespacedTrainJob``, ``readCoreV1NamespacedPodLog``."""
    group = camel(rt.group.removesuffix(".k8s.io")) if rt.group else "Core"
    return f"{op.verb}{group}{camel(rt.version)}{op.scope}{rt.kind}{op.suffix}"


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
        "x-kubernetes-group-version-kind": gvk(rt),
    }
    if op.body:
        out["requestBody"] = {
            "content": {t: {"schema": schema_ref(op.body, V3_REF)} for t in op.body_types},
            "required": op.method != "delete",
        }
    if op.response:
        content = {t: {"schema": schema_ref(op.response, V3_REF)} for t in JSON_TYPES}
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
                "schema": schema_ref(op.body, V2_REF),
            },
        )
    responses: dict[str, Any] = {"401": {"description": "Unauthorized"}}
    if op.response:
        responses["200"] = {"description": "OK", "schema": schema_ref(op.response, V2_REF)}
        if op.created:
            responses["201"] = {"description": "Created", "schema": schema_ref(op.response, V2_REF)}
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
        "x-kubernetes-group-version-kind": gvk(rt),
    }


def _tag(rt: ResourceType) -> str:
    group = camel(rt.group) if rt.group else "core"
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
    schemas = meta_schemas(V3_REF)
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
    definitions = {k: to_v2_schema(v) for k, v in meta_schemas(V2_REF).items()}
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
