"""Benchmark the local control plane (``trainer up``) under a burst of TrainJobs: how long until
every TrainJob has its JobSet, and how responsive ``kubectl get`` stays meanwhile.

One ``trainer up`` process, started as a user starts it (``python -m trainer.cli.main up
--kubeconfig PATH`` in a temporary working directory, ready once it prints "local control
plane ready"): the API server, the admission webhook, the controller and the executor share
its event loop. This driver talks to it only through the kubeconfig it writes (the project's
client factory, :func:`trainer.kube.client.new_api_client`, so TLS and credentials are
whatever the kubeconfig says) and through the real ``kubectl`` with that kubeconfig.

Per round, on a fresh plane:

1. a namespace, and a JobSet watch in it opened from the namespace's (empty) list;
2. ``--jobs`` (300) suspended TrainJobs (examples/multi-node.yaml with numNodes 2 and
   ``suspend: true``, the built-in ``torch-distributed`` runtime) created at once,
   ``--concurrency`` (32) requests in flight, bodies built before the clock starts;
3. the wall time from the first create until the watch has seen a JobSet for every TrainJob
   (the JobSet's controller ownerReference names it): ``jobsets_s``, and the time by which
   10/50/90 % of them were there;
4. meanwhile ``kubectl get trainjobs -n <ns> -o name`` runs ``--kubectl-gap`` (0.5 s) apart,
   ``--kubectl-runs`` (8) at most, each timed from spawn to exit: p50/max, next to the same
   command on the idle plane before the burst (kubectl's own start-up is most of that; its
   discovery cache is filled by one untimed run first);
5. the ``trainer up`` process's CPU seconds over the burst (``/proc/<pid>/stat``) against the
   wall time: below 1.0 CPU-second per second, the one event loop was not saturated and the
   plane waited on something other than work (or, on a busy machine, for a CPU);
6. with ``--profile``, py-spy (``pip install py-spy``) samples the plane during the burst: the
   report gives the share of samples by part (API server, webhook, controller and its client,
   executor, threads, the event loop's own I/O) and the functions with most samples.

``--rounds`` (3) rounds; the targets use the medians: ``jobsets_s`` <= 5 s for 300 TrainJobs,
and kubectl p50 during the burst within 1 s. Every wait is bounded (``--timeout`` per burst,
60 s per start). Other processes on the machine slow the wall-clock figures: each round gives
the CPU the rest of the machine used during it. ``trainer up`` runs with ``--no-dashboard``
unless ``--dashboard`` is given. Writes hack/bench/reports/localplane.json.

    python hack/bench/localplane.py [--jobs 300] [--concurrency 32] [--rounds 3]
        [--kubectl-runs 8] [--kubectl-gap 0.5] [--timeout 120] [--profile] [--dashboard]
        [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from benchlib import (
    child_env,
    machine_busy_seconds,
    percentiles,
    proc_cpu_seconds,
    source_state,
)

from trainer.api import constants as c
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError, Kube

ROOT = Path(__file__).resolve().parents[2]
TRAINJOB_EXAMPLE = ROOT / "examples" / "multi-node.yaml"
RUNTIME = "torch-distributed"
NUM_NODES = 2
NAMESPACE = "bench"
READY = "local control plane ready"
START_TIMEOUT_S = 60.0
KUBECTL_TIMEOUT_S = 30.0

TARGET_JOBSETS_S = 5.0  # for 300 TrainJobs (docs/local-plane.md, "Throughput")
TARGET_KUBECTL_P50_S = 1.0


# ---------------------------------------------------------------------------------------------
# The plane


@dataclass
class Plane:
    """``trainer up`` in a subprocess (its own process group, so a stop reaches only it)."""

    proc: asyncio.subprocess.Process
    kubeconfig: Path
    output: list[str] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, workdir: Path, dashboard: bool = False) -> Plane:
        kubeconfig = workdir / "kubeconfig"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "trainer.cli.main",
            "up",
            "--kubeconfig",
            str(kubeconfig),
            # The plane alone by default, comparable with earlier runs; --dashboard measures
            # it with the dashboard watching (as `trainer up` runs by default).
            "--dashboard" if dashboard else "--no-dashboard",
            cwd=workdir,
            env=child_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        plane = cls(proc, kubeconfig)
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while True:
                    line = (await proc.stdout.readline()).decode(errors="replace")
                    if not line:
                        raise RuntimeError(
                            f"trainer up exited {await proc.wait()} before ready:\n"
                            + "".join(plane.output[-20:])
                        )
                    plane.output.append(line)
                    if READY in line:
                        break
        except BaseException:
            await plane.stop()
            raise
        plane._drain = asyncio.create_task(plane._read_rest())
        return plane

    async def _read_rest(self) -> None:
        """Keep reading its output (a full pipe would block it); the last lines are kept."""
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.output.append(line.decode(errors="replace"))
            del self.output[:-200]

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s (only this process, which this driver started)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain


@contextlib.asynccontextmanager
async def plane_client(plane: Plane) -> AsyncIterator[Kube]:
    api = await new_api_client(str(plane.kubeconfig), qps_user_agent="bench-localplane")
    try:
        yield Kube(api, timeout=60.0)
    finally:
        await api.close()


# ---------------------------------------------------------------------------------------------
# Objects


def trainjob_template() -> dict[str, Any]:
    """examples/multi-node.yaml with numNodes 2 and suspend: true; name and namespace unset."""
    obj: dict[str, Any] = yaml.safe_load(TRAINJOB_EXAMPLE.read_text())
    assert obj["spec"]["runtimeRef"]["name"] == RUNTIME
    obj["spec"]["trainer"]["numNodes"] = NUM_NODES
    obj["spec"]["suspend"] = True
    obj["metadata"] = {}
    return obj


def trainjob_bodies(namespace: str, count: int) -> list[dict[str, Any]]:
    template = json.dumps(trainjob_template())
    out = []
    for i in range(count):
        obj: dict[str, Any] = json.loads(template)
        obj["metadata"] = {"name": f"job-{i:05d}", "namespace": namespace}
        out.append(obj)
    return out


def owner_trainjob(obj: dict[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == c.KIND_TRAINJOB:
            return str(ref.get("name"))
    return None


# ---------------------------------------------------------------------------------------------
# Measurements


async def kubectl_get(kubeconfig: Path, namespace: str) -> tuple[float, int]:
    """``kubectl get trainjobs -n <namespace> -o name``: (seconds from spawn to exit, lines).
    Its discovery cache lives next to the kubeconfig (one per plane)."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(kubeconfig.parent / "kubectl-cache"),
        "get",
        "trainjobs",
        "-n",
        namespace,
        "-o",
        "name",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), KUBECTL_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"kubectl get did not answer within {KUBECTL_TIMEOUT_S:g} s") from None
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl get exited {proc.returncode}: {err.decode().strip()}")
    return took, len(out.splitlines())


