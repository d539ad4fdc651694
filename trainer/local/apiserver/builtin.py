"""The built-in kinds the project needs, and their per-kind behaviour on write."""

from __future__ import annotations

import base64
from typing import Any

from trainer.local.apiserver.resources import Registry, ResourceType
from trainer.machinery import names
from trainer.machinery.errors import FORBIDDEN, INVALID, REQUIRED, TOO_LONG, FieldError
from trainer.machinery.merge_keys import CORE_MERGE_KEYS


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
            binding=True,
            categories=("all",),
        ),
        rt("", "v1", "Node", "nodes", False, short_names=("no",), status=True),
        rt("", "v1", "Event", "events", True, short_names=("ev",)),
        rt("", "v1", "LimitRange", "limitranges", True, short_names=("limits",)),
        rt("events.k8s.io", "v1", "Event", "events", True, short_names=("ev",)),
        rt("coordination.k8s.io", "v1", "Lease", "leases", True),
        rt("batch", "v1", "Job", "jobs", True, status=True, categories=("all",)),
        # Stored and served, run by no controller here (docs/local-plane.md, "What the local
        # plane is for"): kube-scheduler's informers list ReplicaSets and PodDisruptionBudgets,
        # and the Helm chart's install applies a Deployment and a PodDisruptionBudget.
        rt(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            True,
            short_names=("deploy",),
            status=True,
            categories=("all",),
        ),
        rt(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            True,
            short_names=("rs",),
            status=True,
            categories=("all",),
        ),
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
        *(rt(g, v, k, p, ns, short_names=sn, status=st) for g, v, k, p, ns, sn, st in WATCHED),
    ]


WATCHED: tuple[tuple[str, str, str, str, bool, tuple[str, ...], bool], ...] = (
    ("", "v1", "PersistentVolume", "persistentvolumes", False, ("pv",), True),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, ("pvc",), True),
    ("", "v1", "ReplicationController", "replicationcontrollers", True, ("rc",), True),
    ("apps", "v1", "StatefulSet", "statefulsets", True, ("sts",), True),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",), False),
    ("storage.k8s.io", "v1", "CSINode", "csinodes", False, (), False),
    ("storage.k8s.io", "v1", "CSIDriver", "csidrivers", False, (), False),
    ("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities", True, (), False),
    ("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", False, (), True),
    ("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False, (), False),
    ("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", True, (), True),
    ("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", False, (), False),
)
"""Kinds kube-scheduler's informers list and watch (volumes, storage, DRA, the workloads its
default topology spreading reads) and wait for before they schedule a pod: stored and served
with no behaviour of their own, so that their caches sync (docs/local-plane.md, "Running the
real programs against the plane")."""


def new_registry() -> Registry:
    reg = Registry()
    for t in builtin_types():
        reg.add(t)
    return reg


RBAC = "rbac.authorization.k8s.io"
#: The kinds whose names follow another rule than DNS-1123 subdomains (ValidateNameFunc).
NAME_RULES: dict[tuple[str, str], names.NameRule] = {
    ("", "namespaces"): names.name_is_dns_label,
    ("", "services"): names.name_is_dns1035_label,
    (RBAC, "roles"): names.path_segment_name,
    (RBAC, "clusterroles"): names.path_segment_name,
    (RBAC, "rolebindings"): names.path_segment_name,
    (RBAC, "clusterrolebindings"): names.path_segment_name,
}
MAX_DATA_SIZE = 1024 * 1024  # core.MaxSecretSize: ConfigMap and Secret data


def name_rule(rt: ResourceType) -> names.NameRule:
    """The kind's ``ValidateNameFunc`` (custom resources: DNS-1123 subdomains)."""
    return NAME_RULES.get(rt.key, names.name_is_dns_subdomain)


def validate_name(rt: ResourceType, name: str) -> list[FieldError]:
    """An object's name by its kind's rule (``metadata.name`` errors)."""
    if not name:
        return [FieldError("metadata.name", REQUIRED, "name or generateName is required")]
    return [FieldError("metadata.name", INVALID, m, name) for m in name_rule(rt)(name, False)]


STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})


def _kube_finalizer_name(name: str) -> list[str]:
    """A Namespace's spec.finalizers: qualified names, and a name without a ``/`` prefix
    must be one of Kubernetes' standard finalizers."""
    errors = names.is_qualified_name(name)
    if "/" not in name and name not in STANDARD_FINALIZERS:
        errors.append("name is neither a standard finalizer name nor is it fully qualified")
    return errors


def _data_keys(path: str, keys: Any) -> list[FieldError]:
    return [
        FieldError(f"{path}[{key}]", INVALID, msg, key)
        for key in keys
        for msg in names.is_config_map_key(key)
    ]


def _data_size(values: Any, *, encoded: bool) -> int:
    total = 0
    for value in values:
        text = str(value)
        total += len(text) * 3 // 4 if encoded else len(text.encode("utf-8", "surrogatepass"))
    return total


