"""The JSON types of the built-in kinds' fields this server (and its clients) read.

Kubernetes decodes a request body into the kind's Go type, so a field of the wrong type is a
400 BadRequest before anything else happens (``json: cannot unmarshal string into Go struct
field PodSpec.spec.containers of type []v1.Container``). Built-in kinds here have no schema,
so this module declares the types of the fields that the API server, its admission chain,
tables, RBAC evaluation and the local executor read, and decodes a body against them: a wrong
type raises :class:`~trainer.machinery.objectmeta.DecodeError`; ``null`` fields are dropped (Go's
zero value); fields not declared here are kept as sent.

A shape is ``"string"``, ``"int32"``, ``"int64"``, ``"bool"``, ``"bytes"`` (a base64 string,
Go's ``[]byte``), ``"object"`` (any JSON object), a ``dict`` (a struct: field -> shape; a
``"__type"`` entry names the Go type in messages), ``[shape]`` (a list) or ``("map", shape)``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

from trainer.machinery.objectmeta import (
    DecodeError,
    decode_bool,
    decode_int64,
    decode_string,
)

Shape = Any

STR: Final = "string"
I32: Final = "int32"
I64: Final = "int64"
BOOL: Final = "bool"
BYTES: Final = "bytes"
OBJ: Final = "object"


def _m(shape: Shape) -> tuple[str, Shape]:
    return ("map", shape)


KEY_VALUES: Final = _m(STR)
SELECTOR: Final = {
    "__type": "LabelSelector",
    "matchLabels": KEY_VALUES,
    "matchExpressions": [
        {"__type": "LabelSelectorRequirement", "key": STR, "operator": STR, "values": [STR]}
    ],
}
ENV_VAR: Final = {"__type": "EnvVar", "name": STR, "value": STR, "valueFrom": OBJ}
CONTAINER: Final = {
    "__type": "Container",
    "name": STR,
    "image": STR,
    "command": [STR],
    "args": [STR],
    "workingDir": STR,
    "env": [ENV_VAR],
    "envFrom": [OBJ],
    "ports": [{"__type": "ContainerPort", "name": STR, "containerPort": I32, "protocol": STR}],
    "restartPolicy": STR,
    "volumeMounts": [{"__type": "VolumeMount", "name": STR, "mountPath": STR, "readOnly": BOOL}],
    "resources": OBJ,
}
CONTAINER_STATE: Final = {
    "__type": "ContainerState",
    "waiting": {"__type": "ContainerStateWaiting", "reason": STR, "message": STR},
    "running": {"__type": "ContainerStateRunning", "startedAt": STR},
    "terminated": {
        "__type": "ContainerStateTerminated",
        "exitCode": I32,
        "signal": I32,
        "reason": STR,
        "message": STR,
        "startedAt": STR,
        "finishedAt": STR,
    },
}
CONTAINER_STATUS: Final = {
    "__type": "ContainerStatus",
    "name": STR,
    "ready": BOOL,
    "started": BOOL,
    "restartCount": I32,
    "state": CONTAINER_STATE,
    "lastState": CONTAINER_STATE,
}
CONDITION: Final = {
    "__type": "Condition",
    "type": STR,
    "status": STR,
    "reason": STR,
    "message": STR,
    "lastTransitionTime": STR,
}
POD: Final = {
    "spec": {
        "__type": "PodSpec",
        "containers": [CONTAINER],
        "initContainers": [CONTAINER],
        "restartPolicy": STR,
        "nodeName": STR,
        "hostname": STR,
        "subdomain": STR,
        "serviceAccountName": STR,
        "readinessGates": [{"__type": "PodReadinessGate", "conditionType": STR}],
        "schedulingGates": [{"__type": "PodSchedulingGate", "name": STR}],
        "volumes": [{"__type": "Volume", "name": STR}],
        "nodeSelector": KEY_VALUES,
    },
    "status": {
        "__type": "PodStatus",
        "phase": STR,
        "reason": STR,
        "message": STR,
        "podIP": STR,
        "startTime": STR,
        "conditions": [CONDITION],
        "containerStatuses": [CONTAINER_STATUS],
        "initContainerStatuses": [CONTAINER_STATUS],
    },
}
POLICY_RULE: Final = {
    "__type": "PolicyRule",
    "apiGroups": [STR],
    "resources": [STR],
    "verbs": [STR],
    "resourceNames": [STR],
    "nonResourceURLs": [STR],
}
ROLE: Final = {"rules": [POLICY_RULE], "aggregationRule": OBJ}
BINDING: Final = {
    "roleRef": {"__type": "RoleRef", "apiGroup": STR, "kind": STR, "name": STR},
    "subjects": [
        {"__type": "Subject", "kind": STR, "name": STR, "namespace": STR, "apiGroup": STR}
    ],
}
WEBHOOKS: Final = {
    "webhooks": [
        {
            "__type": "Webhook",
            "name": STR,
            "clientConfig": {
                "__type": "WebhookClientConfig",
                "url": STR,
                "caBundle": BYTES,
                "service": {
                    "__type": "ServiceReference",
                    "namespace": STR,
                    "name": STR,
                    "path": STR,
                    "port": I32,
                },
            },
            "rules": [
                {
                    "__type": "RuleWithOperations",
                    "operations": [STR],
                    "apiGroups": [STR],
                    "apiVersions": [STR],
                    "resources": [STR],
                    "scope": STR,
                }
            ],
            "failurePolicy": STR,
            "matchPolicy": STR,
            "sideEffects": STR,
            "reinvocationPolicy": STR,
            "timeoutSeconds": I32,
            "admissionReviewVersions": [STR],
            "objectSelector": SELECTOR,
            "namespaceSelector": SELECTOR,
        }
    ]
}
SPEC_STATUS: Final = {"spec": OBJ, "status": OBJ}
CRD: Final = {
    "spec": {
        "__type": "CustomResourceDefinitionSpec",
        "group": STR,
        "scope": STR,
        "names": {
            "__type": "CustomResourceDefinitionNames",
            "plural": STR,
            "singular": STR,
            "kind": STR,
            "listKind": STR,
            "shortNames": [STR],
            "categories": [STR],
        },
        "versions": [
            {
                "__type": "CustomResourceDefinitionVersion",
                "name": STR,
                "served": BOOL,
                "storage": BOOL,
                "deprecated": BOOL,
                "schema": {"__type": "CustomResourceValidation", "openAPIV3Schema": OBJ},
                "subresources": {
                    "__type": "CustomResourceSubresources",
                    "status": OBJ,
                    "scale": OBJ,
                },
                "additionalPrinterColumns": [
                    {
                        "__type": "CustomResourceColumnDefinition",
                        "name": STR,
                        "type": STR,
                        "format": STR,
                        "description": STR,
                        "priority": I32,
                        "jsonPath": STR,
                    }
                ],
            }
        ],
        "conversion": OBJ,
        "preserveUnknownFields": BOOL,
    },
    "status": OBJ,
}
#: The specs of the reviews (answered, never stored), by (group, kind).
REVIEWS: Final[dict[tuple[str, str], dict[str, Shape]]] = {
    ("authentication.k8s.io", "TokenRequest"): {
        "spec": {
            "__type": "TokenRequestSpec",
            "audiences": [STR],
            "expirationSeconds": I64,
            "boundObjectRef": {
                "__type": "BoundObjectReference",
                "kind": STR,
                "apiVersion": STR,
                "name": STR,
                "uid": STR,
            },
        }
    },
    ("authentication.k8s.io", "TokenReview"): {
        "spec": {"__type": "TokenReviewSpec", "token": STR, "audiences": [STR]}
    },
    ("authorization.k8s.io", "SubjectAccessReview"): {
        "spec": {
            "__type": "SubjectAccessReviewSpec",
            "resourceAttributes": {
                "__type": "ResourceAttributes",
                "namespace": STR,
                "verb": STR,
                "group": STR,
                "version": STR,
                "resource": STR,
                "subresource": STR,
                "name": STR,
            },
            "nonResourceAttributes": {"__type": "NonResourceAttributes", "path": STR, "verb": STR},
            "user": STR,
            "groups": [STR],
            "uid": STR,
            "extra": _m([STR]),
        }
    },
}

#: Top-level shapes by (group, kind).
KINDS: Final[dict[tuple[str, str], dict[str, Shape]]] = {
    ("", "Pod"): POD,
    ("", "ConfigMap"): {"data": _m(STR), "binaryData": _m(BYTES), "immutable": BOOL},
    ("", "Secret"): {"data": _m(BYTES), "stringData": _m(STR), "type": STR, "immutable": BOOL},
    ("", "Namespace"): {
        "spec": {"__type": "NamespaceSpec", "finalizers": [STR]},
        "status": {"__type": "NamespaceStatus", "phase": STR, "conditions": [CONDITION]},
    },
    ("", "Service"): {
        "spec": {"__type": "ServiceSpec", "type": STR, "clusterIP": STR, "selector": KEY_VALUES},
        "status": OBJ,
    },
    ("", "ServiceAccount"): {"secrets": [OBJ], "imagePullSecrets": [OBJ]},
    ("", "Event"): {"involvedObject": OBJ, "reason": STR, "message": STR, "type": STR},
    ("", "LimitRange"): {"spec": {"__type": "LimitRangeSpec", "limits": [OBJ]}},
    ("events.k8s.io", "Event"): {"regarding": OBJ, "reason": STR, "note": STR, "type": STR},
    ("coordination.k8s.io", "Lease"): {
        "spec": {
            "__type": "LeaseSpec",
            "holderIdentity": STR,
            "leaseDurationSeconds": I32,
            "acquireTime": STR,
            "renewTime": STR,
            "leaseTransitions": I32,
        }
    },
    ("batch", "Job"): {
        "spec": {"__type": "JobSpec", "template": OBJ, "suspend": BOOL, "backoffLimit": I32},
        "status": OBJ,
    },
    ("rbac.authorization.k8s.io", "Role"): ROLE,
    ("rbac.authorization.k8s.io", "ClusterRole"): ROLE,
    ("rbac.authorization.k8s.io", "RoleBinding"): BINDING,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): BINDING,
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): WEBHOOKS,
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): WEBHOOKS,
    ("scheduling.k8s.io", "PriorityClass"): {"value": I32, "globalDefault": BOOL},
    ("node.k8s.io", "RuntimeClass"): {"handler": STR, "overhead": OBJ, "scheduling": OBJ},
    ("apiextensions.k8s.io", "CustomResourceDefinition"): CRD,
}

_INT32 = (-(2**31), 2**31 - 1)


def _type_name(shape: Shape) -> str:
    if isinstance(shape, dict):
        return f"v1.{shape.get('__type', 'Object')}"
    if isinstance(shape, list):
        return f"[]{_type_name(shape[0])}"
    if isinstance(shape, tuple):
        return f"map[string]{_type_name(shape[1])}"
    return {BYTES: "[]uint8", OBJ: "map[string]interface {}"}.get(shape, str(shape))


def _fail(value: Any, struct: str, path: str, shape: Shape) -> DecodeError:
    if isinstance(value, bool):
        got = "bool"
    elif isinstance(value, int | float):
        got = "number"
    elif isinstance(value, str):
        got = "string"
    elif isinstance(value, list):
        got = "array"
    else:
        got = "object"
    return DecodeError(
        f"json: cannot unmarshal {got} into Go struct field {struct}.{path} "
        f"of type {_type_name(shape)}"
    )


def _zero(shape: Shape) -> Any:
    """What Go reads for a ``null`` list item or map value."""
    if isinstance(shape, dict) or shape == OBJ:
        return {}
    if isinstance(shape, list):
        return []
    if isinstance(shape, tuple):
        return {}
    return {STR: "", BYTES: "", BOOL: False}.get(shape, 0)


def decode(value: Any, shape: Shape, struct: str, path: str) -> Any:
    """``value`` decoded against ``shape`` (see the module docstring); never None."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise _fail(value, struct, path, shape)
        inner = str(shape.get("__type", struct))
        out: dict[str, Any] = {}
        for key, item in value.items():
            if item is None:
                continue
            sub = shape.get(key) if key != "__type" else None
            at = f"{path}.{key}" if path else key
            out[key] = item if sub is None else decode(item, sub, inner, at)
        return out
    if isinstance(shape, list):
        if not isinstance(value, list):
            raise _fail(value, struct, path, shape)
        zero = _zero(shape[0])
        return [zero if item is None else decode(item, shape[0], struct, path) for item in value]
    if isinstance(shape, tuple):
        if not isinstance(value, dict):
            raise _fail(value, struct, path, shape)
        zero = _zero(shape[1])
        return {
            k: zero if v is None else decode(v, shape[1], struct, path) for k, v in value.items()
        }
    if shape == STR:
        return decode_string(value, struct, path)
    if shape == BOOL:
        return decode_bool(value, struct, path)
    if shape == I64:
        return decode_int64(value, struct, path)
    if shape == I32:
        number = decode_int64(value, struct, path)
        if not _INT32[0] <= number <= _INT32[1]:
            raise DecodeError(
                f"json: cannot unmarshal number {number} into Go struct field "
                f"{struct}.{path} of type int32"
            )
        return number
    if shape == BYTES:
        text = decode_string(value, struct, path)
        try:
            base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
        except (binascii.Error, ValueError):
            raise DecodeError(f"illegal base64 data at {path}") from None
        return text
    if shape == OBJ:
        if not isinstance(value, dict):
            raise _fail(value, struct, path, shape)
        return value
    raise AssertionError(f"unknown shape {shape!r}")


def decode_kind(group: str, kind: str, obj: dict[str, Any]) -> None:
    """Decode the top-level fields of a built-in kind in place (metadata aside)."""
    shapes = KINDS.get((group, kind)) or REVIEWS.get((group, kind)) or SPEC_STATUS
    for key in list(obj):
        if key in ("apiVersion", "kind", "metadata"):
            continue
        value = obj[key]
        if value is None:
            del obj[key]
            continue
        shape = shapes.get(key)
        if shape is not None:
            obj[key] = decode(value, shape, kind, key)
