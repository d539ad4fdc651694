"""Benchmark the whole local plane at cluster scale on simulated nodes (docs/simulation.md):
TrainJobs through admission, the controller, the JobSet and Job controllers, the scheduler and
the simulated kubelet, until every TrainJob is Complete.

Four processes: the API server (``trainer apiserver``), the controller with its admission
webhook, and the executor (hack/bench/simulate_roles.py: each what ``trainer up`` runs, alone
in a process), and this driver. The executor is given ``--nodes`` simulated nodes of
``--gpus`` ``nvidia.com/gpu`` in 4 zones (``withHostNode: false``: no process runs). The driver
publishes a ClusterTrainingRuntime ``sim-gpu`` (the built-in ``torch-distributed`` one; with
``--fail-probability`` its Jobs fail on a pod's failure and the JobSet restarts up to
``--max-restarts`` times), then creates ``--trainjobs`` TrainJobs of ``--pods`` nodes, each
asking ``--gpus-per-pod`` GPUs, in ``--waves`` waves ``--wave-gap`` seconds apart (``auto``:
a wave's work divided by the cluster's GPUs, so that work arrives as fast as it can run). Each
TrainJob's run lasts a duration drawn uniformly from ``--min-duration`` to ``--max-duration``
seconds, set by its own annotation ``trainer.kubeflow.org/sim-duration``.

The driver watches TrainJobs, JobSets and pods (slim copies) and reports:

- ``seconds`` from the first create until every TrainJob is Complete, TrainJobs and pods per
  second, ``trainjobs_complete``, ``pods``;
- latency p50/p99 from a TrainJob's create to its JobSet, from a pod bound to Running, from a
  pod created to bound;
- API writes: in all (the API server's resourceVersion moved by that much), by component, verb
  and resource, per TrainJob and per pod (node Lease renewals apart);
- CPU seconds of each process, in all and per TrainJob; ``peak_rss_mb`` (VmHWM) of each;
- with ``--check`` (the small run in ``make test``): no node ever held more GPUs than it has,
  no gang ever bound in part (a pod told Unschedulable while a pod of the same JobSet attempt
  is bound), every TrainJob Complete, and with failures injected some JobSet restarted; a
  violation exits 1.

``--small`` is 200 TrainJobs on 50 nodes, runs of 1 to 3 s, 5 % of runs failing, ``--check``.
``--baseline REPORT`` adds ``cost_ratio``: CPU seconds per TrainJob against that report's.
Progress goes to stderr every 10 s. Writes hack/bench/reports/simulate.json.

    python hack/bench/simulate.py [--trainjobs 12500] [--nodes 1000] [--gpus 8] [--pods 8]
        [--gpus-per-pod 1] [--min-duration 10] [--max-duration 60] [--waves 10]
        [--wave-gap auto] [--fail-probability 0] [--max-restarts 5] [--seed 1]
        [--timeout 3600] [--small] [--check] [--baseline REPORT] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from benchlib import ROOT, ApiServerProcess, child_env, source_state, stop_process, wait_file
from simulate_report import Counters, Tracker, report

from trainer.api import constants as c
from trainer.cli.localplane import free_port
from trainer.cli.seed import SYSTEM_NAMESPACE, webhook_configurations
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube
from trainer.machinery.gvr import GVR
from trainer.runtime.builtin import builtin_runtime_documents

RUNTIME = "sim-gpu"
NAMESPACE = "sim"
GPU = "nvidia.com/gpu"
ROLES = Path(__file__).resolve().with_name("simulate_roles.py")


def simulation(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "withHostNode": False,
        "nodes": [
            {
                "count": args.nodes,
                "namePrefix": "sim-gpu",
                "zones": ["a", "b", "c", "d"],
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                "gpus": {"count": args.gpus, "product": "NVIDIA H100 80GB HBM3"},
            }
        ],
        "stages": {
            "duration": "30s",
            "jitter": 0.1,
            "failureProbability": args.fail_probability,
            "exitCode": 1,
        },
    }


def runtime(args: argparse.Namespace) -> dict[str, Any]:
    """``torch-distributed`` as ``sim-gpu``; with failures injected, a failed pod fails its Job
    (``backoffLimit: 0``) and the JobSet restarts."""
    base: dict[str, Any] = json.loads(
        json.dumps(
            next(
                d
                for d in builtin_runtime_documents()
                if d["metadata"]["name"] == "torch-distributed"  # type: ignore[index]
            )
        )
    )
    spec = base["spec"]
    if args.fail_probability > 0:
        spec["template"]["spec"]["failurePolicy"] = {"maxRestarts": args.max_restarts}
        for job in spec["template"]["spec"]["replicatedJobs"]:
            job["template"]["spec"]["backoffLimit"] = 0
            job["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_CLUSTER_TRAINING_RUNTIME,
        "metadata": {"name": RUNTIME, "labels": dict(base["metadata"].get("labels") or {})},
        "spec": spec,
    }


def trainjob(name: str, args: argparse.Namespace, rnd: random.Random) -> dict[str, Any]:
    seconds = rnd.uniform(args.min_duration, args.max_duration)
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_TRAINJOB,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {"trainer.kubeflow.org/sim-duration": f"{seconds:.1f}s"},
        },
        "spec": {
            "runtimeRef": {"name": RUNTIME},
            "trainer": {
                "numNodes": args.pods,
                "resourcesPerNode": {"limits": {GPU: args.gpus_per_pod}},
            },
        },
    }


def wave_gap(args: argparse.Namespace) -> float:
    if args.wave_gap != "auto":
        return float(args.wave_gap)
    per_wave = -(-args.trainjobs // args.waves)
    mean = (args.min_duration + args.max_duration) / 2
    return float(per_wave * args.pods * args.gpus_per_pod * mean / (args.nodes * args.gpus))


class Child:
    """A role of simulate_roles.py in a subprocess, ready once it wrote its info file."""

    def __init__(self, workdir: Path, mode: str, argv: list[str]) -> None:
        self.info = workdir / f"{mode.strip('_')}.json"
        self.log = workdir / f"{mode.strip('_')}.log"
        with self.log.open("wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROLES), mode, "--info", str(self.info), *argv],
                cwd=ROOT,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=child_env(),
            )
        try:
            wait_file(self.info, 120)
        except RuntimeError:
            self.proc.kill()
            raise RuntimeError(
                f"{mode} did not start:\n{self.log.read_text(errors='replace')[-2000:]}"
            ) from None

    def read(self) -> dict[str, Any]:
        return dict(json.loads(self.info.read_text()))


async def wait_for(what: str, done: Any, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not await done():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def create_all(kube: Kube, args: argparse.Namespace, tracker: Tracker, start: float) -> None:
    """The TrainJobs in waves, 32 creates in flight; each create's send time is recorded."""
    rnd = random.Random(args.seed)
    bodies = [trainjob(f"tj-{i:05d}", args, rnd) for i in range(args.trainjobs)]
    per_wave = -(-args.trainjobs // args.waves)
    gap = wave_gap(args)
    limit = asyncio.Semaphore(32)

    async def one(body: dict[str, Any]) -> None:
        async with limit:
            tracker.created_at[body["metadata"]["name"]] = time.monotonic()
            await kube.create(body, gvr=r.TRAINJOBS)

    for wave in range(args.waves):
        delay = start + wave * gap - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await asyncio.gather(*(one(b) for b in bodies[wave * per_wave : (wave + 1) * per_wave]))


async def current_rv(kube: Kube) -> int:
    _, rv = await kube.list(r.NODES, limit=1)
    return int(rv)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    server = ApiServerProcess.start(workdir, None)
    children: list[Child] = []
    api = await new_api_client(str(server.kubeconfig))
    try:
        kube = Kube(api)
        webhook_port = free_port()
        for hook in webhook_configurations(webhook_port):
            kind = hook["kind"]
            gvr = GVR("admissionregistration.k8s.io", "v1", kind.lower() + "s", False, kind)
            await kube.create(hook, gvr=gvr)
        # The controller's Lease and webhook certificate live in the system namespace.
        for ns in (NAMESPACE, SYSTEM_NAMESPACE):
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            await kube.create(namespace, gvr=GVR("", "v1", "namespaces", False, "Namespace"))
        kubeconfig = ["--kubeconfig", str(server.kubeconfig)]
        webhook = ["--webhook-port", str(webhook_port), "--cert-dir", str(workdir / "certs")]
        controller = Child(workdir, "_controller", [*kubeconfig, *webhook])
        children.append(controller)
        sim_file = workdir / "simulation.yaml"
        sim_file.write_text(yaml.safe_dump(simulation(args)))
        executor = Child(
            workdir,
            "_executor",
            [*kubeconfig, "--simulate", str(sim_file), "--workdir", str(workdir)],
        )
        children.append(executor)
        await kube.create(runtime(args))  # through the webhook: it is serving once this passes

        async def nodes_ready() -> bool:
            nodes, _ = await kube.list(r.NODES)
            return len(nodes) >= int(args.nodes)

        await wait_for("the simulated nodes", nodes_ready, 120)
        tracker = Tracker(check=args.check, gpus_per_node=args.gpus)
        informers = tracker.informers(kube)
        for informer in informers:
            await informer.start()
        for informer in informers:
            await informer.wait_synced()
        processes = {"apiserver": server.proc.pid, "controller": controller.proc.pid}
        processes["executor"] = executor.proc.pid
        counters = Counters(processes)
        rv0 = await current_rv(kube)
        start = time.monotonic()
        counters.start()
        creating = asyncio.create_task(create_all(kube, args, tracker, start))
        end = start + args.timeout
        next_progress = start + 10
        while not (creating.done() and tracker.finished(args.trainjobs)):
            if time.monotonic() > end:
                break
            if creating.done() and creating.exception() is not None:
                raise creating.exception()  # type: ignore[misc]
            await tracker.changed(1.0)
            if time.monotonic() >= next_progress:
                next_progress += 10
                print(tracker.progress(time.monotonic() - start, counters), file=sys.stderr)
        seconds = time.monotonic() - start
        counters.stop()
        rv1 = await current_rv(kube)
        controller_requests = await Counters.scrape(
            controller.read()["metrics_url"], server.access.headers
        )
        for informer in informers:
            await informer.stop()
        stop_process(executor.proc)
        executor_requests = executor.read().get("requests") or {}
        return report(
            args,
            seconds=seconds,
            tracker=tracker,
            counters=counters,
            writes=rv1 - rv0,
            requests={"controller": controller_requests, "executor": executor_requests},
        )
    finally:
        for child in reversed(children):
            stop_process(child.proc)
        server.stop()
        await api.close()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainjobs", type=int, default=12500)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node")
    p.add_argument("--pods", type=int, default=8, help="pods (nodes) per TrainJob")
    p.add_argument("--gpus-per-pod", type=int, default=1)
    p.add_argument("--min-duration", type=float, default=10.0)
    p.add_argument("--max-duration", type=float, default=60.0)
    p.add_argument("--waves", type=int, default=10)
    p.add_argument("--wave-gap", default="auto", help="seconds between waves, or auto")
    p.add_argument("--fail-probability", type=float, default=0.0)
    p.add_argument("--max-restarts", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--small", action="store_true", help="the make-test run (module docstring)")
    p.add_argument("--check", action="store_true", help="assert correctness; exit 1 if not")
    p.add_argument("--baseline", type=Path, help="a report to compare CPU per TrainJob with")
    p.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/simulate.json")
    args = p.parse_args(argv)
    if args.small:
        args.trainjobs, args.nodes, args.min_duration, args.max_duration = 200, 50, 1.0, 3.0
        args.fail_probability, args.check, args.waves = 0.05, True, 4
        args.max_restarts = 20  # a TrainJob fails only past this many restarts: never, here
        args.timeout = min(args.timeout, 300.0)
    if args.wave_gap != "auto":
        try:
            float(args.wave_gap)
        except ValueError:
            p.error(f"--wave-gap: {args.wave_gap!r} is not a number of seconds or auto")
    for name in ("trainjobs", "nodes", "gpus", "pods", "gpus_per_pod", "waves"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be at least 1")
    if not 0 <= args.fail_probability < 1:
        p.error("--fail-probability: must be from 0 to below 1")
    if not 0 < args.min_duration <= args.max_duration:
        p.error("--min-duration/--max-duration: need 0 < min <= max")
    if args.gpus_per_pod > args.gpus:
        p.error("--gpus-per-pod: more than a node has (--gpus)")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    result["source"] = source_state()
    result["python"] = sys.version.split()[0]
    result["machine"] = platform.machine()
    if args.baseline is not None:
        base = json.loads(args.baseline.read_text())
        mine = result["cpu_s_per_trainjob"]["all"]
        theirs = base["cpu_s_per_trainjob"]["all"]
        result["cost_ratio"] = {"baseline": str(args.baseline), "ratio": round(mine / theirs, 3)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    problems = result.get("problems") or []
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
