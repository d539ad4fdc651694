"""The processes of the controller benchmark besides its driver and the API server: the
controller (with the metrics the driver reads from it) and the bare writer.

Both run as child modes of this file (``python hack/bench/controller_roles.py
_controller|_bare ...``), pinned to a CPU by the driver (hack/bench/controller.py);
:class:`ControllerProcess` is the driver's handle on the controller, and the API server is
``benchlib.ApiServerProcess``, shared with the API server benchmark. Held apart from the phases
so that what runs in a child, and what it costs, reads in one place.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from benchlib import (
    ROOT,
    child_env,
    pinned,
    proc_cpu_seconds,
    proc_rss_mb,
    stop_process,
)
from controller_workload import KEYS, RUNTIME, UID_PLACEHOLDER, trainjob_body

from trainer.api.v1alpha1 import TrainJob
from trainer.cli.process import ProcessOptions, ProcessState, run_controller
from trainer.controller.config import load_config
from trainer.controller.reconcile import FIELD_MANAGER
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError, Kube
from trainer.plugins.registry import render
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.info import BuildContext, Runtime

POLL_S = 0.1  # /metrics polling interval near the end of a burst (the timing resolution)
POLL_FAR_S = 0.5  # ... and while more than 10% of the jobs are still to do
QUIET_S = 1.5  # the controller is idle once its queue is empty and no request for this long


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# The controller process and its metrics

_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class Scrape:
    """The controller's request, reconcile and queue counters at one moment."""

    requests: dict[tuple[str, str, str], float]  # (verb, resource, code) -> count
    reconciles: dict[str, float]  # result -> count
    depth: float

    @classmethod
    def parse(cls, text: str) -> Scrape:
        requests: dict[tuple[str, str, str], float] = {}
        reconciles: dict[str, float] = {}
        depth = 0.0
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            if m is None:
                continue
            name, labels_text, value = m.groups()
            labels = dict(_LABEL.findall(labels_text or ""))
            if name == "trainer_api_requests_total":
                key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("code", ""))
                requests[key] = float(value)
            elif name == "trainer_reconcile_total":
                reconciles[labels.get("result", "")] = float(value)
            elif name == "trainer_workqueue_depth" and labels.get("name") == "trainjob":
                depth = float(value)
        return cls(requests, reconciles, depth)

    def ok(self, verb: str, resource_prefix: str, suffix: str = "") -> float:
        """Successful (2xx) requests of ``verb`` on resources starting ``resource_prefix``
        (and ending ``suffix``)."""
        return sum(
            v
            for (vb, res, code), v in self.requests.items()
            if vb == verb
            and res.startswith(resource_prefix)
            and res.endswith(suffix)
            and code.startswith("2")
        )

    def jobsets_applied(self) -> float:
        return self.ok("apply", "jobsets")

    def statuses_patched(self) -> float:
        return self.ok("patch", "trainjobs", "/status")

    def total(self) -> float:
        return sum(self.requests.values())

    def minus(self, before: Scrape) -> dict[str, Any]:
        """Requests per verb/resource/code and reconciles by result since ``before``."""
        reqs = {
            f"{verb} {res} {code}": v - before.requests.get((verb, res, code), 0.0)
            for (verb, res, code), v in sorted(self.requests.items())
        }
        recs = {k: v - before.reconciles.get(k, 0.0) for k, v in sorted(self.reconciles.items())}
        return {
            "requests": {k: int(v) for k, v in reqs.items() if v},
            "reconciles": {k: int(v) for k, v in recs.items() if v},
        }


