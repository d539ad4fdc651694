"""Resource arithmetic of the build: per-pod requests, GPU and CPU counts, and the
``resourcesPerNode`` merge."""

from __future__ import annotations

from collections.abc import Mapping

from trainer.api.core import Container, PodSpec, Quantity, ResourceRequirements
from trainer.runtime.apply import upsert_by
from trainer.runtime.quantity import Quantity as Q


def _parsed(values: Mapping[str, Quantity] | None) -> dict[str, Q]:
    return {k: Q.parse(v) for k, v in (values or {}).items()}


def container_requests(container: Container) -> dict[str, Q]:
    """Requests of a container as written in the template (upstream reads requests only;
    limits are not copied into requests here)."""
    res = container.resources
    return _parsed(res.requests) if res is not None else {}


def pod_requests(pod: PodSpec) -> dict[str, Q]:
    """``PodRequests``: max(sum of containers, max of init containers) plus overhead."""
    total: dict[str, Q] = {}
    for ctr in pod.containers or []:
        for name, q in container_requests(ctr).items():
            total[name] = total[name] + q if name in total else q
    for ctr in pod.init_containers or []:
        for name, q in container_requests(ctr).items():
            if name not in total or q.value > total[name].value:
                total[name] = q
    for name, q in _parsed(pod.overhead).items():
        total[name] = total[name] + q if name in total else q
    return total


def gpu_count(resources: ResourceRequirements | None) -> int:
    """The first resource whose name contains ``gpu`` (case-insensitive, names sorted), in
    requests, else in limits; 0 when there is none. Deterministic, unlike upstream's map walk.
    """
    if resources is None:
        return 0
    for values in (resources.requests, resources.limits):
        for name in sorted(values or {}):
            if "gpu" in name.lower():
                return Q.parse((values or {})[name]).ceil()
    return 0


def cpu_count(resources: ResourceRequirements | None) -> int:
    """requests.cpu if non-zero, else limits.cpu, rounded up (0.7 -> 1, 2500m -> 3)."""
    if resources is None:
        return 0
    for values in (resources.requests, resources.limits):
        raw = (values or {}).get("cpu")
        if raw is not None:
            q = Q.parse(raw)
            if not q.is_zero():
                return q.ceil()
    return 0


def merge_resources(
    base: ResourceRequirements | None, patch: ResourceRequirements
) -> ResourceRequirements:
    """Strategic merge of ``resourcesPerNode`` onto a container's resources: limits and
    requests per key, claims by name."""
    out = base.model_copy(deep=True) if base is not None else ResourceRequirements()
    if patch.limits is not None:
        out.limits = {**(out.limits or {}), **patch.limits}
    if patch.requests is not None:
        out.requests = {**(out.requests or {}), **patch.requests}
    if patch.claims is not None:
        out.claims = upsert_by(out.claims, patch.claims, lambda c: c.name)
    return out
