"""The measured phases of the controller benchmark (hack/bench/controller.py): A, the controller
under a burst of creates; B, the bare writer doing the same writes; C, the controller's memory
with its caches grown. Each returns its figures as a dict for the report.

The processes they drive are in :mod:`controller_roles`, the workload in
:mod:`controller_workload`; what the figures add up to is in :mod:`controller_report`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from benchlib import JSON_HEADERS, ROOT, ApiServerProcess, OtherLoad, child_env, pinned, session_for
from controller_roles import ControllerProcess
from controller_workload import (
    NAMESPACE,
    WARM_JOBS,
    WARM_NAMESPACE,
    create_trainjobs,
    job_names,
    prepare_server,
    verify,
)

from trainer.api import constants as c
from trainer.cli.process import DEFAULT_CONCURRENCY

WRITE_VERBS = frozenset({"create", "update", "apply", "patch", "delete"})


# ---------------------------------------------------------------------------------------------
# Phase A: the controller under a burst


@dataclass
class Env:
    """CPUs, the scratch directory and the TrainJob template shared by the phases."""

    workdir: Path
    server_cpu: int | None
    controller_cpu: int | None
    template: dict[str, Any]
    concurrency: int  # driver requests in flight
    workers: int | None  # controller concurrency (None: the product default)


async def warm_up(
    session: aiohttp.ClientSession,
    metrics: aiohttp.ClientSession,
    controller: ControllerProcess,
    env: Env,
) -> None:
    """WARM_JOBS TrainJobs in their own namespace, reconciled (imports, connections, caches)."""
    base = await controller.scrape(metrics)
    names = job_names("warm", 0, WARM_JOBS)
    await create_trainjobs(session, WARM_NAMESPACE, names, env.template, env.concurrency)
    done, _ = await controller.wait_done(metrics, base, WARM_JOBS, time.monotonic() + 60)
    if done is None:
        raise RuntimeError(f"the controller did not reconcile the warm-up jobs: {controller.log}")
    await controller.wait_idle(metrics)


async def burst(
    session: aiohttp.ClientSession,
    metrics: aiohttp.ClientSession,
    server: ApiServerProcess,
    controller: ControllerProcess,
    env: Env,
    names: list[str],
    deadline: float,
    profile: bool,
) -> dict[str, Any]:
    """Create ``names`` at once; measure until the controller has handled all of them."""
    base = await controller.scrape(metrics)
    cpu0, srv0 = controller.cpu_seconds(), server.cpu_seconds()
    driver0 = time.process_time()
    other = OtherLoad([server.proc.pid, controller.pid])
    if profile:
        os.kill(controller.pid, signal.SIGUSR1)
    creating = asyncio.create_task(
        create_trainjobs(session, NAMESPACE, names, env.template, env.concurrency)
    )
    await asyncio.sleep(0)
    done_at, _ = await controller.wait_done(metrics, base, len(names), deadline)
    cpu_done, srv_done = controller.cpu_seconds(), server.cpu_seconds()
    load = other.result()
    creates = await creating
    settled = await controller.wait_idle(metrics)
    cpu_idle, srv_idle = controller.cpu_seconds(), server.cpu_seconds()
    if profile:
        os.kill(controller.pid, signal.SIGUSR2)
    n = creates.done
    wall = (done_at - creates.started) if done_at is not None else None
    delta = settled.minus(base)
    writes = sum(v for k, v in delta["requests"].items() if k.split()[0] in WRITE_VERBS)
    reads = sum(v for k, v in delta["requests"].items() if k.split()[0] not in WRITE_VERBS)
    check = await verify(session, NAMESPACE, names)
    return {
        "trainjobs": len(names),
        "creates": creates.summary(),
        "all_handled": done_at is not None,
        "wall_s": round(wall, 3) if wall is not None else None,
        "jobs_per_s": round(n / wall, 1) if wall else None,
        "lag_after_last_create_s": round(done_at - creates.finished, 3) if done_at else None,
        "controller_cpu_s": round(cpu_done - cpu0, 3),
        "controller_cpu_ms_per_job": round((cpu_done - cpu0) * 1000 / n, 3) if n else None,
        "controller_cpu_utilisation": round((cpu_done - cpu0) / wall, 3) if wall else None,
        "controller_cpu_ms_per_job_until_idle": round((cpu_idle - cpu0) * 1000 / n, 3)
        if n
        else None,
        "server_cpu_s": round(srv_done - srv0, 3),
        "server_cpu_utilisation": round((srv_done - srv0) / wall, 3) if wall else None,
        "server_cpu_s_until_idle": round(srv_idle - srv0, 3),
        "driver_cpu_s": round(time.process_time() - driver0, 3),
        "api_writes_per_job": round(writes / n, 3) if n else None,
        "api_reads_per_job": round(reads / n, 3) if n else None,
        "reconciles_per_job": round(sum(delta["reconciles"].values()) / n, 3) if n else None,
        "controller_requests": delta["requests"],
        "controller_reconciles": delta["reconciles"],
        "verified_on_server": check,
        **load,
    }


# ---------------------------------------------------------------------------------------------
# Phase B: the bare writer


async def bare_run(env: Env, names: list[str], deadline: float) -> dict[str, Any]:
    """A fresh server; the driver's creates feed the bare writer; wall until its last write."""
    workers = env.workers or DEFAULT_CONCURRENCY
    server = ApiServerProcess.start(env.workdir, env.server_cpu)
    proc: asyncio.subprocess.Process | None = None
    try:
        async with session_for(server.access, env.concurrency) as session:
            await prepare_server(session)
            warm = job_names("warm", 0, WARM_JOBS)
            plan = {
                "template": env.template,
                "jobs": [[WARM_NAMESPACE, n] for n in warm] + [[NAMESPACE, n] for n in names],
                "concurrency": workers,
            }
            plan_path = env.workdir / f"bare-plan-{time.monotonic_ns()}.json"
            plan_path.write_text(json.dumps(plan))
            cmd = [
                str(Path(__file__).resolve().with_name("controller_roles.py")),
                "_bare",
                "--kubeconfig",
                str(server.kubeconfig),
            ]
            cmd += ["--plan", str(plan_path)]
            with pinned(env.controller_cpu):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    *cmd,
                    cwd=ROOT,
                    env=child_env(),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    limit=1 << 22,
                )
            assert proc.stdin is not None and proc.stdout is not None
            stdin, stdout = proc.stdin, proc.stdout

            async def expect(word: str) -> str:
                line = (await asyncio.wait_for(stdout.readline(), 300)).decode()
                if not line.startswith(word):
                    raise RuntimeError(f"the bare writer said {line!r}, expected {word!r}")
                return line[len(word) :].strip()

            await expect("ready")

            def feeder(namespace: str) -> Callable[[str, str], Awaitable[None]]:
                async def feed(name: str, uid: str) -> None:
                    stdin.write(f"job {namespace} {name} {uid}\n".encode())

                return feed

            await create_trainjobs(
                session, WARM_NAMESPACE, warm, env.template, env.concurrency, feeder(WARM_NAMESPACE)
            )
            stdin.write(b"sync\n")
            await stdin.drain()
            await expect("synced")
            srv0 = server.cpu_seconds()
            other = OtherLoad([server.proc.pid, proc.pid])
            creates = await create_trainjobs(
                session, NAMESPACE, names, env.template, env.concurrency, feeder(NAMESPACE)
            )
            stdin.write(b"end\n")
            await stdin.drain()
            remaining = max(10.0, deadline - time.monotonic())
            result = json.loads(await asyncio.wait_for(expect("done"), remaining))
            srv = server.cpu_seconds() - srv0
            load = other.result()
            check = await verify(session, NAMESPACE, names)
        await proc.wait()
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.stop()
    wall = result["last_done"] - creates.started
    n = result["jobs"]
    writes = sum(v for k, v in result["requests"].items() if k.split()[0] in WRITE_VERBS)
    return {
        "writes": "snapshot ConfigMap apply, JobSet apply",
        "concurrency": workers,
        "trainjobs": len(names),
        "jobs_written": n,
        "errors": result["errors"],
        "creates": creates.summary(),
        "wall_s": round(wall, 3),
        "jobs_per_s": round(n / wall, 1) if wall > 0 else None,
        "writer_cpu_s": result["cpu_s"],
        "writer_cpu_ms_per_job": round(result["cpu_s"] * 1000 / n, 3) if n else None,
        "server_cpu_s": round(srv, 3),
        "server_cpu_utilisation": round(srv / wall, 3) if wall > 0 else None,
        "api_writes_per_job": round(writes / n, 3) if n else None,
        "verified_on_server": check,
        **load,
    }


