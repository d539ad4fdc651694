"""The built-in kinds the project needs, and their per-kind behaviour on write."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from trainer.api.errors import INVALID, REQUIRED, FieldError
from trainer.local.apiserver.resources import Registry, ResourceType

# Strategic-merge list keys of the core types (by field name: unambiguous in these kinds).
CORE_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "conditions": "type",
    "webhooks": "name",
    "finalizers": "",  # a set of strings
}

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CONFIG_KEY_MESSAGE = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def builtin_types() -> list[ResourceType]:
    def rt(
        group: str, version: str, kind: str, plural: str, namespaced: bool, **kw: Any
    ) -> ResourceType:
        return ResourceType(
            group, version, kind, plural, namespaced, merge_keys=CORE_MERGE_KEYS, **kw
        )

    return [
        rt("", "v1", "Namespace", "namespaces", False, short_names=("ns",), status=True),
        rt("", "v1", "ConfigMap", "configmaps", True, short_names=("cm",)),
        rt("", "v1", "Secret", "secrets", True),
        rt(
            "",
            "v1",
            "Service",
            "services",
            True,
            short_names=("svc",),
            status=True,
            categories=("all",),
        ),
        rt("", "v1", "ServiceAccount", "serviceaccounts", True, short_names=("sa",), token=True),
        rt(
            "authentication.k8s.io",
            "v1",
            "TokenReview",
            "tokenreviews",
            False,
            verbs=("create",),
        ),
        rt(
            "authorization.k8s.io",
            "v1",
            "SubjectAccessReview",
            "subjectaccessreviews",
            False,
            verbs=("create",),
        ),
        rt(
            "authentication.k8s.io",
            "v1",
            "SelfSubjectReview",
            "selfsubjectreviews",
            False,
            verbs=("create",),
        ),
        rt(
            "authorization.k8s.io",
            "v1",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            False,
            verbs=("create",),
        ),
        rt(
            "",
            "v1",
            "Pod",
            "pods",
            True,
            short_names=("po",),
            status=True,
            log=True,
            categories=("all",),
        ),
        rt("", "v1", "Event", "events", True, short_names=("ev",)),
        rt("", "v1", "LimitRange", "limitranges", True, short_names=("limits",)),
        rt("events.k8s.io", "v1", "Event", "events", True, short_names=("ev",)),
        rt("coordination.k8s.io", "v1", "Lease", "leases", True),
        rt("batch", "v1", "Job", "jobs", True, status=True, categories=("all",)),
        # Stored only (nothing runs them): enough to apply a real install (manifests/).
        rt("apps", "v1", "Deployment", "deployments", True, short_names=("deploy",), status=True),
        rt(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            True,
            short_names=("pdb",),
            status=True,
        ),
        rt("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
        rt("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
        rt("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
        rt("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
        rt(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            False,
            short_names=("pc",),
        ),
        rt("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
        rt(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            False,
            short_names=("crd", "crds"),
            status=True,
        ),
        rt(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            False,
        ),
        rt(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            False,
        ),
    ]


def new_registry() -> Registry:
    reg = Registry()
    for t in builtin_types():
        reg.add(t)
    return reg


def validate_name(rt: ResourceType, name: str) -> list[FieldError]:
    """Object names: DNS-1123 labels for namespaces, subdomains otherwise."""
    if not name:
        return [FieldError("metadata.name", REQUIRED, "name or generateName is required")]
    if rt.plural == "namespaces":
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            return [
                FieldError(
                    "metadata.name",
                    INVALID,
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character",
                    name,
                )
            ]
        return []
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        return [
            FieldError(
                "metadata.name",
                INVALID,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                name,
            )
        ]
    return []


def prepare(rt: ResourceType, obj: dict[str, Any]) -> list[FieldError]:
    """Per-kind defaulting and checks on every write of a built-in kind (in place)."""
    errors: list[FieldError] = []
    kind = rt.kind
    if kind == "Secret":
        string_data = obj.pop("stringData", None) or {}
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        for key, value in data.items():
            if not CONFIG_KEY.match(key):
                errors.append(
                    FieldError(
                        f"data[{key}]",
                        INVALID,
                        CONFIG_KEY_MESSAGE,
                        key,
                    )
                )
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                errors.append(
                    FieldError(f"data[{key}]", INVALID, "illegal base64 data", "<secret>")
                )
        if data or "data" in obj:
            obj["data"] = data
        obj.setdefault("type", "Opaque")
    elif kind == "ConfigMap":
        for key in obj.get("data") or {}:
            if not CONFIG_KEY.match(key):
                errors.append(
                    FieldError(
                        f"data[{key}]",
                        INVALID,
                        CONFIG_KEY_MESSAGE,
                        key,
                    )
                )
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Active")
    elif kind == "Pod":
        spec = obj.get("spec") or {}
        if not spec.get("containers"):
            errors.append(FieldError("spec.containers", REQUIRED, ""))
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        spec.setdefault("restartPolicy", "Always")
    elif kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
    elif kind == "Job":
        spec = obj.setdefault("spec", {})
        if not spec.get("template"):
            errors.append(FieldError("spec.template", REQUIRED, ""))
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
    return errors