def prepare(rt: ResourceType, obj: dict[str, Any], *, creating: bool = False) -> list[FieldError]:
    """Per-kind defaulting and checks on every write of a built-in kind (in place);
    ``creating``: what kube-apiserver does only when the object is created."""
    errors: list[FieldError] = []
    kind = rt.kind
    if kind == "Secret":
        # Request bodies were decoded (shapes.py): data values are base64 strings, stringData
        # values strings.
        string_data = obj.pop("stringData", None) or {}
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        errors += _data_keys("data", data)
        if _data_size(data.values(), encoded=True) > MAX_DATA_SIZE:
            errors.append(
                FieldError("data", TOO_LONG, f"may not be more than {MAX_DATA_SIZE} bytes")
            )
        if data or "data" in obj:
            obj["data"] = data
        obj.setdefault("type", "Opaque")
    elif kind == "ConfigMap":
        data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
        errors += _data_keys("data", data)
        errors += _data_keys("binaryData", binary)
        errors += [
            FieldError(f"data[{key}]", INVALID, "duplicate of key present in binaryData", key)
            for key in data
            if key in binary
        ]
        size = _data_size(data.values(), encoded=False) + _data_size(binary.values(), encoded=True)
        if size > MAX_DATA_SIZE:
            errors.append(FieldError("", TOO_LONG, f"may not be more than {MAX_DATA_SIZE} bytes"))
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        errors += [
            FieldError("spec.finalizers", INVALID, msg, name)
            for name in obj["spec"]["finalizers"]
            for msg in _kube_finalizer_name(name)
        ]
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Active")
    elif kind == "Pod":
        spec = obj.get("spec") or {}
        if not spec.get("containers"):
            errors.append(FieldError("spec.containers", REQUIRED, ""))
        for group in ("initContainers", "containers"):
            for i, container in enumerate(spec.get(group) or []):
                if not container.get("name"):
                    errors.append(FieldError(f"spec.{group}[{i}].name", REQUIRED, ""))
                _default_requests(container)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        spec.setdefault("restartPolicy", "Always")
        # kube-apiserver's default (SetDefaults_PodSpec): kube-scheduler binds only the pods
        # whose schedulerName names one of its profiles, and left none pending without it.
        spec.setdefault("schedulerName", "default-scheduler")
    elif kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
    elif kind == "Job":
        spec = obj.setdefault("spec", {})
        if not spec.get("template"):
            errors.append(FieldError("spec.template", REQUIRED, ""))
        spec.setdefault(
            "backoffLimit", 6 if spec.get("backoffLimitPerIndex") is None else MAX_INT32
        )
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        if spec.get("parallelism") is None:
            spec["parallelism"] = 1
            if "completions" not in spec or spec["completions"] is None:
                spec["completions"] = 1
        failure_policy = spec.get("podFailurePolicy") is not None
        spec.setdefault(
            "podReplacementPolicy", "Failed" if failure_policy else "TerminatingOrFailed"
        )
        if creating and not spec.get("manualSelector"):
            _job_selector(obj)
    return errors


MAX_INT32 = 2**31 - 1


def _job_selector(job: dict[str, Any]) -> None:
    """The selector kube-apiserver gives a Job at its creation (pkg/registry/batch/job
    generateSelector): its pods' labels name the Job and its uid, and the selector matches the
    uid. kube-controller-manager's Job controller finds the Job's pods by it (a Job without
    one selects none of them)."""
    meta = job.get("metadata") or {}
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    template = job["spec"].setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.setdefault("job-name", name)
    labels["batch.kubernetes.io/job-name"] = name
    labels.setdefault("controller-uid", uid)
    labels["batch.kubernetes.io/controller-uid"] = uid
    selector = job["spec"].get("selector") or {}
    selector.setdefault("matchLabels", {}).setdefault("batch.kubernetes.io/controller-uid", uid)
    job["spec"]["selector"] = selector


def _default_requests(container: Any) -> None:
    """A container's request defaults to its limit for each resource it limits but does not
    request, as kube-apiserver defaults a pod (what the scheduler and ``kubectl describe
    node`` then count)."""
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
        return
    requests = resources.get("requests")
    if requests is None:
        requests = resources["requests"] = {}
    if isinstance(requests, dict):
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)


IMMUTABLE_SET = "field is immutable when `immutable` is set"
# The fields ``immutable: true`` freezes, per kind (ValidateConfigMapUpdate, ValidateSecretUpdate).
FROZEN = {"ConfigMap": ("data", "binaryData"), "Secret": ("data",)}


def validate_update(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """Per-kind update rules of a built-in kind, after :func:`prepare` (so a Secret's
    ``stringData`` is already in ``data``): an immutable ConfigMap or Secret keeps its data and
    stays immutable; a Secret keeps its type."""
    errors: list[FieldError] = []
    frozen = FROZEN.get(rt.kind) if rt.group == "" else None
    if frozen is None:
        return errors
    if old.get("immutable") is True:
        if obj.get("immutable") is not True:
            errors.append(FieldError("immutable", FORBIDDEN, IMMUTABLE_SET))
        errors += [
            FieldError(key, FORBIDDEN, IMMUTABLE_SET)
            for key in frozen
            if (obj.get(key) or {}) != (old.get(key) or {})
        ]
    if rt.kind == "Secret" and obj.get("type") != old.get("type", "Opaque"):
        errors.append(FieldError("type", INVALID, "field is immutable", obj.get("type")))
    return errors
