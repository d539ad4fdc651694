"""Benchmark the local Kubernetes API server over HTTP on loopback.

The server is the real one, ``python -m trainer.cli.main apiserver --port 0`` (CRDs installed),
running in its own process pinned to one CPU; the load runs in this process, pinned to the
other, over aiohttp keep-alive HTTPS connections. The URL, the CA and the bearer token are read
from the kubeconfig the server writes. Phases, each bounded in count and time:

1. create throughput: ``--configmaps`` (10,000) small ConfigMaps with varied labels, written
   with ``--concurrency`` (16) requests in flight; writes/s and latency percentiles;
2. list with a label selector matching 1% of those 10,000 ConfigMaps: median of ``--runs``
   runs (plus one unfiltered list of everything for comparison);
3. ``--watchers`` (10) plain HTTP watch streams started from a list's resourceVersion while a
   burst of ``--burst`` (5,000) ConfigMap writes runs: every watcher must see every write,
   exactly once, with strictly increasing resourceVersions; time until all were delivered;
4. on a fresh server, ``--trainjobs`` (10,000) TrainJobs shaped like examples/multi-node.yaml
   (unique names): TrainJob creates/s (custom resources go through structural-schema pruning,
   defaulting, validation and CEL) and the server's VmRSS with them all stored.

Targets: >= 1,500 ConfigMap writes/s; selector list < 50 ms; no watch event lost; RSS with
10,000 TrainJobs < 200 MB. The whole run stays under ``--budget`` seconds (170): a write phase
that reaches its share of the budget stops early and the report says so.
With ``--state-file PATH`` the servers persist every write to a SQLite state file (see
docs/local-plane.md, "State file: durability and recovery"); the same target applies.
Writes hack/bench/reports/apiserver.json.

    python hack/bench/apiserver.py [--configmaps 10000] [--trainjobs 10000] [--out PATH]
                                   [--state-file PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from apiserver_load import (
    APPS,
    CPUMeter,
    collection,
    configmap,
    create_many,
    create_namespace,
    trainjob_factory,
)
from benchlib import ROOT, ApiServerProcess, cpu_busy

TARGET_WRITES_PER_S = 1500.0
TARGET_LIST_MS = 50.0
TARGET_RSS_MB = 200.0


async def timed_list(session: aiohttp.ClientSession, path: str) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    async with session.get(path, headers={"Accept": "application/json"}) as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status}")
    elapsed = time.perf_counter() - start
    return elapsed, json.loads(raw)


async def list_phase(
    session: aiohttp.ClientSession, server: ApiServerProcess, namespace: str, stored: int, runs: int
) -> dict[str, Any]:
    """Median of ``runs`` label-selector lists (a different app each run, ~1% each), a
    set-based selector, and one unfiltered list of everything."""
    path = collection("v1", namespace, "configmaps")
    await timed_list(session, f"{path}?labelSelector=app%3Dapp-0")  # warm-up
    meter = CPUMeter(server)
    times: list[float] = []
    matched: list[int] = []
    for run in range(runs):
        app = f"app-{(run * 37 + 11) % APPS}"
        elapsed, body = await timed_list(session, f"{path}?labelSelector=app%3D{app}")
        times.append(elapsed)
        matched.append(len(body["items"]))
    set_times: list[float] = []
    set_matched = 0
    for run in range(runs):
        app = f"app-{(run * 13 + 5) % APPS}"
        selector = f"app in ({app}),tier,shard notin (9)"
        elapsed, body = await timed_list(
            session, f"{path}?labelSelector={quote(selector, safe='')}"
        )
        set_times.append(elapsed)
        set_matched = len(body["items"])
    full_s, full = await timed_list(session, path)
    expected = stored // APPS
    return {
        "objects_in_namespace": len(full["items"]),
        "selector": "app=app-N (equality, a different N each run)",
        "runs": runs,
        "matched_per_run": sorted(set(matched)),
        "expected_matches": expected,
        "all_runs_matched_expected": all(m == expected for m in matched),
        "median_ms": round(statistics.median(times) * 1000, 3),
        "min_ms": round(min(times) * 1000, 3),
        "max_ms": round(max(times) * 1000, 3),
        "set_based_selector": "app in (app-N),tier,shard notin (9)",
        "set_based_matched": set_matched,
        "set_based_median_ms": round(statistics.median(set_times) * 1000, 3),
        "unfiltered_list_ms": round(full_s * 1000, 3),
        **meter.result(),
    }


@dataclass
class WatchLog:
    """What one watcher received (kept when its task is cancelled for running late)."""

    rvs: list[int] = field(default_factory=list)
    types: dict[str, int] = field(default_factory=dict)
    last: float = 0.0  # perf_counter of the last event


async def watch_stream(
    session: aiohttp.ClientSession,
    path: str,
    expected: int,
    started: asyncio.Event,
    log: WatchLog,
) -> None:
    """Read one watch stream into ``log`` until ``expected`` events arrived (or it ended)."""
    async with session.get(path, headers={"Accept": "application/json"}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"watch {path}: HTTP {resp.status}")
        started.set()
        while len(log.rvs) < expected:
            line = await resp.content.readline()
            if not line:
                break  # the server closed the stream
            event = json.loads(line)
            log.types[event["type"]] = log.types.get(event["type"], 0) + 1
            log.rvs.append(int(event["object"]["metadata"]["resourceVersion"]))
            log.last = time.perf_counter()


async def watch_phase(
    session: aiohttp.ClientSession,
    server: ApiServerProcess,
    namespace: str,
    watchers: int,
    burst: int,
    concurrency: int,
    deadline: float,
) -> dict[str, Any]:
    """``watchers`` watches from a list's resourceVersion, then ``burst`` creates; check that
    every watcher saw exactly the writes' resourceVersions, in strictly increasing order."""
    path = collection("v1", namespace, "configmaps")
    _, listed = await timed_list(session, path)
    list_rv = listed["metadata"]["resourceVersion"]
    watch_timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with server.session(watchers, timeout=watch_timeout) as watch_session:
        events = [asyncio.Event() for _ in range(watchers)]
        logs = [WatchLog() for _ in range(watchers)]
        tasks = [
            asyncio.create_task(
                watch_stream(
                    watch_session,
                    f"{path}?watch=true&resourceVersion={list_rv}",
                    burst,
                    started,
                    log,
                )
            )
            for started, log in zip(events, logs, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 30)
        rvs: list[int] = []
        t0 = time.perf_counter()
        writes = await create_many(
            session,
            server,
            path,
            configmap,
            prefix="w",
            count=burst,
            concurrency=concurrency,
            deadline=deadline,
            rvs=rvs,
        )
        writes_done = time.perf_counter() - t0
        # Delivery may trail the last write; wait for it within the phase's share of the budget.
        wait = max(5.0, deadline - time.perf_counter())
        done, pending = await asyncio.wait(tasks, timeout=wait)
        for task in pending:  # a watcher still short of events: counted as lossy below
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            task.result()  # a watch that failed fails the run
        all_done = time.perf_counter() - t0
    want = sorted(rvs)
    per_watcher = []
    for log in logs:
        got = log.rvs
        increasing = all(a < b for a, b in itertools.pairwise(got))
        per_watcher.append(
            {
                "events": len(got),
                "types": log.types,
                "strictly_increasing": increasing,
                "complete": got == want,
                "missing": len(set(want) - set(got)),
                "unexpected": len(set(got) - set(want)),
                "delivered_s": round(log.last - t0, 3) if got else None,
            }
        )
    lossless = all(w["complete"] and w["strictly_increasing"] for w in per_watcher)
    # Delivery times only count when every watcher got everything.
    delivered = [log.last - t0 for log in logs if log.rvs] if lossless else []
    return {
        "watchers": watchers,
        "started_from_list_resource_version": list_rv,
        "burst_writes": writes,
        "writes_acknowledged": len(want),
        "writes_done_s": round(writes_done, 3),
        "all_delivered_s": round(max(delivered), 3) if delivered else None,
        "median_watcher_delivered_s": round(statistics.median(delivered), 3) if delivered else None,
        "lag_after_last_write_s": round(max(0.0, max(delivered) - writes_done), 3)
        if delivered
        else None,
        "wall_s": round(all_done, 3),
        "lossless": lossless,
        "per_watcher": per_watcher,
    }


# ---------------------------------------------------------------------------------------------
# The run


async def configmap_server(
    args: argparse.Namespace, server: ApiServerProcess, end: float
) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_idle": server.rss_mb()}
    async with server.session(args.concurrency) as session:
        for ns in ("bench-warm", "bench-cm", "bench-watch"):
            await create_namespace(session, ns)
        cm_path = collection("v1", "bench-cm", "configmaps")
        await create_many(  # warm-up: imports, connections, caches
            session,
            server,
            collection("v1", "bench-warm", "configmaps"),
            configmap,
            prefix="warm",
            count=300,
            concurrency=args.concurrency,
            deadline=end,
        )
        print(f"create {args.configmaps} ConfigMaps, {args.concurrency} in flight ...", flush=True)
        share = time.perf_counter() + 0.3 * (end - time.perf_counter())
        out["create_configmaps"] = cm = await create_many(
            session,
            server,
            cm_path,
            configmap,
            prefix="cm",
            count=args.configmaps,
            concurrency=args.concurrency,
            deadline=share,
        )
        print(f"  {write_summary(cm)}", flush=True)
        out["rss_after_configmaps"] = server.rss_mb()
        print(f"list with a label selector over {cm['completed']} ConfigMaps ...", flush=True)
        out["list_label_selector"] = ls = await list_phase(
            session, server, "bench-cm", cm["completed"], args.runs
        )
        print(
            f"  median {ls['median_ms']} ms (min {ls['min_ms']}, max {ls['max_ms']}), "
            f"{ls['matched_per_run']} matched; set-based {ls['set_based_median_ms']} ms; "
            f"unfiltered {ls['objects_in_namespace']} objects {ls['unfiltered_list_ms']} ms",
            flush=True,
        )
        print(f"{args.watchers} watchers, a burst of {args.burst} writes ...", flush=True)
        share = time.perf_counter() + 0.3 * (end - time.perf_counter())
        out["watch"] = w = await watch_phase(
            session,
            server,
            "bench-watch",
            args.watchers,
            args.burst,
            args.concurrency,
            share,
        )
        print(
            f"  writes {w['burst_writes']['writes_per_s']}/s with watchers attached; all "
            f"{w['writes_acknowledged']} events to all {w['watchers']} watchers in "
            f"{w['all_delivered_s']} s (lag after the last write {w['lag_after_last_write_s']} "
            f"s); lossless: {w['lossless']}",
            flush=True,
        )
    out["rss_end"] = server.rss_mb()
    return out


async def trainjob_server(
    args: argparse.Namespace, server: ApiServerProcess, end: float
) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_idle": server.rss_mb()}
    async with server.session(args.concurrency) as session:
        for ns in ("bench-warm", "bench-tj"):
            await create_namespace(session, ns)
        make = trainjob_factory()
        await create_many(
            session,
            server,
            collection("trainer.kubeflow.org/v1alpha1", "bench-warm", "trainjobs"),
            make,
            prefix="warm",
            count=100,
            concurrency=args.concurrency,
            deadline=end,
        )
        # The warm-up objects are deleted so that exactly --trainjobs TrainJobs are stored.
        warm = collection("trainer.kubeflow.org/v1alpha1", "bench-warm", "trainjobs")
        async with session.delete(warm) as resp:
            await resp.read()
        print(f"create {args.trainjobs} TrainJobs, {args.concurrency} in flight ...", flush=True)
        out["create_trainjobs"] = tj = await create_many(
            session,
            server,
            collection("trainer.kubeflow.org/v1alpha1", "bench-tj", "trainjobs"),
            make,
            prefix="tj",
            count=args.trainjobs,
            concurrency=args.concurrency,
            deadline=end,
        )
        print(f"  {write_summary(tj)}", flush=True)
        # Counted with limit=1 (remainingItemCount) so the server does not serialize them all
        # before its RSS is read.
        path = collection("trainer.kubeflow.org/v1alpha1", "bench-tj", "trainjobs")
        _, page = await timed_list(session, f"{path}?limit=1")
        out["trainjobs_stored"] = len(page["items"]) + page["metadata"].get("remainingItemCount", 0)
        out["stored_trainjob_bytes"] = len(json.dumps(page["items"][0])) if page["items"] else 0
    await asyncio.sleep(0.5)  # let the server settle (nothing in flight)
    out["rss_with_trainjobs"] = rss = server.rss_mb()
    print(
        f"  server RSS with {out['trainjobs_stored']} TrainJobs: {rss['VmRSS_mb']} MB "
        f"(idle {out['rss_idle']['VmRSS_mb']} MB, peak {rss['VmHWM_mb']} MB)",
        flush=True,
    )
    return out


def write_summary(r: dict[str, Any]) -> str:
    return (
        f"{r['completed']} in {r['seconds']} s: {r['writes_per_s']} writes/s, p50 {r['p50_ms']} "
        f"ms, p99 {r['p99_ms']} ms, errors {r['errors'] or 0}, server CPU "
        f"{r['server_cpu_utilisation']} ({r['server_cpu_ms_per_write']} ms/write), client CPU "
        f"{r['client_cpu_utilisation']}"
        + (" (STOPPED EARLY: budget)" if r["stopped_early"] else "")
    )


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    end = started + args.budget
    cpus = sorted(os.sched_getaffinity(0))
    busy = cpu_busy(cpus)
    # The server gets the idler CPU (other work on the machine may be pinned to one).
    ranked = sorted(cpus, key=lambda c: busy.get(c, 0.0))
    server_cpu = ranked[0] if len(cpus) >= 2 else None
    client_cpu = ranked[1] if len(cpus) >= 2 else None
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    report: dict[str, Any] = {
        "benchmark": "apiserver",
        "python": sys.version.split()[0],
        "aiohttp": aiohttp.__version__,
        "machine": platform.machine(),
        "cpus": len(cpus),
        # Other work on the machine slows the wall-clock figures (not the CPU-per-write ones).
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "cpu_busy_before_start": busy,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "transport": "HTTP/1.1 keep-alive on 127.0.0.1, aiohttp client, JSON",
        "server": "python -m trainer.cli.main apiserver --port 0 (CRDs installed)"
        + (f" --state-file {args.state_file}" if args.state_file else ""),
    }
    with tempfile.TemporaryDirectory(prefix="apiserver-bench-") as tmp:
        profile = args.profile
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
        state: Path | None = args.state_file
        server = ApiServerProcess.start(
            Path(tmp), server_cpu, profile=profile and profile / "configmaps.prof", state_file=state
        )
        try:
            report["configmaps"] = await configmap_server(args, server, end)
        finally:
            server.stop()
        server = ApiServerProcess.start(
            Path(tmp),
            server_cpu,
            profile=profile and profile / "trainjobs.prof",
            state_file=state and state.with_name(state.name + ".trainjobs"),
        )
        try:
            report["trainjobs"] = await trainjob_server(args, server, end)
        finally:
            server.stop()
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["peak_rss_client_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cm = report["configmaps"]
    tj = report["trainjobs"]
    writes = cm["create_configmaps"]["writes_per_s"]
    list_ms = cm["list_label_selector"]["median_ms"]
    rss = tj["rss_with_trainjobs"]["VmRSS_mb"]
    report["targets"] = {
        "configmap_writes_per_s_min": TARGET_WRITES_PER_S,
        "configmap_writes_per_s": writes,
        "configmap_writes_met": writes >= TARGET_WRITES_PER_S,
        "trainjob_creates_per_s": tj["create_trainjobs"]["writes_per_s"],
        "list_selector_ms_max": TARGET_LIST_MS,
        "list_selector_median_ms": list_ms,
        "list_selector_over_objects": cm["create_configmaps"]["completed"],
        "list_selector_met": list_ms < TARGET_LIST_MS,
        "watch_lossless": cm["watch"]["lossless"],
        "watch_all_delivered_s": cm["watch"]["all_delivered_s"],
        "rss_mb_max": TARGET_RSS_MB,
        "rss_mb_with_trainjobs": rss,
        "trainjobs_stored": tj["trainjobs_stored"],
        "rss_met": rss < TARGET_RSS_MB and tj["trainjobs_stored"] >= args.trainjobs,
    }
    return report


def state_files(path: Path) -> list[Path]:
    """The state files a run with ``--state-file PATH`` writes."""
    return [path, path.with_name(path.name + ".trainjobs")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--trainjobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument("--runs", type=int, default=9, help="label-selector list runs")
    parser.add_argument("--watchers", type=int, default=10)
    parser.add_argument("--burst", type=int, default=5_000, help="writes during the watch")
    parser.add_argument("--budget", type=float, default=170.0, help="seconds for the whole run")
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/apiserver.json")
    parser.add_argument(
        "--profile",
        type=Path,
        help="run each server under cProfile, writing DIR/configmaps.prof and DIR/trainjobs.prof",
    )
    parser.add_argument(
        "--state-file",
        type=Path,
        help="run the servers with persistence on: the ConfigMap server keeps its objects in "
        "PATH, the TrainJob server in PATH.trainjobs (neither may exist; both are removed "
        "after the run); put PATH on the disk whose durability you want measured",
    )
    args = parser.parse_args()
    if args.state_file is not None:
        for path in state_files(args.state_file):
            if path.exists():
                parser.error(f"--state-file: {path} exists (the run starts from an empty file)")
    try:
        report = asyncio.run(bench(args))
    finally:
        if args.state_file is not None:
            for path in state_files(args.state_file):
                for leftover in (path, *path.parent.glob(path.name + "-*"), Path(f"{path}.lock")):
                    leftover.unlink(missing_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    t = report["targets"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(
        f"ConfigMap writes/s {t['configmap_writes_per_s']} "
        f"({verdict(t['configmap_writes_met'])} >= {TARGET_WRITES_PER_S:.0f}); "
        f"TrainJob creates/s {t['trainjob_creates_per_s']}; "
        f"selector list {t['list_selector_median_ms']} ms over "
        f"{t['list_selector_over_objects']} "
        f"({verdict(t['list_selector_met'])} < {TARGET_LIST_MS:.0f}); "
        f"watch lossless {t['watch_lossless']} in {t['watch_all_delivered_s']} s; "
        f"RSS with {t['trainjobs_stored']} TrainJobs {t['rss_mb_with_trainjobs']} MB "
        f"({verdict(t['rss_met'])} < {TARGET_RSS_MB:.0f}); wall {report['wall_s']} s"
    )
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
