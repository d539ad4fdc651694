"""One controller's run of a corpus on the bed (docs/side-by-side.md): create the runtimes and
TrainJobs in a namespace of their own, record each TrainJob's admission verdict, wait until
every admitted TrainJob has its JobSet and has finished on KWOK's pods (or the settle time is
over), then record what the controller wrote: JobSets, Secrets, ConfigMaps, PodGroups and the
TrainJobs' status.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from objects import jobs_status_as_mirror, key, normalise

from trainer.kube.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    JOBSETS,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    TRAINJOBS,
    VOLCANO_PODGROUPS,
)
from trainer.kube.rest import Kube
from trainer.machinery.gvr import GVR
from trainer.machinery.requests import APIError

NAMESPACES = GVR("", "v1", "namespaces", False, "Namespace")
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
RECORDED = (JOBSETS, SECRETS, CONFIGMAPS, COSCHEDULING_PODGROUPS, VOLCANO_PODGROUPS)
ADMITTED = "admitted"
SUPPORT = {"ServiceAccount": SERVICE_ACCOUNTS, "ConfigMap": CONFIGMAPS, "Secret": SECRETS}


@dataclass
class Phase:
    """What one controller did with the corpus."""

    controller: str
    namespace: str
    verdicts: dict[str, str] = field(default_factory=dict)
    """TrainJob name -> "admitted" or the API server's answer (code, reason, message)."""
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``Kind/name`` -> normalised object."""
    unsettled: list[str] = field(default_factory=list)
    support: list[str] = field(default_factory=list)
    """Names of the objects created for the corpus (not written by a controller)."""
    """TrainJobs still without a JobSet or unfinished when the settle time ran out."""
    seconds: float = 0.0


def _terminal(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


def _expects_jobset(job: dict[str, Any]) -> bool:
    return (job.get("spec") or {}).get("managedBy") != MULTIKUEUE


def _expects_finish(job: dict[str, Any]) -> bool:
    spec = job.get("spec") or {}
    return _expects_jobset(job) and not spec.get("suspend")


async def _create(kube: Kube, obj: dict[str, Any], namespace: str) -> str:
    body = copy.deepcopy(obj)
    if obj["kind"] != "ClusterTrainingRuntime":
        body["metadata"]["namespace"] = namespace
    try:
        await kube.create(body)
    except APIError as err:
        return f"{err.status} {err.reason}: {err.message}".replace(namespace, "$NS")
    return ADMITTED


async def run_phase(
    kube: Kube,
    controller: str,
    namespace: str,
    cluster_runtimes: list[dict[str, Any]],
    runtimes: list[dict[str, Any]],
    trainjobs: list[dict[str, Any]],
    settle: float,
    say: Callable[[str], None] = lambda _: None,
    concurrency: int = 8,
    support: list[dict[str, Any]] | None = None,
    quiet: float = 12.0,
    settled_elsewhere: frozenset[str] | None = None,
    grace: float = 10.0,
    linger: float = 3.0,
) -> Phase:
    """``support``: objects the TrainJobs' pods refer to (ServiceAccounts, ConfigMaps,
    Secrets), created first in the namespace. ``settled_elsewhere``: TrainJobs the other
    controller's phase settled, when that phase ran first. While one of them is still
    unsettled here at the deadline, the phase waits up to ``grace`` seconds more for it (KWOK's
    nodes are shared by what each side runs, so a TrainJob created last may start later on one
    side than on the other); once none is, the phase ends: what is left, the other side left
    unsettled too, and the comparison leaves out its status either way."""
    started = time.monotonic()
    phase = Phase(controller, namespace, support=[o["metadata"]["name"] for o in support or []])
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    await kube.create(namespace_obj, gvr=NAMESPACES)
    for obj in support or []:
        body = copy.deepcopy(obj)
        body["metadata"]["namespace"] = namespace
        await kube.create(body, gvr=SUPPORT[body["kind"]])
    for runtime in [*cluster_runtimes, *runtimes]:
        verdict = await _create(kube, runtime, namespace)
        phase.verdicts[f"{runtime['kind']}/{runtime['metadata']['name']}"] = verdict
    gate = asyncio.Semaphore(concurrency)

    async def one(job: dict[str, Any]) -> None:
        async with gate:
            phase.verdicts[f"TrainJob/{job['metadata']['name']}"] = await _create(
                kube, job, namespace
            )

    await asyncio.gather(*(one(j) for j in trainjobs))
    admitted = {
        n.split("/", 1)[1]
        for n, v in phase.verdicts.items()
        if v == ADMITTED and n.startswith("TrainJob/")
    }
    by_name = {j["metadata"]["name"]: j for j in trainjobs}
    want_jobset = {n for n in admitted if _expects_jobset(by_name[n])}
    want_finish = {n for n in admitted if _expects_finish(by_name[n])}
    say(
        f"{controller}: {len(admitted)} of {len(trainjobs)} TrainJobs admitted; waiting for "
        f"{len(want_jobset)} JobSets and {len(want_finish)} finished TrainJobs"
    )
    deadline = time.monotonic() + settle
    last: frozenset[str] | None = None
    changed = time.monotonic()
    while True:
        jobsets, _ = await kube.list(JOBSETS, namespace)
        jobs, _ = await kube.list(TRAINJOBS, namespace)
        pods, _ = await kube.list(PODS, namespace)
        missing = want_jobset - {j["metadata"]["name"] for j in jobsets}
        running = want_finish - {j["metadata"]["name"] for j in jobs if _terminal(j)}
        now = time.monotonic()
        # Any write to a pod (created, bound, each KWOK stage), a JobSet or a TrainJob is
        # movement.
        state = frozenset(
            f"{kind}/{o['metadata']['name']}@{o['metadata']['resourceVersion']}"
            for kind, items in (("Pod", pods), ("JobSet", jobsets), ("TrainJob", jobs))
            for o in items
        )
        if state != last:
            last, changed = state, now
        still = now - changed
        # KWOK moves a pod a stage 1-6 s after the last (its general pod stages) and the
        # scheduler retries an unschedulable pod within 10 s (its longest back-off): when
        # nothing has moved for ``quiet`` seconds, what is left is stuck (pods no node fits, a
        # controller that gave up). A TrainJob the other side settled is waited for until the
        # deadline (and ``grace``) instead; once none is left, what is, the other side left
        # unsettled too.
        owed = (missing | running) & (settled_elsewhere or frozenset())
        late = now > deadline + (grace if owed else 0.0)
        done = not missing and not running
        done_elsewhere = settled_elsewhere is not None and not owed
        # Settled, the phase still waits for ``linger`` seconds without a write: status
        # written after a TrainJob finished (a Job's last count in jobsStatus) is recorded on
        # both sides or on neither.
        if (done or done_elsewhere) and still >= linger:
            if not done:
                phase.unsettled = sorted(missing | running)
                left = len(phase.unsettled)
                say(f"{controller}: {left} TrainJobs unsettled, as on the other side")
            break
        if late or (not owed and still > quiet):
            phase.unsettled = sorted(missing | running)
            why = "its time ran out" if late else f"nothing moved for {quiet:.0f} s"
            say(f"{controller}: {len(phase.unsettled)} TrainJobs unsettled ({why})")
            break
        await asyncio.sleep(0.5)
    await record(kube, phase)
    await clean(kube, phase, cluster_runtimes)
    phase.seconds = time.monotonic() - started
    return phase


async def clean(kube: Kube, phase: Phase, cluster_runtimes: list[dict[str, Any]]) -> None:
    """The run's namespace and cluster runtimes go, so the next controller neither reconciles
    this run's TrainJobs nor finds its runtimes."""
    await kube.delete(NAMESPACES, None, phase.namespace)
    for r in cluster_runtimes:
        await kube.delete(CLUSTER_TRAINING_RUNTIMES, None, r["metadata"]["name"])


async def record(kube: Kube, phase: Phase) -> None:
    jobsets: dict[str, dict[str, Any]] = {}
    for gvr in RECORDED:
        try:
            items, _ = await kube.list(gvr, phase.namespace)
        except APIError as err:
            if err.is_unserved:
                continue
            raise
        for item in items:
            if item["metadata"]["name"] in ("kube-root-ca.crt", *phase.support):
                continue
            if gvr == JOBSETS:
                jobsets[item["metadata"]["name"]] = item
            phase.objects[key(item)] = normalise(item, phase.namespace)
    jobs, _ = await kube.list(TRAINJOBS, phase.namespace)
    for job in jobs:
        kept = {
            "apiVersion": job["apiVersion"],
            "kind": job["kind"],
            "metadata": job["metadata"],
            "spec": job.get("spec") or {},
            "status": job.get("status") or {},
        }
        kept = jobs_status_as_mirror(kept, jobsets.get(job["metadata"]["name"]))
        phase.objects[key(job)] = normalise(kept, phase.namespace)