async def watch_jobsets(
    kube: Kube, namespace: str, resource_version: str, want: int, seen: dict[str, float]
) -> None:
    """Record when a JobSet owned by each TrainJob first shows up, until ``want`` have."""
    while len(seen) < want:
        async with contextlib.aclosing(
            kube.watch(r.JOBSETS, namespace, resource_version, timeout_seconds=300)
        ) as events:
            async for event in events:
                obj = event.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    resource_version = str(rv)
                if event.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                owner = owner_trainjob(obj)
                if owner is not None and owner not in seen:
                    seen[owner] = time.monotonic()
                    if len(seen) >= want:
                        return


async def create_all(
    kube: Kube, bodies: list[dict[str, Any]], concurrency: int
) -> tuple[float, dict[str, int]]:
    """POST every TrainJob, ``concurrency`` in flight: (time the last create returned, errors
    by HTTP code)."""
    errors: dict[str, int] = {}
    pending = iter(bodies)

    async def worker() -> None:
        for body in pending:
            try:
                await kube.create(body, gvr=r.TRAINJOBS)
            except APIError as err:
                errors[str(err.status)] = errors.get(str(err.status), 0) + 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.monotonic(), errors


async def kubectl_loop(
    kubeconfig: Path, namespace: str, runs: int, gap: float, stop: asyncio.Event
) -> list[float]:
    """``kubectl get``, ``gap`` seconds apart, until ``stop`` is set or ``runs`` have been
    timed (so the runs spread over the burst rather than bunch up at its start)."""
    took: list[float] = []
    while len(took) < runs and not stop.is_set():
        seconds, _ = await kubectl_get(kubeconfig, namespace)
        took.append(seconds)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), gap)
    return took


