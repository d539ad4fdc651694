"""What the simulation benchmark (hack/bench/simulate.py) observes and reports: the driver's slim
watches of TrainJobs, JobSets and pods with the time each change was seen (latencies, and with
``--check`` the GPU and gang invariants), the CPU and memory of each process, and the report."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
from typing import Any

import aiohttp
from benchlib import percentiles, proc_cpu_seconds, proc_rss_mb

from trainer.jobset import contract as jc
from trainer.kube import resources as r
from trainer.kube.informer import DELETED, Informer
from trainer.kube.rest import Kube
from trainer.machinery.owners import controller_of

GPU = "nvidia.com/gpu"
TERMINAL = ("Succeeded", "Failed")


def _meta(obj: dict[str, Any], labels: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    out = {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")}
    out["labels"] = labels or {}
    return out


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    gpus = 0
    for container in spec.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        with contextlib.suppress(TypeError, ValueError):
            gpus += int(limits.get(GPU, 0))
    refused = any(
        cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable"
        for cond in status.get("conditions") or []
    )
    gang = f"{labels.get(jc.LABEL_JOBSET_NAME)}/{labels.get(jc.LABEL_RESTART_ATTEMPT)}"
    return {
        "metadata": _meta(pod),
        "s": {
            "node": spec.get("nodeName"),
            "phase": status.get("phase"),
            "gpus": gpus,
            "gang": gang,
            "refused": refused,
        },
    }


def slim_trainjob(job: dict[str, Any]) -> dict[str, Any]:
    conditions = (job.get("status") or {}).get("conditions") or []
    state = [
        cond["type"]
        for cond in conditions
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True"
    ]
    return {"metadata": _meta(job), "s": {"state": state[0] if state else None}}


def slim_jobset(js: dict[str, Any]) -> dict[str, Any]:
    owner = controller_of(js, "TrainJob")
    restarts = int((js.get("status") or {}).get("restarts") or 0)
    return {"metadata": _meta(js), "s": {"owner": (owner or {}).get("name"), "restarts": restarts}}


class Tracker:
    """The time (monotonic, as the driver saw it) of each step of each TrainJob and pod."""

    def __init__(self, *, check: bool, gpus_per_node: int) -> None:
        self.check, self.gpus_per_node = check, gpus_per_node
        self.created_at: dict[str, float] = {}
        self.jobset_at: dict[str, float] = {}
        self.done_at: dict[str, float] = {}
        self.failed: set[str] = set()
        self.restarts: dict[str, int] = {}
        self.pod_seen_at: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self.running_at: dict[str, float] = {}
        self.ended: set[str] = set()
        self.held: dict[str, tuple[str, int, str]] = {}  # uid -> (node, gpus, gang)
        self.usage: dict[str, int] = {}
        self.peak_gpus = 0
        self.overallocated: list[str] = []
        self.partial: list[str] = []
        self._changed = asyncio.Event()

    def informers(self, kube: Kube) -> list[Informer]:
        pods = Informer(kube, r.PODS, transform=slim_pod)
        jobsets = Informer(kube, r.JOBSETS, transform=slim_jobset)
        jobs = Informer(kube, r.TRAINJOBS, transform=slim_trainjob)
        pods.add_handler(self._on_pod)
        jobsets.add_handler(self._on_jobset)
        jobs.add_handler(self._on_trainjob)
        return [pods, jobsets, jobs]

    async def changed(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
        self._changed.clear()

    def finished(self, total: int) -> bool:
        return len(self.done_at) + len(self.failed) >= total

    # --- handlers -------------------------------------------------------------------------
    def _on_trainjob(self, kind: str, obj: dict[str, Any], _old: Any) -> None:
        name, state = obj["metadata"]["name"], obj["s"]["state"]
        if kind != DELETED and state == "Complete" and name not in self.done_at:
            self.done_at[name] = asyncio.get_running_loop().time()
            self._changed.set()
        elif kind != DELETED and state == "Failed":
            self.failed.add(name)
            self._changed.set()

    def _on_jobset(self, kind: str, obj: dict[str, Any], _old: Any) -> None:
        owner = obj["s"]["owner"]
        if kind == DELETED or not owner:
            return
        self.jobset_at.setdefault(owner, asyncio.get_running_loop().time())
        self.restarts[owner] = obj["s"]["restarts"]

    def _on_pod(self, kind: str, obj: dict[str, Any], _old: Any) -> None:
        now = asyncio.get_running_loop().time()
        uid, s = obj["metadata"]["uid"], obj["s"]
        self.pod_seen_at.setdefault(uid, now)
        if s["node"]:
            self.bound_at.setdefault(uid, now)
        if s["phase"] == "Running":
            self.running_at.setdefault(uid, now)
        if kind == DELETED or s["phase"] in TERMINAL:
            self.ended.add(uid)
        if self.check:
            self._invariants(kind, uid, s)

    def _invariants(self, kind: str, uid: str, s: dict[str, Any]) -> None:
        gone = kind == DELETED or s["phase"] in TERMINAL
        if uid in self.held and (gone or not s["node"]):
            node, gpus, _ = self.held.pop(uid)
            self.usage[node] -= gpus
        if not gone and s["node"] and uid not in self.held:
            self.held[uid] = (s["node"], s["gpus"], s["gang"])
            use = self.usage.get(s["node"], 0) + s["gpus"]
            self.usage[s["node"]] = use
            self.peak_gpus = max(self.peak_gpus, use)
            if use > self.gpus_per_node:
                self.overallocated.append(f"{s['node']}: {use} GPUs held")
        if (
            not gone
            and not s["node"]
            and s["refused"]
            and any(g == s["gang"] for _, _, g in self.held.values())
        ):
            self.partial.append(s["gang"])

    def progress(self, elapsed: float, counters: Counters) -> str:
        rss = " ".join(f"{k} {v:.0f}MB" for k, v in counters.rss_now().items())
        running = len(self.running_at) - len(self.ended & self.running_at.keys())
        return (
            f"[{elapsed:6.0f}s] trainjobs {len(self.created_at)} created, "
            f"{len(self.jobset_at)} with a JobSet, {len(self.done_at)} Complete, "
            f"{len(self.failed)} Failed; pods {len(self.pod_seen_at)} seen, "
            f"{len(self.bound_at)} bound, {running} running; rss {rss}"
        )


_SAMPLE = re.compile(r"^trainer_api_requests_total\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Counters:
    """CPU seconds of each process between ``start`` and ``stop``; peak and current RSS."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.cpu0: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.peak: dict[str, float] = {}

    def start(self) -> None:
        self.pids["driver"] = os.getpid()
        self.cpu0 = {k: proc_cpu_seconds(pid) for k, pid in self.pids.items()}

    def stop(self) -> None:
        self.cpu = {k: proc_cpu_seconds(pid) - self.cpu0[k] for k, pid in self.pids.items()}
        self.peak = {k: proc_rss_mb(pid)["VmHWM_mb"] for k, pid in self.pids.items()}

    def rss_now(self) -> dict[str, float]:
        return {k: proc_rss_mb(pid)["VmRSS_mb"] for k, pid in self.pids.items()}

    @staticmethod
    async def scrape(url: str, headers: dict[str, str]) -> dict[str, int]:
        """The controller's ``trainer_api_requests_total`` as ``{"verb resource code": n}``
        (its metrics are served over HTTPS with a self-signed certificate, and authorized by
        the API server: ``headers`` carry the administrator's token)."""
        connector = aiohttp.TCPConnector(ssl=False)
        async with (
            aiohttp.ClientSession(connector=connector, headers=headers) as session,
            session.get(url + "/metrics") as resp,
        ):
            resp.raise_for_status()
            text = await resp.text()
        out: dict[str, int] = {}
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            if m:
                labels = dict(_LABEL.findall(m.group(1)))
                key = f"{labels.get('verb')} {labels.get('resource')} {labels.get('code')}"
                out[key] = int(float(m.group(2)))
        return out


