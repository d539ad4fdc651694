"""What the local scheduler decides on (docs/local-plane.md, "Scheduling"): nodes, pods and
JobSet gangs reduced to the fields that matter, with their requests in integer thousandths.
Pure; :mod:`~trainer.local.executor.scheduler.policy.scheduling` makes the decisions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from trainer.jobset import contract as jc
from trainer.machinery import podresources
from trainer.machinery.podresources import amounts

Resources = dict[str, int]
"""Resource -> amount in thousandths (millicores, milli-bytes, milli-GPUs), rounded up, as
integers: a pass compares amounts millions of times at cluster scale, and integers compare
fast (kube-scheduler counts in integers too)."""
MILLI = 1000
PODS = "pods"
"""The count every pod takes of a node's ``pods`` allocatable."""
TOO_MANY_PODS = "Too many pods"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""The coscheduling plugin's label naming a pod's PodGroup."""
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
"""Volcano's annotation naming a pod's PodGroup."""


# --- resources --------------------------------------------------------------------------------
def _add(total: Resources, more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def milli(values: Mapping[str, Fraction]) -> Resources:
    """Amounts in thousandths, rounded up."""
    return {name: math.ceil(value * MILLI) for name, value in values.items()}


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What a pod takes of a node (:func:`trainer.machinery.podresources.pod_requests`), plus
    one of ``pods``."""
    total = milli(podresources.pod_requests(spec))
    total[PODS] = total.get(PODS, 0) + MILLI
    return total


def _minus(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    return {name: a.get(name, 0) - b.get(name, 0) for name in {*a, *b}}


def _floor0(a: Mapping[str, int]) -> Resources:
    return {name: max(value, 0) for name, value in a.items()}


def insufficient(requests: Mapping[str, int], free: Mapping[str, int]) -> list[str]:
    """``NodeResourcesFit``'s reasons: each resource asked for (above zero) beyond what is
    free."""
    reasons = []
    for name in sorted(requests):
        want = requests[name]
        if want > 0 and want > free.get(name, 0):
            reasons.append(TOO_MANY_PODS if name == PODS else f"Insufficient {name}")
    return reasons


def format_amount(name: str, thousandths: int) -> str:
    """An amount as a person reads it: cores (``1.5``), memory in Mi/Gi, a count."""
    value = Fraction(thousandths, MILLI)
    if name == "memory" or name.endswith("storage"):
        gib = value / (1 << 30)
        return f"{float(gib):g}Gi" if gib >= 1 else f"{float(value / (1 << 20)):g}Mi"
    return f"{float(value):g}"


# --- nodes and pods ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeView:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    unschedulable: bool = False


def node_view(node: Mapping[str, Any]) -> NodeView:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return NodeView(
        name=str(meta.get("name") or ""),
        allocatable=milli(amounts((node.get("status") or {}).get("allocatable"))),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(t for t in spec.get("taints") or [] if isinstance(t, Mapping)),
        unschedulable=bool(spec.get("unschedulable")),
    )


@dataclass(frozen=True)
class Placement:
    """What of a pod (or of a pod a template will make) decides where it may go."""

    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


def placement(spec: Mapping[str, Any]) -> Placement:
    return Placement(
        requests=pod_requests(spec),
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity=dict(spec.get("affinity") or {}),
        tolerations=tuple(t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)),
    )


@dataclass(frozen=True)
class PodView:
    uid: str
    namespace: str
    name: str
    created: str
    node_name: str
    place: Placement
    gang: str = ""
    gated: bool = False
    terminal: bool = False
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        """Waiting for a node: unbound, ungated, alive."""
        return not (self.node_name or self.gated or self.terminal or self.deleting)