class ControllerProcess:
    """The controller (this file's ``_controller`` mode) on ``cpu``."""

    def __init__(
        self, proc: subprocess.Popen[bytes], info_path: Path, info: dict[str, Any], log: Path
    ) -> None:
        self.proc = proc
        self.info = info
        self.log = log
        self.metrics_url = str(info["metrics_url"])
        self.profile_path = info_path.with_suffix(".prof")  # written on SIGUSR2

    @classmethod
    def start(
        cls,
        workdir: Path,
        kubeconfig: Path,
        cpu: int | None,
        concurrency: int | None,
        timeout: float = 90.0,
    ) -> ControllerProcess:
        config: dict[str, Any] = {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "metrics": {"bindAddress": "127.0.0.1:0", "secureServing": False},
            "health": {"healthProbeBindAddress": "127.0.0.1:0"},
            "certManagement": {"enable": False},
            # No client-side rate limit (the default 50 qps would be the bottleneck): the
            # bench measures the controller's own cost against the bare writer's.
            "clientConnection": {"qps": 0},
        }
        if concurrency is not None:
            config["controller"] = {
                "groupKindConcurrency": {"TrainJob.trainer.kubeflow.org": concurrency}
            }
        config_path = workdir / "controller-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        info_path = workdir / f"controller-{time.monotonic_ns()}.json"
        log = workdir / "controller.log"
        cmd = [sys.executable, str(Path(__file__).resolve()), "_controller"]
        cmd += ["--kubeconfig", str(kubeconfig), "--config", str(config_path)]
        cmd += ["--info", str(info_path)]
        with pinned(cpu), log.open("wb") as log_fh:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log_fh, stderr=subprocess.STDOUT, env=child_env()
            )
        deadline = time.monotonic() + timeout
        while not info_path.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the controller did not start (exit {proc.poll()}):\n{tail}")
            time.sleep(0.05)
        return cls(proc, info_path, json.loads(info_path.read_text()), log)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)

    def rss_mb(self) -> dict[str, float]:
        return proc_rss_mb(self.pid)

    async def scrape(self, session: aiohttp.ClientSession) -> Scrape:
        async with session.get(self.metrics_url + "/metrics") as resp:
            return Scrape.parse(await resp.text())

    async def wait_done(
        self, session: aiohttp.ClientSession, base: Scrape, jobs: int, deadline: float
    ) -> tuple[float | None, Scrape]:
        """Poll /metrics until ``jobs`` more JobSets were applied than in ``base`` (no status is
        patched: no JobSet reports one here); returns the time (monotonic, None past
        ``deadline``) and the last scrape."""
        while True:
            now = time.monotonic()
            s = await self.scrape(session)
            applied = s.jobsets_applied() - base.jobsets_applied()
            if applied >= jobs:
                return now, s
            if now > deadline:
                return None, s
            # Each scrape costs the controller a few ms of CPU: poll slowly while far from done.
            far = jobs - applied > max(10, jobs // 10)
            await asyncio.sleep(POLL_FAR_S if far else POLL_S)

    async def wait_idle(self, session: aiohttp.ClientSession, limit: float = 30.0) -> Scrape:
        """Poll until the queue is empty and no request was made for QUIET_S seconds."""
        end = time.monotonic() + limit
        last = await self.scrape(session)
        quiet_since = time.monotonic()
        while time.monotonic() < end:
            await asyncio.sleep(0.25)
            s = await self.scrape(session)
            if s.total() != last.total() or s.depth > 0:
                quiet_since = time.monotonic()
            last = s
            if time.monotonic() - quiet_since >= QUIET_S:
                break
        return last

    def stop(self) -> None:
        stop_process(self.proc)


# ---------------------------------------------------------------------------------------------
# Child mode: the controller


async def serve_controller(kubeconfig: str, config_path: str, info_path: Path) -> None:
    """What ``trainer controller --no-webhook --config`` runs, plus: the metrics/probe URLs
    written to ``info_path`` once ready, and cProfile on SIGUSR1 (start) / SIGUSR2 (stop and
    dump to ``info_path`` with a ``.prof`` suffix)."""
    config = load_config(config_path)
    api = await new_api_client(kubeconfig)
    stop, ready, state = asyncio.Event(), asyncio.Event(), ProcessState()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    profiler = cProfile.Profile()

    def dump_profile() -> None:
        profiler.disable()
        tmp = info_path.with_suffix(".prof.tmp")
        profiler.dump_stats(str(tmp))
        os.replace(tmp, info_path.with_suffix(".prof"))

    loop.add_signal_handler(signal.SIGUSR1, profiler.enable)
    loop.add_signal_handler(signal.SIGUSR2, dump_profile)
    run = asyncio.create_task(
        run_controller(
            api, config, stop, options=ProcessOptions(webhook=False), ready=ready, state=state
        )
    )
    waiting = asyncio.create_task(ready.wait())
    try:
        await asyncio.wait({run, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            assert state.controller is not None
            info = {
                "metrics_url": state.metrics_url,
                "health_url": state.health_url,
                "concurrency": state.controller.concurrency,
            }
            tmp = info_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(info))
            os.replace(tmp, info_path)
        await run
    finally:
        waiting.cancel()
        await api.close()


# ---------------------------------------------------------------------------------------------
# Child mode: the bare writer


@dataclass
class Prepared:
    """One TrainJob's writes, rendered before the clock starts (uid filled in at send time)."""

    trainjob: dict[str, Any]
    objects: list[dict[str, Any]]


def prepare_writes(
    namespace: str, name: str, template: dict[str, Any], runtime: Runtime
) -> Prepared:
    """The objects the controller would apply for this TrainJob, as it sends them. No status:
    the controller writes one once the JobSet reports its own, which no JobSet controller does
    on the benchmark's server."""
    wire = trainjob_body(template, namespace, name)
    wire["metadata"]["uid"] = UID_PLACEHOLDER
    job = TrainJob.from_wire(wire)
    objects = render(job, runtime, ctx=BuildContext(ssh_keygen=lambda: KEYS))
    return Prepared(wire, objects)


async def serve_bare(kubeconfig: str, plan_path: Path) -> None:
    """Read ``job <namespace> <name> <uid>`` / ``sync`` / ``end`` lines on stdin; per job,
    apply the snapshot ConfigMap and the JobSet, ``concurrency`` jobs at a time. Answers
    ``ready``, ``synced`` and ``done <json>`` lines on stdout."""
    plan = json.loads(plan_path.read_text())
    template = plan["template"]
    runtime = builtin_runtimes()[RUNTIME]
    prepared = {
        (ns, name): prepare_writes(ns, name, template, runtime) for ns, name in plan["jobs"]
    }
    counts: dict[str, int] = {}

    def on_request(verb: str, res: str, code: int, _seconds: float) -> None:
        key = f"{verb} {res} {code}"
        counts[key] = counts.get(key, 0) + 1

    api = await new_api_client(kubeconfig)
    kube = Kube(api, on_request=on_request)
    queue: asyncio.Queue[tuple[str, str, str] | None] = asyncio.Queue()
    errors: dict[str, int] = {}
    last_done = 0.0
    jobs_done = 0

    async def one(ns: str, name: str, uid: str) -> None:
        p = prepared[(ns, name)]
        p.trainjob["metadata"]["uid"] = uid
        for obj in p.objects:
            obj["metadata"]["ownerReferences"][0]["uid"] = uid
            await kube.apply(obj, FIELD_MANAGER, force=True)

    async def worker() -> None:
        nonlocal last_done, jobs_done
        while (item := await queue.get()) is not None:
            try:
                await one(*item)
                jobs_done += 1
            except APIError as exc:
                errors[exc.reason] = errors.get(exc.reason, 0) + 1
            last_done = time.monotonic()
            queue.task_done()
        queue.task_done()

    workers = [asyncio.create_task(worker()) for _ in range(int(plan["concurrency"]))]
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("ready", flush=True)
    cpu0 = time.process_time()
    try:
        while line := (await reader.readline()).decode():
            cmd, *rest = line.split()
            if cmd == "job":
                queue.put_nowait((rest[0], rest[1], rest[2]))
            elif cmd == "sync":  # the warm-up is over: count from here
                await queue.join()
                cpu0 = time.process_time()
                jobs_done = 0
                counts.clear()
                errors.clear()
                print("synced", flush=True)
            elif cmd == "end":
                await queue.join()
                result = {
                    "jobs": jobs_done,
                    "last_done": last_done,
                    "errors": errors,
                    "requests": counts,
                    "cpu_s": round(time.process_time() - cpu0, 3),
                }
                print("done " + json.dumps(result), flush=True)
                break
    finally:
        for _ in workers:
            queue.put_nowait(None)
        await asyncio.gather(*workers, return_exceptions=True)
        await api.close()


def child_main(mode: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"controller_roles.py {mode}")
    parser.add_argument("--kubeconfig", required=True)
    if mode == "_controller":
        parser.add_argument("--config", required=True)
        parser.add_argument("--info", type=Path, required=True)
        args = parser.parse_args(argv)
        asyncio.run(serve_controller(args.kubeconfig, args.config, args.info))
    else:
        parser.add_argument("--plan", type=Path, required=True)
        args = parser.parse_args(argv)
        asyncio.run(serve_bare(args.kubeconfig, args.plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1], sys.argv[2:]))
