"""How a request body becomes an object of the resource it was sent to, as kube-apiserver does.

Every write (create, update, each patch's result, server-side apply, status updates, and the
objects admission webhooks hand back) goes through :func:`check`, so no stored object has
metadata kube-apiserver would refuse:

- **Decoding, 400 BadRequest.** The body must be a JSON object; ``apiVersion`` and ``kind``
  strings naming the resource of the URL (``the API version in the data
  (trainer.kubeflow.org/v9) does not match the expected API version
  (trainer.kubeflow.org/v1alpha1)``); ``metadata`` must decode into ``ObjectMeta`` and a
  built-in kind's fields into its Go type (:mod:`trainer.machinery.objectmeta`,
  :mod:`trainer.local.apiserver.shapes`). Messages are Kubernetes': ``Pod in version "v1"
  cannot be handled as a Pod: json: cannot unmarshal string into Go struct field
  ObjectMeta.metadata.labels of type map[string]string``.
- **Namespace and name.** A namespace in the body must be the URL's (400); a cluster-scoped
  object's is dropped; a name in the body must be the URL's (400).
- **Validation, 422 Invalid.** ``ValidateObjectMetaAccessor`` with the kind's name rule
  (namespaces: DNS-1123 labels; services: DNS-1035 labels; RBAC objects: path segments;
  everything else, custom resources included: DNS-1123 subdomains), with ``details.causes``
  naming each field (``metadata.labels``, ``metadata.ownerReferences.uid``, ...).

Decoding normalises what Go would read as a zero value (see
:func:`trainer.machinery.objectmeta.decode_object_meta`); fields ``ObjectMeta`` does not have are
dropped for built-in kinds and left to the structural schema's pruning (and its strict field
validation) for custom resources.
"""

from __future__ import annotations

import json
from typing import Any

from trainer.local.apiserver import builtin, shapes
from trainer.local.apiserver.errors import APIError, bad_request, invalid
from trainer.local.apiserver.resources import ResourceType
from trainer.machinery import names
from trainer.machinery import objectmeta as om
from trainer.machinery.errors import INVALID, UNSUPPORTED, FieldError


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def decode(rt: ResourceType, body: Any) -> dict[str, Any]:
    """``body`` decoded as an object of ``rt`` (400 BadRequest otherwise): a new dict whose
    ``metadata`` is normalised; the values under it are shared with ``body``."""
    expected = f"the object provided is unrecognized (must be of type {rt.kind})"
    if not isinstance(body, dict):
        raise bad_request(
            f"{expected}: json: cannot unmarshal {_json_type(body)} into Go value of type {rt.kind}"
        )
    for key in ("apiVersion", "kind"):
        value = body.get(key)
        if value is not None and not isinstance(value, str):
            raise bad_request(
                f"{expected}: couldn't get version/kind; json parse error: json: cannot "
                f"unmarshal {_json_type(value)} into Go struct field .{key} of type string"
            )
    api_version, kind = body.get("apiVersion") or "", body.get("kind") or ""
    if api_version and api_version != rt.api_version:
        if api_version.count("/") > 1:
            raise bad_request(f"{expected}: unexpected GroupVersion string: {api_version[:300]}")
        raise bad_request(
            f"the API version in the data ({api_version[:300]}) does not match the expected "
            f"API version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise bad_request(
            f'{kind[:300]} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            f"the kind of the object does not match the resource ({rt.plural})"
        )
    obj = dict(body)
    try:
        om.check_json_data(body)
        obj["metadata"] = om.decode_object_meta(
            body.get("metadata"), keep_unknown=rt.schema is not None
        )
        if rt.schema is None:
            shapes.decode_kind(rt.group, rt.kind, obj)
    except om.DecodeError as exc:
        raise bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {exc}'
        ) from None
    return obj


def validate(rt: ResourceType, obj: dict[str, Any]) -> list[FieldError]:
    """The 422 problems of decoded metadata. The name is checked when set (an API server
    generates one from generateName, then checks it); the namespace is the URL's, which
    exists, so it is not checked again."""
    meta = obj.get("metadata") or {}
    return om.validate_object_meta(
        {k: v for k, v in meta.items() if k != "namespace"},
        namespaced=False,
        name_rule=builtin.name_rule(rt),
        require_name=False,
    )