async def one_round(args: argparse.Namespace, index: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-localplane-") as tmp:
        plane = await Plane.start(Path(tmp), args.dashboard)
        try:
            async with plane_client(plane) as kube:
                namespace = {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": NAMESPACE},
                }
                await kube.request(
                    "create", "namespaces", "POST", "/api/v1/namespaces", body=namespace
                )
                await kubectl_get(plane.kubeconfig, NAMESPACE)  # fills kubectl's discovery cache
                idle = [(await kubectl_get(plane.kubeconfig, NAMESPACE))[0] for _ in range(3)]
                bodies = trainjob_bodies(NAMESPACE, args.jobs)
                _, rv = await kube.list(r.JOBSETS, NAMESPACE)
                seen: dict[str, float] = {}
                watcher = asyncio.create_task(watch_jobsets(kube, NAMESPACE, rv, args.jobs, seen))
                await asyncio.sleep(0.2)  # the watch is open before the first create
                profiler = await Profiler.start(plane.pid, Path(tmp)) if args.profile else None
                cpu0, busy0 = proc_cpu_seconds(plane.pid), machine_busy_seconds()
                own0 = sum(os.times()[:4])
                started = time.monotonic()
                stop_kubectl = asyncio.Event()
                kubectl = asyncio.create_task(
                    kubectl_loop(
                        plane.kubeconfig,
                        NAMESPACE,
                        args.kubectl_runs,
                        args.kubectl_gap,
                        stop_kubectl,
                    )
                )
                creates = asyncio.create_task(create_all(kube, bodies, args.concurrency))
                try:
                    await asyncio.wait_for(asyncio.shield(watcher), args.timeout)
                    finished = time.monotonic()
                except TimeoutError:
                    finished = None
                    watcher.cancel()
                stop_kubectl.set()
                created_at, errors = await creates
                cpu = proc_cpu_seconds(plane.pid) - cpu0
                profile = await profiler.stop() if profiler is not None else None
                wall = (finished or time.monotonic()) - started
                other = machine_busy_seconds() - busy0 - cpu - (sum(os.times()[:4]) - own0)
                during = await kubectl
        finally:
            await plane.stop()
    arrivals = sorted(t - started for t in seen.values())

    def at(q: float) -> float | None:
        if len(arrivals) < args.jobs:
            return None
        return round(arrivals[min(len(arrivals) - 1, int(q * len(arrivals)))], 3)

    return {
        "round": index,
        "jobs": args.jobs,
        "jobsets_seen": len(seen),
        "jobsets_s": round(finished - started, 3) if finished is not None else None,
        "jobsets_per_s": round(args.jobs / (finished - started), 1) if finished else None,
        "jobset_arrival_s": {"p10": at(0.1), "p50": at(0.5), "p90": at(0.9)},
        "creates_s": round(created_at - started, 3),
        "create_errors": errors,
        "plane_cpu_s": round(cpu, 2),
        "plane_cpu_per_wall_s": round(cpu / wall, 3) if wall > 0 else None,
        "other_processes_cpu_s": round(max(0.0, other), 2),
        "kubectl_idle": percentiles(idle),
        "kubectl_during_burst": {"runs": len(during), **percentiles(during)},
        **({"profile": profile} if profile is not None else {}),
    }


# ---------------------------------------------------------------------------------------------
# --profile: py-spy on the plane during the burst

COMPONENTS = (
    # (component, substrings of a frame): the outermost frame of a sample that matches one
    # names the part of the plane the sample belongs to.
    ("apiserver", ("trainer/local/apiserver/",)),
    ("webhook", ("webhooks/", "/uvicorn/", "/starlette/", "/fastapi/")),
    ("controller", ("trainer/controller/", "trainer/kube/")),
    ("executor", ("trainer/local/executor/",)),
    ("threads", ("concurrent/futures/thread.py",)),
)


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class Profiler:
    """``py-spy record`` of the ``trainer up`` process (100 Hz, active samples only), stopped
    with SIGINT when the burst is over; :meth:`stop` returns the share of samples by part of
    the plane and the functions with the most samples of their own."""

    proc: asyncio.subprocess.Process
    out: Path

    @classmethod
    async def start(cls, pid: int, workdir: Path) -> Profiler:
        exe = py_spy()
        if exe is None:
            raise RuntimeError("--profile needs py-spy (pip install py-spy)")
        out = workdir / "profile.txt"
        cmd = [exe, "record", "-p", str(pid), "-r", "100", "-f", "raw", "-o", str(out)]
        proc = await asyncio.create_subprocess_exec(
            *cmd, "--nonblocking", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        await asyncio.sleep(0.5)  # attached
        if proc.returncode is not None:
            raise RuntimeError(f"py-spy exited {proc.returncode} (ptrace not permitted?)")
        return cls(proc, out)

    async def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(self.proc.wait(), 30)
        by_part: dict[str, int] = {}
        own: dict[str, int] = {}
        total = 0
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            n = int(count)
            total += n
            frames = stack.split(";")
            part = next(
                (name for f in frames for name, marks in COMPONENTS if any(m in f for m in marks)),
                "event loop and I/O",
            )
            by_part[part] = by_part.get(part, 0) + n
            own[frames[-1]] = own.get(frames[-1], 0) + n

        def share(n: int) -> float:
            return round(100 * n / total, 1) if total else 0.0

        return {
            "samples": total,
            "share_pct": {k: share(v) for k, v in sorted(by_part.items(), key=lambda x: -x[1])},
            "top_own_pct": {k: share(v) for k, v in sorted(own.items(), key=lambda x: -x[1])[:15]},
        }


def targets(rounds: list[dict[str, Any]], jobs: int) -> dict[str, Any]:
    walls = [x["jobsets_s"] for x in rounds]
    complete = [w for w in walls if w is not None]
    during = [x["kubectl_during_burst"].get("p50_ms") for x in rounds]
    during_max = [x["kubectl_during_burst"].get("max_ms") for x in rounds]
    out: dict[str, Any] = {
        "jobs": jobs,
        "rounds": len(rounds),
        "all_rounds_complete": len(complete) == len(walls),
        "jobsets_s": round(statistics.median(complete), 3) if complete else None,
        "jobsets_s_per_round": walls,
        "kubectl_p50_ms": statistics.median([d for d in during if d is not None] or [0.0]),
        "kubectl_max_ms": max([d for d in during_max if d is not None] or [0.0]),
        "kubectl_idle_p50_ms": statistics.median(
            [x["kubectl_idle"].get("p50_ms", 0.0) for x in rounds]
        ),
    }
    scaled = TARGET_JOBSETS_S * jobs / 300
    out["jobsets_target_s"] = scaled
    out["jobsets_met"] = (
        bool(complete) and len(complete) == len(walls) and (out["jobsets_s"] <= scaled)
    )
    out["kubectl_met"] = out["kubectl_p50_ms"] <= TARGET_KUBECTL_P50_S * 1000
    return out


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    for i in range(args.rounds):
        rounds.append(await one_round(args, i))
        print(summary(rounds[-1]), flush=True)
    return {
        "benchmark": "localplane",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "source": source_state(),
        "settings": {
            "jobs": args.jobs,
            "concurrency": args.concurrency,
            "kubectl_runs": args.kubectl_runs,
            "kubectl_gap_s": args.kubectl_gap,
            "runtime": RUNTIME,
            "num_nodes": NUM_NODES,
        },
        "rounds": rounds,
        "targets": targets(rounds, args.jobs),
    }


def summary(x: dict[str, Any]) -> str:
    k = x["kubectl_during_burst"]
    return (
        f"round {x['round']}: {x['jobsets_seen']}/{x['jobs']} JobSets in {x['jobsets_s']} s "
        f"(creates done at {x['creates_s']} s), plane CPU {x['plane_cpu_per_wall_s']} s/s, "
        f"other processes {x['other_processes_cpu_s']} CPU-s; kubectl get during the burst "
        f"p50 {k.get('p50_ms')} ms max {k.get('max_ms')} ms ({k['runs']} runs; idle p50 "
        f"{x['kubectl_idle'].get('p50_ms')} ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300, help="TrainJobs in the burst")
    parser.add_argument("--concurrency", type=int, default=32, help="creates in flight")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each on a fresh plane")
    parser.add_argument(
        "--kubectl-runs", type=int, default=8, help="kubectl get runs during a burst, at most"
    )
    parser.add_argument(
        "--kubectl-gap", type=float, default=0.5, help="seconds between kubectl get runs"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy the plane during each burst")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per burst")
    parser.add_argument(
        "--dashboard", action="store_true", help="trainer up serves its dashboard meanwhile"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/localplane.json")
    args = parser.parse_args()
    if shutil.which("kubectl") is None:
        print("kubectl is not installed", file=sys.stderr)
        return 2
    if not 1 <= args.jobs <= 10_000 or not 1 <= args.concurrency <= 256:
        print("--jobs must be 1..10000 and --concurrency 1..256", file=sys.stderr)
        return 2
    report = asyncio.run(bench(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    t = report["targets"]
    verdict = {True: "met", False: "MISSED"}
    print(
        f"{t['jobs']} TrainJobs to JobSets in {t['jobsets_s']} s (median of {t['rounds']}; "
        f"{verdict[t['jobsets_met']]} <= {t['jobsets_target_s']:g} s; per round "
        f"{t['jobsets_s_per_round']}); kubectl get during the burst p50 {t['kubectl_p50_ms']} ms, "
        f"max {t['kubectl_max_ms']} ms ({verdict[t['kubectl_met']]}; idle p50 "
        f"{t['kubectl_idle_p50_ms']} ms)"
    )
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
