"""Benchmark ``trainer dashboard`` with 1,000 TrainJobs in one namespace.

The API server is the real one (``trainer apiserver``, pinned to one CPU); ``--trainjobs``
(1,000) TrainJobs shaped like examples/multi-node.yaml are created in namespace ``bench`` and
each gets a ``status.trainerStatus`` (progress, ETA, two metrics) and ``state: Running``, so
every row has a progress bar. Then ``trainer dashboard -n bench`` starts in its own process
(pinned to the other CPU) and this script measures:

1. the dashboard process's memory once its watches hold every TrainJob (VmRSS, and VmHWM, the
   peak), and again after the page loads below;
2. the TrainJobs page over HTTP: the HTML (a skeleton: the page draws its rows from its event
   stream's first message) and ``/api/trainjobs``, median and worst of ``--runs`` (10) loads;
3. the page in headless Chromium (when /usr/bin/chromium and Playwright are installed): from
   navigation to every row drawn in the table, median and worst of ``--runs`` loads, as this
   script sees it and as the page's own clock does (``performance`` marks relative to the
   navigation's start: ``trainjobs-drawn`` once the rows are in the page,
   ``trainjobs-painted`` once the frame showing them was produced);
4. a live update: one TrainJob's ``trainerStatus`` patched, until its row arrives on the
   page's event stream.

Targets (docs/dashboard.md, "Footprint"): a page load under 1 s; under 100 MB RSS holding
1,000 TrainJobs.
Timing moves with the machine's load: compare runs made on the same quiet machine.
Writes hack/bench/reports/dashboard.json.

    python hack/bench/dashboard.py [--trainjobs 1000] [--runs 10] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from apiserver_load import collection, create_many, create_namespace, trainjob_factory
from benchlib import (
    ROOT,
    ApiServerProcess,
    child_env,
    pinned,
    proc_rss_mb,
    source_state,
    stop_process,
)

TARGET_PAGE_S = 1.0
TARGET_RSS_MB = 100.0
CHROMIUM = "/usr/bin/chromium"
NAMESPACE = "bench"


def status_patch(i: int, progress: int) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "state": "Running",
            "trainerStatus": {
                "progressPercentage": progress,
                "estimatedRemainingSeconds": 100 - progress,
                "metrics": [
                    {"name": "loss", "value": f"{1.0 / (1 + i % 50):.4f}"},
                    {"name": "accuracy", "value": f"{(i % 100) / 100:.2f}"},
                ],
                "lastUpdatedTime": now,
            },
        }
    }


async def patch_status(session: aiohttp.ClientSession, name: str, body: dict[str, Any]) -> None:
    path = collection("trainer.kubeflow.org/v1alpha1", NAMESPACE, "trainjobs") + f"/{name}/status"
    headers = {"Content-Type": "application/merge-patch+json"}
    async with session.patch(path, data=json.dumps(body), headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"status of {name}: HTTP {resp.status}: {await resp.text()}")


async def fill(server: ApiServerProcess, count: int) -> dict[str, Any]:
    path = collection("trainer.kubeflow.org/v1alpha1", NAMESPACE, "trainjobs")
    async with server.session(16) as session:
        await create_namespace(session, NAMESPACE)
        created = await create_many(
            session,
            server,
            path,
            trainjob_factory(),
            prefix="job",
            count=count,
            concurrency=16,
            deadline=time.perf_counter() + 120,
        )
        names = [f"job-{i:05d}" for i in range(count)]
        for start in range(0, count, 16):
            await asyncio.gather(
                *(
                    patch_status(session, n, status_patch(i, (i * 7) % 100))
                    for i, n in enumerate(names[start : start + 16], start)
                )
            )
    return {"created": count, "create_writes_per_s": created.get("writes_per_s")}


def start_dashboard(kubeconfig: Path, cpu: int | None) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "trainer.cli.main", "dashboard", "--kubeconfig", str(kubeconfig)]
    with pinned(cpu):
        proc = subprocess.Popen(
            [*cmd, "-n", NAMESPACE],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env(),
        )
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"dashboard: (http://\S+)", line)
        if found:
            return proc, found.group(1)
    raise RuntimeError(f"the dashboard did not start (exit {proc.wait()})")


def timings(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(samples), 4),
        "max_s": round(max(samples), 4),
    }


async def http_loads(base: str, token: str, runs: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession(headers=headers) as session:
        for name, path in (("page_html", "/"), ("api_trainjobs", "/api/trainjobs")):
            samples = []
            size = 0
            for _ in range(runs):
                started = time.perf_counter()
                async with session.get(base + path) as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"GET {path}: HTTP {resp.status}")
                samples.append(time.perf_counter() - started)
                size = len(body)
            out[name] = {**timings(samples), "bytes": size}
    return out


def browser_loads(url: str, base: str, count: int, runs: int) -> dict[str, Any]:
    if not os.access(CHROMIUM, os.X_OK):
        return {"skipped": f"{CHROMIUM} is not installed"}
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415 (optional)
    except ImportError:
        return {"skipped": "playwright is not installed"}
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    args += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    samples: list[float] = []
    drawn_at: list[float] = []
    painted_at: list[float] = []
    marks = (
        "() => ['trainjobs-drawn', 'trainjobs-painted']"
        ".map((m) => performance.getEntriesByName(m)[0].startTime / 1000)"
    )
    painted = "() => performance.getEntriesByName('trainjobs-painted').length === 1"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
        page = browser.new_page()
        page.goto(url)  # the token becomes the session cookie
        drawn = f"() => document.querySelectorAll('#trainjobs tbody tr').length === {count}"
        for _ in range(runs):
            started = time.perf_counter()
            page.goto(base + "/")
            page.wait_for_function(drawn, timeout=30_000)
            samples.append(time.perf_counter() - started)
            page.wait_for_function(painted, timeout=30_000)
            drawn_ms, painted_ms = page.evaluate(marks)
            drawn_at.append(float(drawn_ms))
            painted_at.append(float(painted_ms))
        browser.close()
    return {
        **timings(samples),
        "navigation_to_rows_drawn": timings(drawn_at),
        "navigation_to_rows_painted": timings(painted_at),
    }


async def live_update(server: ApiServerProcess, base: str, token: str) -> dict[str, Any]:
    """Patch one TrainJob's progress; time until its row arrives on the event stream."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(headers=headers, timeout=timeout) as dash,
        dash.get(base + "/api/stream") as stream,
    ):
        await stream.content.readline()  # the snapshot's "event:" line
        await stream.content.readline()  # its data
        async with server.session(1) as api:
            started = time.perf_counter()
            await patch_status(api, "job-00000", status_patch(0, 99))
        async for line in stream.content:
            if line.startswith(b"data:") and b'"progress":99.0' in line:
                return {"seconds": round(time.perf_counter() - started, 4)}
    raise RuntimeError("the update never arrived")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trainjobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/dashboard.json")
    opts = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, dash_cpu = (cpus[0], cpus[1]) if len(cpus) > 1 else (None, None)
    report: dict[str, Any] = {
        "machine": {"cpus": len(cpus), "python": platform.python_version()},
        "source": source_state(),
        "trainjobs": opts.trainjobs,
        "targets": {"page_load_s": TARGET_PAGE_S, "rss_mb": TARGET_RSS_MB},
    }
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        server = ApiServerProcess.start(Path(tmp), server_cpu)
        proc = None
        try:
            report["fill"] = asyncio.run(fill(server, opts.trainjobs))
            started = time.perf_counter()
            proc, url = start_dashboard(server.kubeconfig, dash_cpu)
            report["dashboard_start_s"] = round(time.perf_counter() - started, 3)
            base, token = url.split("/?token=")
            report["rss_after_sync"] = proc_rss_mb(proc.pid)
            report["http"] = asyncio.run(http_loads(base, token, opts.runs))
            report["browser"] = browser_loads(url, base, opts.trainjobs, opts.runs)
            report["live_update"] = asyncio.run(live_update(server, base, token))
            report["rss_after_loads"] = proc_rss_mb(proc.pid)
        finally:
            if proc is not None:
                stop_process(proc)  # type: ignore[arg-type]
            server.stop()
    # A page load: navigation start to every row on the screen, on the browser's own clock
    # (the script's own figure adds Playwright's polling); the HTML alone without a browser.
    drawn = report["browser"].get("navigation_to_rows_painted", {})
    worst_page = max(report["http"]["page_html"]["median_s"], drawn.get("median_s", 0.0))
    rss = report["rss_after_loads"]["VmRSS_mb"]
    report["verdict"] = {
        "page_load_ok": worst_page < TARGET_PAGE_S,
        "rss_ok": rss < TARGET_RSS_MB,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
