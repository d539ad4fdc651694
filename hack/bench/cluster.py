"""Upstream's Kubeflow Trainer v2.3.0 controller and ours at scale on the real-Kubernetes test
bed (docs/side-by-side.md, "The benchmark").

    python hack/bench/cluster.py --trainjobs 12500 --nodes 1000 [--controller upstream
        --controller ours] [--rounds 1] [--out hack/bench/reports/cluster-12500.json]

One bed (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK with ``--nodes``
nodes of ``--gpus-per-node`` ``nvidia.com/gpu``, JobSet v0.12.0) serves every run; the
controllers named by ``--controller`` (default: upstream, then ours) take turns, each installed
as an admin installs it (hack/testbed/upstream_install.py ``switch``), ``--rounds`` times.

A run creates ``--trainjobs`` TrainJobs of the torch-distributed runtime in a namespace of its
own, ``--pods-per-job`` nodes of one GPU each, every pod running a simulated 10-60 s on KWOK
(a seeded draw per TrainJob, the same for every run), in waves: a wave of ``--wave``
TrainJobs (by default as many as the GPUs run at once), the next once fewer than a wave are
unfinished. It ends when every TrainJob is Complete. Measured, per run:

* end-to-end time (first create to last Complete) and TrainJobs per second;
* p50/p99 of create (the API's answer) to JobSet created (the driver's watch seeing it), to
  Running (the JobSet first reporting a Job whose pods are all ready), to the TrainJob's status
  first showing an active Job (what kubectl and the SDK read), and to Complete;
* the controller's API requests per TrainJob by verb (kube-apiserver's audit log, which logs
  the controller's ServiceAccount alone: both controllers use the same one);
* the controller's CPU seconds per TrainJob and peak RSS (/proc of its process: each run
  starts a fresh one); kube-apiserver's CPU seconds over the run and its RSS at the end.

Then the namespace is deleted and the next run waits until it is gone. kube-controller-manager
and kube-scheduler run with ``--client-qps`` (default 400; their defaults 20 and 50 would make
the Job controller's pod creation the bound, as large clusters find). The JSON report holds
every figure; a table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "hack/testbed"), str(ROOT)]

import bed as beds  # noqa: E402
import netns  # noqa: E402
import upstream_install  # noqa: E402
from benchlib import percentiles, proc_cpu_seconds, proc_rss_mb, source_state  # noqa: E402
from install import install_parts  # noqa: E402

from trainer.kube.client import new_api_client  # noqa: E402
from trainer.kube.resources import JOBSETS, TRAINJOBS  # noqa: E402
from trainer.kube.rest import Kube  # noqa: E402
from trainer.machinery.gvr import GVR  # noqa: E402
from trainer.machinery.requests import APIError  # noqa: E402

NAMESPACES = GVR("", "v1", "namespaces", False, "Namespace")
CONTROLLER_USER = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
STAGE = "stage.kwok.x-k8s.io"
PROC_OF = {"ours": "trainer", "upstream": "upstream"}
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: ["{CONTROLLER_USER}"]
- level: None
"""


def say(line: str) -> None:
    print(f"cluster-bench: {line}", file=sys.stderr, flush=True)