def check(
    rt: ResourceType,
    body: Any,
    namespace: str,
    name: str = "",
    *,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """A request body as an object of ``rt`` in ``namespace`` (the URL's) named ``name`` (the
    URL's, or "" on create), with the served apiVersion and kind: 400 or 422 as
    kube-apiserver answers when it is not one. Exact duplicate ownerReferences are dropped,
    with a warning added to ``warnings`` when given."""
    obj = decode(rt, body)
    meta = obj["metadata"]
    found = dedup_owner_references(meta)
    if warnings is not None:
        warnings += found
    body_ns = meta.get("namespace")
    if rt.namespaced:
        if body_ns and namespace and body_ns != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = namespace or body_ns or ""
    else:
        meta.pop("namespace", None)
    if name and meta.get("name") and meta["name"] != name:
        raise bad_request(
            f"the name of the object ({str(meta['name'])[:300]}) does not match the name on "
            f"the URL ({name})"
        )
    if name:
        meta["name"] = name  # the URL names the object a write replaces
    obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
    # A custom resource's metadata is checked with its schema and rules, in one answer
    # (admission), as kube-apiserver's strategy does.
    errors = validate(rt, obj) if rt.schema is None else []
    if errors:
        raise invalid(rt.kind, rt.group, str(meta.get("name") or name), errors)
    return obj


DUPLICATE_OWNER = (
    ".metadata.ownerReferences contains duplicate entries; API server dedups owner references "
    "in 1.20+, and may reject such requests as early as 1.24; please fix your requests. "
    "Duplicate UID: {uid}"
)


def dedup_owner_references(meta: dict[str, Any]) -> list[str]:
    """Drop ownerReferences that repeat an earlier one exactly (in place), as kube-apiserver
    does on every create and update since 1.20 (before validating them); a warning per
    duplicate."""
    refs = meta.get("ownerReferences")
    if not refs:
        return []
    kept: list[Any] = []
    warnings: list[str] = []
    for ref in refs:
        if ref in kept:
            warnings.append(DUPLICATE_OWNER.format(uid=json.dumps(str(ref.get("uid", "")))))
        else:
            kept.append(ref)
    if warnings:
        meta["ownerReferences"] = kept
    return warnings


def check_apply_config(rt: ResourceType, config: dict[str, Any]) -> None:
    """A server-side apply configuration decodes as an object of ``rt`` (400 otherwise).
    Its apiVersion and kind are left to the apply itself, which answers a mismatch with
    ``invalid object type``, as Kubernetes does."""
    decode(rt, {k: v for k, v in config.items() if k not in ("apiVersion", "kind")})


def check_review(group: str, kind: str, body: Any) -> dict[str, Any]:
    """The body of a TokenRequest, TokenReview or SubjectAccessReview (answered, never stored)
    decoded into its type: 400 BadRequest when it is not an object or a field has the wrong
    type."""
    if not isinstance(body, dict):
        raise bad_request(
            f"the object provided is unrecognized (must be of type {kind}): json: cannot "
            f"unmarshal {_json_type(body)} into Go value of type {kind}"
        )
    obj = dict(body)
    try:
        om.check_json_data(body)
        obj["metadata"] = om.decode_object_meta(body.get("metadata"))
        shapes.decode_kind(group, kind, obj)
    except om.DecodeError as exc:
        raise bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: {exc}') from None
    return obj


PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")
DELETE_OPTIONS: dict[str, shapes.Shape] = {
    "propagationPolicy": shapes.STR,
    "orphanDependents": shapes.BOOL,
    "gracePeriodSeconds": shapes.I64,
    "dryRun": [shapes.STR],
    "preconditions": {"__type": "Preconditions", "uid": shapes.STR, "resourceVersion": shapes.STR},
}


def delete_options(body: Any, query: dict[str, str]) -> dict[str, Any]:
    """DeleteOptions from a DELETE body (may be empty) and the query: 400 for wrong types,
    422 for an unknown propagationPolicy or dryRun value, as kube-apiserver answers."""
    if body is None or body == {}:
        options: dict[str, Any] = {}
    elif not isinstance(body, dict):
        raise bad_request(
            f"json: cannot unmarshal {_json_type(body)} into Go value of type v1.DeleteOptions"
        )
    else:
        try:
            options = shapes.decode(body, DELETE_OPTIONS, "DeleteOptions", "")
        except om.DecodeError as exc:
            raise bad_request(str(exc)) from None
    policy = options.get("propagationPolicy") or query.get("propagationPolicy") or ""
    errors: list[FieldError] = []
    if policy and policy not in PROPAGATION_POLICIES:
        errors.append(
            FieldError(
                "propagationPolicy",
                UNSUPPORTED,
                'supported values: "Foreground", "Background", "Orphan"',
                policy,
            )
        )
    for value in options.get("dryRun") or []:
        if value != "All":
            errors.append(FieldError("dryRun", UNSUPPORTED, 'supported values: "All"', value))
    if errors:
        raise invalid("DeleteOptions", "meta.k8s.io", "", errors)
    if not policy and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    options["propagationPolicy"] = policy or None
    if options.get("gracePeriodSeconds") is None and query.get("gracePeriodSeconds"):
        grace = int_param(query, "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
    return options


def int_param(query: dict[str, str], key: str, *, options: str = "") -> int | None:
    """An integer query parameter (``limit``, ``timeoutSeconds``, ``tailLines``...): None when
    absent, 400 BadRequest when it is not an integer; with ``options`` (the kind of options
    it belongs to, such as ``PodLogOptions``) a negative value is 422 Invalid."""
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    text = raw.strip()
    if not text.lstrip("+-").isdigit() or len(text) > 19:
        raise bad_request(f'invalid value for {key}: "{raw[:100]}": must be an integer')
    value = int(text)
    if options and value < 0:
        error = FieldError(key, INVALID, names.NEGATIVE_MSG, value)
        raise invalid(options, "", "", [error])
    return value


def stored_problem(rt: ResourceType, obj: Any) -> str:
    """Why an object read back from storage (a state file written by an older version, say)
    is not one this server would store now, or "" when it is. For a loader that refuses or
    sets aside such rows instead of serving them."""
    if not isinstance(obj, dict):
        return f"not an object: {_json_type(obj)}"
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else ""
    name = meta.get("name") if isinstance(meta, dict) else ""
    try:
        checked = check(
            rt,
            obj,
            namespace if isinstance(namespace, str) else "",
            name if isinstance(name, str) else "",
        )
    except APIError as err:
        return err.message
    if not checked["metadata"].get("name"):
        return "metadata.name: Required value"
    return ""
