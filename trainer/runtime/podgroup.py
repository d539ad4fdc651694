"""What the two gang-scheduling plugins (CoScheduling, Volcano) share: the size of the gang
(``minMember``), the resources it needs at once (``minResources``), when a PodGroup is
(re)applied, and the PodGroup object itself.

Counting pods: one pod set is one replicated job, which JobSet turns into ``replicas`` Jobs of
``count`` pods each. Upstream sums ``count`` only, ignoring ``replicas``; that is exact for the
trainer and initializer steps (the JobSet builder forces them to one replica) but undercounts
any other replicated job with ``replicas > 1``, and a gang smaller than the pods it must place
lets the scheduler start part of the job. This project counts ``count x replicas``, with the
replicas the JobSet will really have (1 for the forced steps, whatever the runtime says).
For every runtime upstream ships, and for any job with one replica, the result is the same.

Watches both gang plugins declare: their PodGroup kind (:func:`pod_group_watch`, optional:
the CRD may not be installed), and the LimitRanges and RuntimeClasses ``minResources``
counts (container defaults, pod overhead). A change to those re-queues only the suspended
TrainJobs that could use it: a running TrainJob's PodGroup is left alone anyway.
"""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.machinery.quantity import Quantity
from trainer.runtime.info import Info, PodSet, Runtime
from trainer.runtime.objects import object_meta
from trainer.runtime.podsets import built_replicas
from trainer.runtime.resources import admitted_pod_requests
from trainer.runtime.watch import ByOwner, Kind, Obj, Store, TrainJobsMatching, Watch

LIMIT_RANGES = Kind("", "v1", "limitranges", "LimitRange")
RUNTIME_CLASSES = Kind("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False)


def _gang(runtime: Runtime) -> bool:
    return runtime.spec is not None and runtime.spec.pod_group_policy is not None


def _namespace(trainjob: TrainJob) -> str:
    return (trainjob.metadata.namespace if trainjob.metadata else None) or "default"


def _name(trainjob: TrainJob) -> str:
    return (trainjob.metadata.name if trainjob.metadata else None) or ""


def _limit_ranges(store: Store, trainjob: TrainJob, runtime: Runtime) -> list[Obj]:
    """Only gangs need them; other jobs do not rebuild when they change."""
    return store.list(_namespace(trainjob)) if _gang(runtime) else []


def _runtime_classes(store: Store, trainjob: TrainJob, runtime: Runtime) -> dict[str, Obj]:
    if not _gang(runtime):
        return {}
    return {str((rc.get("metadata") or {}).get("name")): rc for rc in store.list()}


def _suspended(_obj: Obj, trainjob: Obj, _runtime: Obj | None) -> bool:
    return bool((trainjob.get("spec") or {}).get("suspend"))


def runtime_class_names(trainjob: Obj, runtime: Obj | None) -> set[str]:
    """``runtimeClassName`` values in the pod templates of the runtime and in the TrainJob's
    runtimePatches."""
    names: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            found = value.get("runtimeClassName")
            if isinstance(found, str):
                names.add(found)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(((runtime or {}).get("spec") or {}).get("template"))
    walk((trainjob.get("spec") or {}).get("runtimePatches"))
    return names


def _suspended_using(obj: Obj, trainjob: Obj, runtime: Obj | None) -> bool:
    name = (obj.get("metadata") or {}).get("name")
    return _suspended(obj, trainjob, runtime) and name in runtime_class_names(trainjob, runtime)


LIMIT_RANGES_WATCH = Watch(
    "limit-ranges",
    LIMIT_RANGES,
    TrainJobsMatching(_suspended),
    _limit_ranges,
    into="limit_ranges",
)
RUNTIME_CLASSES_WATCH = Watch(
    "runtime-classes",
    RUNTIME_CLASSES,
    TrainJobsMatching(_suspended_using, same_namespace=False),
    _runtime_classes,
    into="runtime_classes",
)


def _own_pod_group(store: Store, trainjob: TrainJob, runtime: Runtime) -> Obj | None:
    return store.get(_namespace(trainjob), _name(trainjob))


def pod_group_watch(name: str, kind: Kind) -> list[Watch]:
    """What a gang plugin observes: its PodGroup (named like the TrainJob; events by owner)
    and the LimitRanges and RuntimeClasses ``minResources`` counts."""
    own = Watch(name, kind, ByOwner(), _own_pod_group, into="pod_group", optional=True)
    return [own, LIMIT_RANGES_WATCH, RUNTIME_CLASSES_WATCH]


def pod_count(ps: PodSet) -> int:
    """Pods the JobSet makes for ``ps``: pods per Job times Jobs."""
    return ps.count * built_replicas(ps)


def min_member(info: Info) -> int:
    """The gang size: every pod of every replicated job (initializers and launcher too),
    since all of them must be placed for the TrainJob to make progress."""
    return sum(pod_count(ps) for ps in info.pod_sets)


def _add(total: Quantity | None, addend: Quantity) -> Quantity:
    """``total + addend``, keeping the format of the first non-zero operand (Go's
    ``Quantity.Add`` on a zero value adopts the addend's format)."""
    if total is None or total.is_zero():
        return addend
    return total + addend


def min_resources(info: Info) -> dict[str, Quantity]:
    """Σ over pod sets of (single-pod requests x pods), per resource name, sorted by name.

    Single-pod requests follow Kubernetes' ``PodRequests``: max(sum of containers, largest
    init container) plus the pod overhead. Resources totalling zero are kept, as upstream does.

    Beyond upstream, which counts the template as written, they are the requests of the pods
    as the API server will admit them (:func:`admitted_pod_requests`): a limit without a
    request, a LimitRange default and a RuntimeClass overhead all count, so the gang reserves
    what its pods will really ask the scheduler for. The controller re-applies the PodGroup
    of a suspended TrainJob when a LimitRange or RuntimeClass changes.
    """
    observed = info.observed
    totals: dict[str, Quantity] = {}
    for ps in info.pod_sets:
        pods = pod_count(ps)
        single = admitted_pod_requests(ps.pod_spec, observed.limit_ranges, observed.runtime_classes)
        for name, q in single.items():
            totals[name] = _add(totals.get(name), q * pods)
    return {name: totals[name] for name in sorted(totals)}


def min_resources_wire(info: Info) -> dict[str, str]:
    """:func:`min_resources` printed as canonical Kubernetes quantities ("102", "408Gi")."""
    return {name: str(q) for name, q in min_resources(info).items()}


def trainjob_suspended(info: Info) -> bool:
    return bool(info.trainjob.spec and info.trainjob.spec.suspend)


def should_apply(info: Info) -> bool:
    """Whether to (re)apply the PodGroup: only when none exists yet, or while the TrainJob is
    suspended (so changes made while queued, e.g. by Kueue, reach it). A running TrainJob's
    PodGroup is left alone; whether the JobSet is suspended does not matter here."""
    return info.observed.pod_group is None or trainjob_suspended(info)


def pod_group(info: Info, api_version: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A PodGroup named like the TrainJob, in its namespace, with the controller
    ownerReference, as a wire dict."""
    return {
        "apiVersion": api_version,
        "kind": c.KIND_POD_GROUP,
        "metadata": object_meta(info.trainjob, info.name),
        "spec": spec,
    }


def gang_spec(info: Info) -> dict[str, Any]:
    """The part both PodGroup kinds share: ``minMember`` and (when any pod requests
    something) ``minResources``."""
    spec: dict[str, Any] = {"minMember": min_member(info)}
    resources = min_resources_wire(info)
    if resources:
        spec["minResources"] = resources
    return spec