# ---------------------------------------------------------------------------------------------
# Phase C: memory


def decoded_bytes(raw: str | bytes, copies: int = 200) -> float:
    """Python heap bytes one ``json.loads(raw)`` holds (tracemalloc, mean of ``copies``)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [json.loads(raw) for _ in range(copies)]
        used = (tracemalloc.get_traced_memory()[0] - before) / copies
    finally:
        tracemalloc.stop()
    del held
    return used


async def cache_footprint(session: aiohttp.ClientSession) -> dict[str, Any]:
    """Python heap bytes of one cached object of each kind (decoded like a watch event), and
    the number of each stored: what the controller's caches amount to before overheads."""
    kinds = {
        "trainjobs": f"/apis/{c.GROUP}/v1alpha1/trainjobs",
        "jobsets": "/apis/jobset.x-k8s.io/v1alpha2/jobsets",
        "configmaps": f"/api/v1/configmaps?labelSelector={c.LABEL_TRAINJOB_NAME}",
    }
    out: dict[str, Any] = {}
    total = 0.0
    for kind, path in kinds.items():
        sep = "&" if "?" in path else "?"
        async with session.get(f"{path}{sep}limit=1", headers=JSON_HEADERS) as resp:
            page = json.loads(await resp.read())
        count = len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)
        if not page["items"]:
            continue
        item = page["items"][0]
        raw = json.dumps(item).encode()
        used = decoded_bytes(raw)
        item["metadata"].pop("managedFields", None)
        out[kind] = {
            "stored": count,
            "json_bytes": len(raw),
            "python_bytes_each": int(used),
            "python_bytes_each_without_managed_fields": int(decoded_bytes(json.dumps(item))),
            "python_mb_all": round(used * count / 1e6, 1),
        }
        total += used * count
    out["python_mb_all_kinds"] = round(total / 1e6, 1)
    return out