def gang_key(pod: Mapping[str, Any], *, all_or_nothing: bool) -> str:
    """The gang a pod belongs to: its JobSet (by uid, so a JobSet made again under its name is
    a new gang) when all-or-nothing per JobSet is on or the pod is in a PodGroup (coscheduling's
    label, Volcano's annotation: the PodGroups this project makes hold a JobSet's pods); ``""``
    for a pod scheduled alone."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    jobset = labels.get(jc.LABEL_JOBSET_NAME)
    if not jobset:
        return ""
    grouped = POD_GROUP_LABEL in labels or VOLCANO_GROUP_ANNOTATION in (
        meta.get("annotations") or {}
    )
    if not (all_or_nothing or grouped):
        return ""
    return f"{meta.get('namespace') or ''}/{jobset}/{labels.get(jc.LABEL_JOBSET_UID) or ''}"


def jobset_gang_key(jobset: Mapping[str, Any]) -> str:
    meta = jobset.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}/{meta.get('uid') or ''}"


def pod_view(pod: Mapping[str, Any], *, all_or_nothing: bool = True) -> PodView:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return PodView(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        created=str(meta.get("creationTimestamp") or ""),
        node_name=str(spec.get("nodeName") or ""),
        place=placement(spec),
        gang=gang_key(pod, all_or_nothing=all_or_nothing),
        gated=bool(spec.get("schedulingGates")),
        terminal=(pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class Gang:
    """A JobSet's demand: its phases, each one :class:`Placement` per pod of the replicated
    jobs that run at the same time. A replicated job that ``dependsOn`` another reaching
    ``Complete`` runs in a later phase than it; one that depends on another being ``Ready``
    runs beside it. The phases never run at once, so the gang needs room for its largest."""

    key: str
    phases: tuple[tuple[Placement, ...], ...]
    succeeded_when_done: int = 0
    """How many of its pods have succeeded once every Job of the JobSet completed
    (``replicas`` x ``completions`` of each replicated job); 0 when that is not known (a work
    queue Job, with ``parallelism`` and no ``completions``)."""

    @property
    def slots(self) -> tuple[Placement, ...]:
        return tuple(slot for phase in self.phases for slot in phase)


def jobset_gang(jobset: Mapping[str, Any]) -> Gang | None:
    """The gang of a JobSet that runs (None when suspended or finished): a slot per pod of
    every replicated job not yet done (``replicas`` Jobs of ``min(parallelism, completions)``
    pods each), in its phase."""
    spec = jobset.get("spec") or {}
    status = jobset.get("status") or {}
    if spec.get("suspend") or status.get("terminalState"):
        return None
    done = {
        str(s.get("name")): int(s.get("succeeded") or 0)
        for s in status.get("replicatedJobsStatus") or []
    }
    phase_of: dict[str, int] = {}
    phases: dict[int, list[Placement]] = {}
    succeeded: int | None = 0
    for rj in spec.get("replicatedJobs") or []:
        name = str(rj.get("name"))
        phase = 0
        for dep in rj.get("dependsOn") or []:
            before = phase_of.get(str(dep.get("name")), 0)
            phase = max(phase, before + 1 if dep.get("status") == "Complete" else before)
        phase_of[name] = phase
        replicas = int(rj.get("replicas") or 1)
        job_spec = (rj.get("template") or {}).get("spec") or {}
        completions = _completions(job_spec)
        succeeded = (
            None
            if succeeded is None or completions is None
            else succeeded + (replicas * completions)
        )
        if done.get(name, 0) >= replicas:
            continue
        parallelism = int(job_spec.get("parallelism", 1) or 0)
        if job_spec.get("completions") is not None:
            parallelism = min(parallelism, int(job_spec["completions"]))
        pod_spec = (job_spec.get("template") or {}).get("spec") or {}
        phases.setdefault(phase, []).extend(
            [placement(pod_spec)] * (replicas * max(parallelism, 0))
        )
    return Gang(
        jobset_gang_key(jobset), tuple(tuple(phases[p]) for p in sorted(phases)), succeeded or 0
    )


def _completions(job_spec: Mapping[str, Any]) -> int | None:
    """The successful pods a Job needs: ``completions``, or 1 when neither it nor
    ``parallelism`` above 1 is set (batch/v1's defaults); None for a work queue."""
    if job_spec.get("completions") is not None:
        return int(job_spec["completions"])
    parallelism = job_spec.get("parallelism")
    return 1 if parallelism is None or int(parallelism) <= 1 else None