def _latencies(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    return percentiles([end[k] - start[k] for k in end.keys() & start.keys()])


def _writes(requests: dict[str, int]) -> dict[str, int]:
    """Successful writes by "verb resource" (reads and failures left out)."""
    out: dict[str, int] = {}
    for key, n in requests.items():
        verb, resource, code = key.split(" ")
        if verb in ("create", "apply", "patch", "update", "delete", "bind") and code[:1] == "2":
            out[f"{verb} {resource}"] = out.get(f"{verb} {resource}", 0) + n
    return dict(sorted(out.items()))


def report(
    args: argparse.Namespace,
    *,
    seconds: float,
    tracker: Tracker,
    counters: Counters,
    writes: int,
    requests: dict[str, dict[str, int]],
) -> dict[str, Any]:
    jobs, pods = args.trainjobs, len(tracker.pod_seen_at)
    by_component = {name: _writes(reqs) for name, reqs in requests.items()}
    leases = sum(n for k, n in by_component["executor"].items() if " leases" in f" {k}")
    pod_writes = sum(
        n
        for comp in by_component.values()
        for k, n in comp.items()
        if k.split(" ")[1].startswith("pods")
    )
    cpu = {k: round(v, 1) for k, v in counters.cpu.items()}
    servers = sum(v for k, v in counters.cpu.items() if k != "driver")
    per_job = {k: round(v / jobs, 4) for k, v in counters.cpu.items()}
    per_job["all"] = round(servers / jobs, 4)
    complete = len(tracker.done_at)
    result: dict[str, Any] = {
        "benchmark": "simulate",
        "config": {
            k: getattr(args, k)
            for k in (
                "trainjobs",
                "nodes",
                "gpus",
                "pods",
                "gpus_per_pod",
                "min_duration",
                "max_duration",
                "waves",
                "fail_probability",
                "max_restarts",
                "seed",
            )
        },
        "seconds": round(seconds, 1),
        "trainjobs_complete": complete,
        "trainjobs_failed": len(tracker.failed),
        "pods": pods,
        "trainjobs_per_s": round(complete / seconds, 2),
        "pods_per_s": round(pods / seconds, 1),
        "jobset_restarts": sum(tracker.restarts.values()),
        "latency_ms": {
            "trainjob_create_to_jobset": _latencies(tracker.created_at, tracker.jobset_at),
            "pod_created_to_bound": _latencies(tracker.pod_seen_at, tracker.bound_at),
            "pod_bound_to_running": _latencies(tracker.bound_at, tracker.running_at),
            "trainjob_create_to_complete": _latencies(tracker.created_at, tracker.done_at),
        },
        "api_writes": {
            "total": writes,
            "node_lease_renewals": leases,
            "per_trainjob": round((writes - leases) / jobs, 1),
            "pod_writes_per_pod": round(pod_writes / max(pods, 1), 2),
            "by_component": by_component,
        },
        "cpu_s": cpu,
        "cpu_s_per_trainjob": per_job,
        "peak_rss_mb": counters.peak,
    }
    if args.check:
        result["check"] = {
            "peak_gpus_on_a_node": tracker.peak_gpus,
            "overallocated": tracker.overallocated[:10],
            "partial_gangs": sorted(set(tracker.partial))[:10],
        }
    problems = []
    if complete < jobs:
        problems.append(f"{jobs - complete} of {jobs} TrainJobs not Complete")
    if args.check and tracker.overallocated:
        problems.append(f"GPUs over-allocated: {tracker.overallocated[:3]}")
    if args.check and tracker.partial:
        problems.append(f"gangs bound in part: {sorted(set(tracker.partial))[:3]}")
    if args.check and args.fail_probability > 0 and not result["jobset_restarts"]:
        problems.append("failures were injected but no JobSet restarted")
    result["problems"] = problems
    lat = result["latency_ms"]
    result["summary"] = {
        "seconds": result["seconds"],
        "trainjobs_complete": complete,
        "pods": pods,
        "pods_per_s": result["pods_per_s"],
        "p99_create_to_jobset_ms": lat["trainjob_create_to_jobset"].get("p99_ms"),
        "p99_bound_to_running_ms": lat["pod_bound_to_running"].get("p99_ms"),
        "writes_per_trainjob": result["api_writes"]["per_trainjob"],
        "cpu_s_per_trainjob": per_job["all"],
        "peak_rss_mb": result["peak_rss_mb"],
        "problems": problems,
    }
    return result
