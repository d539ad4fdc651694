"""Creating TrainJobs (and their runtimes) through an API and following them to the end, for
``trainer run``: progress from watch caches as ``kubectl get -w`` shows it, why pods wait,
and why a TrainJob failed. The same on the local plane and on a cluster (``--kubeconfig``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, NamedTuple

from trainer.api import constants as c
from trainer.cli.failures import DeletedPods, failed_containers
from trainer.cli.logfollow import LogFollower
from trainer.cli.pending import Pending, pending
from trainer.controller.failures import CAUSE_MARK
from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.rest import Kube
from trainer.local.executor.controllers.policy.waiting import not_ready

PLURALS = {
    c.KIND_TRAINJOB: r.TRAINJOBS,
    c.KIND_TRAINING_RUNTIME: r.TRAINING_RUNTIMES,
    c.KIND_CLUSTER_TRAINING_RUNTIME: r.CLUSTER_TRAINING_RUNTIMES,
}


class Printer:
    """Progress and pod logs, one line each, flushed at once."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def line(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)

    def log(self, pod: str, container: str, text: str) -> None:
        print(f"{pod} | {text}", end="" if text.endswith("\n") else "\n", flush=True)


def state_of(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("state") or "Created")


def _jobs_summary(job: dict[str, Any]) -> str:
    parts = []
    for js in (job.get("status") or {}).get("jobsStatus") or []:
        parts.append(
            f"{js['name']}: active {js['active']} ready {js['ready']} "
            f"succeeded {js['succeeded']} failed {js['failed']}"
        )
    return "; ".join(parts)


def _progress(job: dict[str, Any]) -> str:
    """``status.trainerStatus`` in one line (TrainJobStatus gate), or ""."""
    ts = (job.get("status") or {}).get("trainerStatus") or {}
    parts = []
    if ts.get("progressPercentage") is not None:
        parts.append(f"progress {ts['progressPercentage']}%")
    if ts.get("estimatedRemainingSeconds") is not None:
        parts.append(f"ETA {ts['estimatedRemainingSeconds']}s")
    parts += [f"{m.get('name')}={m.get('value')}" for m in ts.get("metrics") or []]
    return ", ".join(parts)


async def apply_all(kube: Kube, docs: list[Any], namespace: str) -> list[tuple[str, str]]:
    """Create the runtimes first, then the TrainJobs; returns the TrainJobs' (ns, name)."""
    jobs: list[tuple[str, str]] = []
    ordered = sorted(docs, key=lambda d: d.data.get("kind") == c.KIND_TRAINJOB)
    for doc in ordered:
        obj = dict(doc.data)
        kind = obj.get("kind")
        gvr = PLURALS[str(kind)]  # checked by _preflight
        meta = dict(obj.get("metadata") or {})
        if gvr.namespaced:
            meta.setdefault("namespace", namespace)
        obj["metadata"] = meta
        await kube.create(obj, gvr=gvr)
        if kind == c.KIND_TRAINJOB:
            jobs.append((meta["namespace"], meta["name"]))
    return jobs


async def follow(
    kube: Kube,
    jobs: list[tuple[str, str]],
    printer: Printer,
    timeout: float | None,
    logs: LogFollower | None = None,
) -> int:
    """Print progress until every TrainJob finished; 0 when all completed, 1 otherwise.

    It reads the plane through its API with watch caches, as ``kubectl get -w`` would, not
    from the API server's memory (docs/design.md, "Processes: how the pieces are wired")."""
    changed = asyncio.Event()
    trainjobs = Informer(kube, r.TRAINJOBS)
    pods = Informer(kube, r.PODS)
    watched = Watched(trainjobs, pods, Informer(kube, r.JOBSETS), Informer(kube, r.NODES))
    for informer in watched:
        informer.add_handler(lambda _type, _obj, _old: changed.set())
    deleted = DeletedPods()
    pods.add_handler(deleted)
    if logs is not None:
        pods.add_handler(logs)
    try:
        await asyncio.gather(*(informer.start() for informer in watched))
        return await _report(watched, changed, jobs, printer, timeout, deleted)
    finally:
        if logs is not None:
            await logs.close()
        await asyncio.gather(*(informer.stop() for informer in watched))


class Watched(NamedTuple):
    """What ``trainer run`` follows, through watch caches."""

    trainjobs: Informer
    pods: Informer
    jobsets: Informer
    nodes: Informer


def _waiting(watched: Watched, ns: str, name: str) -> Pending | None:
    """Why the TrainJob's pods wait for the node, if they do (its JobSet has its name)."""
    return pending(
        name, ns, watched.jobsets.get(ns, name), watched.pods.list(ns), watched.nodes.list()
    )


async def _report(
    watched: Watched,
    changed: asyncio.Event,
    jobs: list[tuple[str, str]],
    printer: Printer,
    timeout: float | None,
    deleted: DeletedPods,
) -> int:
    trainjobs, pods = watched.trainjobs, watched.pods
    last: dict[tuple[str, str], str] = {}
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        changed.clear()
        finished: dict[tuple[str, str], str] = {}
        for ns, name in jobs:
            job = trainjobs.get(ns, name) or {}
            state = state_of(job)
            summary = f"TrainJob {ns}/{name}: {state}" + (
                f" ({_jobs_summary(job)})" if _jobs_summary(job) else ""
            )
            if last.get((ns, name)) != summary:
                printer.line(summary)
                last[(ns, name)] = summary
            progress = _progress(job)
            if progress and last.get(("progress", ns + "/" + name)) != progress:
                printer.line(f"TrainJob {ns}/{name} reports {progress}")
                last[("progress", ns + "/" + name)] = progress
            if state not in (c.COND_COMPLETE, c.COND_FAILED):
                waits = _waiting(watched, ns, name)
                line = waits.line() if waits is not None else ""
                if line and last.get(("waiting", ns + "/" + name)) != line:
                    printer.line(f"TrainJob {ns}/{name} {line}")
                last[("waiting", ns + "/" + name)] = line
                if waits is not None and waits.never:
                    printer.line(
                        f"TrainJob {ns}/{name} can never run on this node: its pods need more "
                        "than a node has or may use, even with nothing else running (see "
                        "`kubectl describe nodes`; --node-config declares the local node)"
                    )
                    return 2
            if state in (c.COND_COMPLETE, c.COND_FAILED):
                finished[(ns, name)] = state
                if state == c.COND_FAILED:
                    cond = next(
                        x for x in job["status"]["conditions"] if x["type"] == c.COND_FAILED
                    )
                    if last.get(("failed", name)) is None:
                        first, *rest = str(cond["message"]).splitlines() or [""]
                        printer.line(f"TrainJob {ns}/{name} failed: {cond['reason']}: {first}")
                        for line in rest:  # the failed container's last output
                            printer.line(f"    {line}")
                        if CAUSE_MARK not in first:  # a controller that does not say why
                            seen = [*pods.list(ns), *deleted.list(ns)]
                            for why in failed_containers(seen, name):
                                printer.line(f"TrainJob {ns}/{name} failed: {why}")
                        last[("failed", name)] = "1"
        if len(finished) == len(jobs):
            return 0 if all(s == c.COND_COMPLETE for s in finished.values()) else 1
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            printer.line(f"timed out after {timeout:g}s")
            for ns, name in jobs:
                if (ns, name) not in finished:
                    for line in not_ready(pods.list(ns), name):
                        printer.line(f"TrainJob {ns}/{name} waits on {line}")
            return 2
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), wait)
