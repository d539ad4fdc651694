"""The API resources the controller, the executor and the dashboard read and write.

Each is a :class:`~trainer.machinery.gvr.GVR` (which builds its REST paths). No discovery is
done: these are the resources of Kubeflow Trainer v2.3, JobSet, the Kubernetes kinds they touch
and the integrations, fixed by the upstream APIs.
"""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.jobset import contract as jsc
from trainer.machinery.gvr import GVR

__all__ = ["GVR", "gvr_for", "gvr_of"]


TRAINJOBS = GVR(c.GROUP, c.VERSION, c.PLURAL_TRAINJOBS, True, c.KIND_TRAINJOB)
TRAINING_RUNTIMES = GVR(
    c.GROUP, c.VERSION, c.PLURAL_TRAINING_RUNTIMES, True, c.KIND_TRAINING_RUNTIME
)
CLUSTER_TRAINING_RUNTIMES = GVR(
    c.GROUP, c.VERSION, c.PLURAL_CLUSTER_TRAINING_RUNTIMES, False, c.KIND_CLUSTER_TRAINING_RUNTIME
)
JOBSETS = GVR(jsc.GROUP, jsc.VERSION, jsc.PLURAL, True, jsc.KIND)
CONFIGMAPS = GVR("", "v1", "configmaps", True, "ConfigMap")
SECRETS = GVR("", "v1", "secrets", True, "Secret")
EVENTS = GVR("", "v1", "events", True, "Event")
LEASES = GVR("coordination.k8s.io", "v1", "leases", True, "Lease")
COSCHEDULING_PODGROUPS = GVR("scheduling.x-k8s.io", "v1alpha1", "podgroups", True, c.KIND_POD_GROUP)
VOLCANO_PODGROUPS = GVR("scheduling.volcano.sh", "v1beta1", "podgroups", True, c.KIND_POD_GROUP)
PRIORITY_CLASSES = GVR("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
LIMIT_RANGES = GVR("", "v1", "limitranges", True, "LimitRange")
RUNTIME_CLASSES = GVR("node.k8s.io", "v1", "runtimeclasses", False, "RuntimeClass")
PODS = GVR("", "v1", "pods", True, "Pod")  # the controller watches them for failure causes
JOBS = GVR("batch", "v1", "jobs", True, "Job")
# The local plane's executor (its Job controller, JobSet controller and kubelet) also writes:
SERVICES = GVR("", "v1", "services", True, "Service")
NODES = GVR("", "v1", "nodes", False, "Node")
SERVICE_ACCOUNTS = GVR("", "v1", "serviceaccounts", True, "ServiceAccount")
NAMESPACES = GVR("", "v1", "namespaces", False, "Namespace")
# The admission webhooks' configurations: the webhook injects its caBundle into them, the local
# plane creates its own.
VALIDATING_WEBHOOK_CONFIGURATIONS = GVR(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    False,
    "ValidatingWebhookConfiguration",
)
MUTATING_WEBHOOK_CONFIGURATIONS = GVR(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    False,
    "MutatingWebhookConfiguration",
)
CRDS = GVR(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"
)

ALL: tuple[GVR, ...] = (
    TRAINJOBS,
    TRAINING_RUNTIMES,
    CLUSTER_TRAINING_RUNTIMES,
    JOBSETS,
    CONFIGMAPS,
    SECRETS,
    EVENTS,
    PODS,
    LEASES,
    COSCHEDULING_PODGROUPS,
    VOLCANO_PODGROUPS,
    PRIORITY_CLASSES,
    LIMIT_RANGES,
    RUNTIME_CLASSES,
    CRDS,
)

_BY_TYPE: dict[tuple[str, str], GVR] = {(g.api_version, g.kind): g for g in ALL}


def gvr_for(api_version: str, kind: str) -> GVR:
    """The resource serving ``kind`` in ``api_version`` (the kinds the controller reads or
    applies); a ``KeyError`` naming the known kinds otherwise."""
    try:
        return _BY_TYPE[(api_version, kind)]
    except KeyError:
        known = ", ".join(sorted(f"{k} ({v})" for v, k in _BY_TYPE))
        raise KeyError(f"no known resource for {kind} in {api_version}; known: {known}") from None


def gvr_of(obj: dict[str, Any]) -> GVR:
    """The resource of a wire object, from its ``apiVersion`` and ``kind``."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise KeyError("the object has no apiVersion and kind to find its resource from")
    return gvr_for(api_version, kind)