def trainjob(name: str, pods: int, run_seconds: int) -> dict[str, Any]:
    """A torch-distributed TrainJob whose pods KWOK runs ``run_seconds`` (exactly: a stage
    draws its delay between delay and jitter-delay), one GPU each."""
    annotations = {
        f"pod-create.{STAGE}/jitter-delay": "0s",
        f"pod-ready.{STAGE}/delay": "0s",
        f"pod-ready.{STAGE}/jitter-delay": "0s",
        f"pod-complete.{STAGE}/delay": f"{run_seconds}s",
        f"pod-complete.{STAGE}/jitter-delay": f"{run_seconds}s",
    }
    pod = {"metadata": {"annotations": annotations}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": pods,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
            },
            "runtimePatches": [
                {
                    "manager": "bench.kubeflow.org/kwok",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {"name": "node", "template": {"spec": {"template": pod}}}
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


@dataclass
class Times:
    created: dict[str, float] = field(default_factory=dict)
    jobset: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    """When the JobSet first reported a Job with all its pods ready (training running)."""
    reported: dict[str, float] = field(default_factory=dict)
    """When the TrainJob's status first showed an active Job (what a user's tools read)."""
    done: dict[str, float] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)


def _active(job: dict[str, Any]) -> bool:
    return any(
        (s.get("active") or 0) > 0 for s in (job.get("status") or {}).get("jobsStatus") or []
    )


def _ready(jobset: dict[str, Any]) -> bool:
    status = jobset.get("status") or {}
    return any((s.get("ready") or 0) > 0 for s in status.get("replicatedJobsStatus") or [])


def _finished(job: dict[str, Any]) -> str:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return ""


async def _watch(kube: Kube, gvr: GVR, namespace: str, on_event: Any, stop: asyncio.Event) -> None:
    """Every event of ``gvr`` in ``namespace`` until ``stop``, re-watching from the last
    resourceVersion when the server ends a stream."""
    rv = "0"
    while not stop.is_set():
        try:
            async with contextlib.aclosing(
                kube.watch(gvr, namespace, resource_version=rv, timeout_seconds=120)
            ) as events:
                async for event in events:
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        on_event(obj, time.monotonic())
                    if stop.is_set():
                        return
        except APIError:
            if stop.is_set():
                return
            await asyncio.sleep(0.5)
            rv = "0"


async def run_once(
    kube: Kube, args: argparse.Namespace, namespace: str, say_: Any = say
) -> tuple[Times, float, float]:
    """Create the TrainJobs in waves until every one finished; their times, and the first
    create's and last finish's clock."""
    times = Times()
    await kube.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        gvr=NAMESPACES,
    )
    draw = random.Random(args.seed)
    low, high = args.run_seconds
    jobs = [
        trainjob(f"tj-{i:05d}", args.pods_per_job, draw.randint(low, high))
        for i in range(args.trainjobs)
    ]
    stop = asyncio.Event()

    def on_jobset(obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        times.jobset.setdefault(name, now)
        if _ready(obj):
            times.running.setdefault(name, now)

    def on_trainjob(obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if _active(obj):
            times.reported.setdefault(name, now)
        end = _finished(obj)
        if end and name not in times.done:
            times.done[name] = now
            if end == "Failed":
                times.failed.add(name)

    watchers = [
        asyncio.create_task(_watch(kube, JOBSETS, namespace, on_jobset, stop)),
        asyncio.create_task(_watch(kube, TRAINJOBS, namespace, on_trainjob, stop)),
    ]
    gate = asyncio.Semaphore(args.concurrency)

    async def create(job: dict[str, Any]) -> None:
        job["metadata"]["namespace"] = namespace
        async with gate:
            for attempt in range(5):
                try:
                    await kube.create(job)
                    break
                except APIError as err:
                    if attempt == 4 or err.status not in (0, 429, 500, 503, 504):
                        raise
                    await asyncio.sleep(1 + attempt)
            times.created[job["metadata"]["name"]] = time.monotonic()

    started = time.monotonic()
    deadline = started + args.timeout
    last_report = started
    for first in range(0, len(jobs), args.wave):
        while len(times.created) - len(times.done) >= args.wave:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        await asyncio.gather(*(create(j) for j in jobs[first : first + args.wave]))
        say_(f"{namespace}: created {len(times.created)}, finished {len(times.done)}")
    while len(times.done) < len(jobs) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if time.monotonic() - last_report > 30:
            last_report = time.monotonic()
            say_(
                f"{namespace}: JobSets {len(times.jobset)}, running {len(times.running)} "
                f"(status says {len(times.reported)}), finished {len(times.done)} of {len(jobs)}"
            )
    stop.set()
    for w in watchers:
        w.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    end = max(times.done.values(), default=time.monotonic())
    return times, started, end


def audit_counts(path: Path, offset: int) -> tuple[Counter[str], Counter[str], int]:
    """The controller's requests in the audit log from byte ``offset``: by verb and by
    ``verb resource[/subresource]``; and the new offset."""
    verbs: Counter[str] = Counter()
    detail: Counter[str] = Counter()
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    for line in data.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (event.get("user") or {}).get("username") != CONTROLLER_USER:
            continue
        verb = str(event.get("verb"))
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource", "?"))
        if ref.get("subresource"):
            resource += "/" + str(ref["subresource"])
        verbs[verb] += 1
        detail[f"{verb} {resource}"] += 1
    return verbs, detail, offset + len(data)


def pid_of(bed: beds.Bed, name: str) -> int:
    return int(bed.procs[name].popen.pid)


async def delete_namespace(kube: Kube, namespace: str, timeout: float) -> float:
    started = time.monotonic()
    await kube.delete(NAMESPACES, None, namespace)
    while time.monotonic() - started < timeout:
        if await kube.get(NAMESPACES, None, namespace) is None:
            break
        await asyncio.sleep(2)
    return time.monotonic() - started


def summarise(times: Times, started: float, end: float, n: int) -> dict[str, Any]:
    def lat(stamps: dict[str, float]) -> dict[str, float]:
        samples = [stamps[k] - times.created[k] for k in stamps if k in times.created]
        return {**percentiles(samples), "count": len(samples)}

    wall = end - started
    return {
        "trainjobs": n,
        "finished": len(times.done),
        "failed": len(times.failed),
        "end_to_end_s": round(wall, 1),
        "trainjobs_per_s": round(len(times.done) / wall, 3) if wall > 0 else 0,
        "create_to_jobset": lat(times.jobset),
        "create_to_running": lat(times.running),
        "create_to_status_running": lat(times.reported),
        "create_to_finished": lat(times.done),
    }


async def measure(
    bed: beds.Bed, kube: Kube, args: argparse.Namespace, controller: str, label: str
) -> dict[str, Any]:
    namespace = f"bench-{label}"
    ctl, api = pid_of(bed, PROC_OF[controller]), pid_of(bed, "kube-apiserver")
    audit = bed.root / "audit.log"
    _, _, offset = audit_counts(audit, 0) if audit.exists() else (None, None, 0)
    ctl_cpu0, api_cpu0 = proc_cpu_seconds(ctl), proc_cpu_seconds(api)
    times, started, end = await run_once(kube, args, namespace)
    await asyncio.sleep(5)  # the controller's last status writes
    ctl_cpu, api_cpu = proc_cpu_seconds(ctl) - ctl_cpu0, proc_cpu_seconds(api) - api_cpu0
    verbs, detail, _ = audit_counts(audit, offset)
    n = max(1, len(times.created))
    result = summarise(times, started, end, args.trainjobs)
    result.update(
        controller=controller,
        namespace=namespace,
        requests_per_trainjob={v: round(c / n, 2) for v, c in sorted(verbs.items())},
        requests_per_trainjob_total=round(sum(verbs.values()) / n, 2),
        requests_by_resource=dict(sorted(detail.items())),
        controller_cpu_s=round(ctl_cpu, 1),
        controller_cpu_s_per_trainjob=round(ctl_cpu / n, 4),
        controller_rss=proc_rss_mb(ctl),
        apiserver_cpu_s=round(api_cpu, 1),
        apiserver_rss=proc_rss_mb(api),
    )
    say(f"{label}: deleting its namespace")
    result["namespace_deletion_s"] = round(await delete_namespace(kube, namespace, 1800), 1)
    return result


async def drive(bed: beds.Bed, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    current = "ours"
    client = await new_api_client(str(bed.kubeconfig))
    try:
        kube = Kube(client, timeout=120)
        for r in range(args.rounds):
            for controller in args.controller:
                if controller != current:
                    upstream_install.switch(bed, controller, say)
                    current = controller
                label = f"{controller}-{r}"
                say(f"run {label}: {args.trainjobs} TrainJobs x {args.pods_per_job} pods")
                results.append(await measure(bed, kube, args, controller, label))
                say(f"run {label}: {json.dumps(results[-1], default=str)[:600]}")
    finally:
        await client.close()
    return results


def table(results: list[dict[str, Any]]) -> str:
    rows: list[tuple[str, Callable[[dict[str, Any]], object]]] = [
        ("run", lambda r: r["namespace"].removeprefix("bench-")),
        ("finished", lambda r: f"{r['finished']}/{r['trainjobs']}"),
        ("end-to-end s", lambda r: r["end_to_end_s"]),
        ("TrainJobs/s", lambda r: r["trainjobs_per_s"]),
        ("create->JobSet p50 ms", lambda r: r["create_to_jobset"].get("p50_ms")),
        ("create->JobSet p99 ms", lambda r: r["create_to_jobset"].get("p99_ms")),
        ("create->Running p50 ms", lambda r: r["create_to_running"].get("p50_ms")),
        ("create->Running p99 ms", lambda r: r["create_to_running"].get("p99_ms")),
        (
            "create->status shows it running p50 ms",
            lambda r: r.get("create_to_status_running", {}).get("p50_ms"),
        ),
        (
            "  (TrainJobs whose status ever showed it)",
            lambda r: r.get("create_to_status_running", {}).get("count"),
        ),
        ("API requests/TrainJob", lambda r: r["requests_per_trainjob_total"]),
        (
            "  by verb",
            lambda r: " ".join(f"{k}={v}" for k, v in r["requests_per_trainjob"].items()),
        ),
        ("controller CPU s/TrainJob", lambda r: r["controller_cpu_s_per_trainjob"]),
        ("controller peak RSS MB", lambda r: r["controller_rss"].get("VmHWM_mb")),
        ("kube-apiserver CPU s", lambda r: r["apiserver_cpu_s"]),
        ("kube-apiserver RSS MB", lambda r: r["apiserver_rss"].get("VmRSS_mb")),
    ]
    header = (
        "| figure | " + " | ".join(r["namespace"].removeprefix("bench-") for r in results) + " |"
    )
    out = [header, "|---" * (len(results) + 1) + "|"]
    for name, get in rows[1:]:
        out.append(f"| {name} | " + " | ".join(str(get(r)) for r in results) + " |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--controller",
        action="append",
        choices=("ours", "upstream"),
        help="a controller to run (repeat; default: upstream, then ours)",
    )
    parser.add_argument("--trainjobs", type=int, default=1250, help="TrainJobs per run (1250)")
    parser.add_argument("--nodes", type=int, default=1000, help="KWOK nodes (1000)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node (8)")
    parser.add_argument("--pods-per-job", type=int, default=8, help="numNodes of each TrainJob (8)")
    parser.add_argument(
        "--run-seconds",
        type=int,
        nargs=2,
        default=(10, 60),
        metavar=("MIN", "MAX"),
        help="each TrainJob's pods run this long on KWOK (10 60)",
    )
    parser.add_argument(
        "--wave",
        type=int,
        default=0,
        help="TrainJobs per wave (default: as many as the GPUs run at once)",
    )
    parser.add_argument("--concurrency", type=int, default=32, help="creates in flight (32)")
    parser.add_argument("--rounds", type=int, default=1, help="times each controller runs (1)")
    parser.add_argument(
        "--client-qps",
        type=int,
        default=400,
        help="kube-controller-manager's and kube-scheduler's client QPS (400)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the run times' seed (0)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run (3600)")
    parser.add_argument(
        "--out", type=Path, help="JSON report (default hack/bench/reports/cluster-N.json)"
    )
    args = parser.parse_args()  # fmt: skip
    args.controller = args.controller or ["upstream", "ours"]
    args.wave = args.wave or max(1, args.nodes * args.gpus_per_node // args.pods_per_job)
    args.out = args.out or HERE / "reports" / f"cluster-{args.trainjobs}.json"
    if not netns.inside():
        return subprocess.call(netns.wrap([sys.executable, *sys.argv]))
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="trainer-bench-"))
    policy = root / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    audit_args = [
        f"--audit-policy-file={policy}", f"--audit-log-path={root / 'bed/audit.log'}",
        "--audit-log-format=json", "--audit-log-maxsize=0", "--audit-log-mode=blocking",
    ]  # fmt: skip
    (root / "bed").mkdir()
    bed = beds.start_bed(
        args.nodes, args.gpus_per_node, root=root / "bed", say=say,
        apiserver_args=audit_args, client_qps=args.client_qps,
    )  # fmt: skip
    try:
        install_parts(bed, ("jobset", "trainer"), say)
        results = asyncio.run(drive(bed, args))
    finally:
        bed.stop(keep=False)
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "benchmark": "cluster",
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "source": source_state(),
        "runs": results,
        "seconds": round(time.monotonic() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(table(results))
    say(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