async def memory_phase(
    session: aiohttp.ClientSession,
    metrics: aiohttp.ClientSession,
    controller: ControllerProcess,
    env: Env,
    start_index: int,
    count: int,
    deadline: float,
) -> dict[str, Any]:
    """Create ``count`` more TrainJobs, wait until the controller handled them, read VmRSS."""
    base = await controller.scrape(metrics)
    names = job_names("tj", start_index, start_index + count)
    t0 = time.monotonic()
    creating = asyncio.create_task(
        create_trainjobs(session, NAMESPACE, names, env.template, env.concurrency)
    )
    samples: list[tuple[float, float]] = []

    async def sample_rss() -> None:
        while True:
            samples.append((round(time.monotonic() - t0, 1), controller.rss_mb()["VmRSS_mb"]))
            await asyncio.sleep(2.0)

    sampler = asyncio.create_task(sample_rss())
    done_at, _ = await controller.wait_done(metrics, base, count, deadline)
    creates = await creating
    await controller.wait_idle(metrics)
    sampler.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sampler
    await asyncio.sleep(1.0)
    return {
        "created": creates.summary(),
        "all_handled": done_at is not None,
        "handled_s": round(done_at - t0, 3) if done_at else None,
        "rss_samples_mb": samples,
    }


def jobset_pod(trainjob: str, index: int, failed: bool) -> dict[str, Any]:
    """A pod as JobSet's Job of ``trainjob``'s node job makes it (labels, a torch container
    with the env the plugins inject), Running, or with its container terminated by exit 1 and
    a termination message of the log tail's size, as a failed rank leaves it."""
    name = f"{trainjob}-node-0-{index}"
    env = [{"name": f"PET_VAR_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(12)]
    state: dict[str, Any] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    last: dict[str, Any] = {}
    if failed:
        last = {
            "terminated": {
                "exitCode": 1,
                "reason": "Error",
                "message": "Traceback (most recent call last):\n" + "  line\n" * 200,
                "startedAt": "2026-01-01T00:00:00Z",
                "finishedAt": "2026-01-01T00:01:00Z",
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-abcde",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": trainjob,
                "jobset.sigs.k8s.io/jobset-uid": f"uid-{trainjob}",
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
                "batch.kubernetes.io/job-name": f"{trainjob}-node-0",
                "job-name": f"{trainjob}-node-0",
            },
        },
        "spec": {
            "hostname": name,
            "subdomain": trainjob,
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "node",
                    "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                    "command": ["torchrun", "/workspace/train.py"],
                    "env": env,
                    "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            ],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "node",
                    "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                    "ready": True,
                    "restartCount": 1 if failed else 0,
                    "state": state,
                    **({"lastState": last} if last else {}),
                }
            ],
        },
    }


