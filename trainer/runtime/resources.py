"""Resource arithmetic of the build: per-pod requests, GPU and CPU counts, and the
``resourcesPerNode`` merge."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainer.machinery.models.core import Container, PodSpec, Quantity, ResourceRequirements
from trainer.machinery.quantity import Quantity as Q
from trainer.runtime.apply import upsert_by


def _parsed(values: Mapping[str, Quantity] | None) -> dict[str, Q]:
    return {k: Q.parse(v) for k, v in (values or {}).items()}


def container_requests(container: Container) -> dict[str, Q]:
    """Requests of a container as written in the template (upstream reads requests only;
    limits are not copied into requests here)."""
    res = container.resources
    return _parsed(res.requests) if res is not None else {}


def _pod_total(
    pod: PodSpec, requests_of: Callable[[Container], dict[str, Q]], overhead: dict[str, Q]
) -> dict[str, Q]:
    """max(sum of the containers' requests, largest init container's) plus ``overhead``."""
    total: dict[str, Q] = {}
    for ctr in pod.containers or []:
        for name, q in requests_of(ctr).items():
            total[name] = total[name] + q if name in total else q
    for ctr in pod.init_containers or []:
        for name, q in requests_of(ctr).items():
            if name not in total or q.value > total[name].value:
                total[name] = q
    for name, q in overhead.items():
        total[name] = total[name] + q if name in total else q
    return total


def pod_requests(pod: PodSpec) -> dict[str, Q]:
    """``PodRequests``: max(sum of containers, max of init containers) plus overhead."""
    return _pod_total(pod, container_requests, _parsed(pod.overhead))


def limit_range_defaults(limit_ranges: Sequence[Mapping[str, Any]]) -> dict[str, Q]:
    """The request a container gets for each resource it does not set, from the namespace's
    LimitRanges (``Container`` items): ``defaultRequest``, else ``default``, else ``max`` (a
    LimitRange defaults ``default`` to ``max`` and ``defaultRequest`` to ``default``). When
    several LimitRanges name a resource, the first by name wins (LimitRanger only fills
    values that are still missing)."""
    merged: dict[str, Q] = {}
    for lr in sorted(limit_ranges, key=lambda o: str((o.get("metadata") or {}).get("name"))):
        for item in (lr.get("spec") or {}).get("limits") or []:
            if not isinstance(item, Mapping) or item.get("type") != "Container":
                continue
            own: dict[str, Q] = {}
            for key in ("max", "default", "defaultRequest"):  # later keys take precedence
                for name, value in (item.get(key) or {}).items():
                    own[name] = Q.parse(str(value))
            for name, q in own.items():
                merged.setdefault(name, q)
    return merged


def admitted_pod_requests(
    pod: PodSpec,
    limit_ranges: Sequence[Mapping[str, Any]] = (),
    runtime_classes: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Q]:
    """What one pod made from ``pod`` really requests once the API server has admitted it,
    which is what a gang scheduler must reserve: a container's request is its own, else its
    limit (pod defaulting), else the namespace's LimitRange default (LimitRanger); the pod's
    overhead is its own, else its RuntimeClass's ``overhead.podFixed`` (the RuntimeClass
    admission plugin). Otherwise as :func:`pod_requests`."""
    defaults = limit_range_defaults(limit_ranges)

    def container(ctr: Container) -> dict[str, Q]:
        res = ctr.resources
        out = _parsed(res.requests) if res is not None else {}
        for name, q in (_parsed(res.limits) if res is not None else {}).items():
            out.setdefault(name, q)
        for name, q in defaults.items():
            out.setdefault(name, q)
        return out

    overhead = _parsed(pod.overhead)
    if not overhead and pod.runtime_class_name and runtime_classes:
        rc = runtime_classes.get(pod.runtime_class_name) or {}
        fixed = (rc.get("overhead") or {}).get("podFixed") or {}
        overhead = {name: Q.parse(str(v)) for name, v in fixed.items()}
    return _pod_total(pod, container, overhead)


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
    if base is None:
        out = ResourceRequirements()
    else:
        # A shallow copy whose containers are then replaced: the quantities are strings, the
        # claims are never changed in place (upsert_by copies), and unknown fields are only
        # ever read. Much cheaper than a deep copy of the model.
        out = base.model_copy()
        if base.limits is not None:
            out.limits = dict(base.limits)
        if base.requests is not None:
            out.requests = dict(base.requests)
        if base.claims is not None:
            out.claims = list(base.claims)
    if patch.limits is not None:
        out.limits = {**(out.limits or {}), **patch.limits}
    if patch.requests is not None:
        out.requests = {**(out.requests or {}), **patch.requests}
    if patch.claims is not None:
        out.claims = upsert_by(out.claims, patch.claims, lambda c: c.name)
    return out