async def pods_phase(
    session: aiohttp.ClientSession,
    metrics: aiohttp.ClientSession,
    controller: ControllerProcess,
    trainjobs: list[str],
    count: int,
    failed_every: int,
) -> dict[str, Any]:
    """Create ``count`` JobSet pods (two per TrainJob, every ``failed_every``-th with a failed
    container) and their status, wait until the controller is idle, read VmRSS: what its pod
    watch (trainer/controller/failures.py) costs."""
    before = controller.rss_mb()["VmRSS_mb"]
    pods = [
        jobset_pod(trainjobs[(i // 2) % len(trainjobs)], i % 2, i % failed_every == 0)
        for i in range(count)
    ]
    t0 = time.monotonic()
    sem = asyncio.Semaphore(16)
    errors: dict[str, int] = {}

    async def create(pod: dict[str, Any]) -> None:
        status = pod.pop("status")
        name = pod["metadata"]["name"]
        async with sem:
            async with session.post(
                f"/api/v1/namespaces/{NAMESPACE}/pods", data=json.dumps(pod), headers=JSON_HEADERS
            ) as resp:
                await resp.read()
                if resp.status != 201:
                    errors[str(resp.status)] = errors.get(str(resp.status), 0) + 1
                    return
            async with session.patch(
                f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
                data=json.dumps({"status": status}),
                headers={"Content-Type": "application/merge-patch+json"},
            ) as resp:
                await resp.read()
                if resp.status != 200:
                    errors[f"status {resp.status}"] = errors.get(f"status {resp.status}", 0) + 1

    await asyncio.gather(*(create(p) for p in pods))
    created_s = time.monotonic() - t0
    await controller.wait_idle(metrics)
    await asyncio.sleep(2.0)
    after = controller.rss_mb()
    return {
        "pods": count,
        "pods_with_a_failed_container": len(range(0, count, failed_every)),
        "errors": errors,
        "created_s": round(created_s, 1),
        "rss_mb_before_pods": before,
        "rss_mb_with_pods": after["VmRSS_mb"],
        "rss_mb_delta": round(after["VmRSS_mb"] - before, 1),
        "peak_rss_mb": after["VmHWM_mb"],
    }
