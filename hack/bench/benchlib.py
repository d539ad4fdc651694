"""What the benchmark scripts share: process and machine CPU and memory from /proc, latency
percentiles, starting and stopping child processes pinned to a CPU, the state of the checkout
measured, and reading the API server over HTTP. Imported by the scripts in this directory
(``python hack/bench/X.py`` puts it on the path)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[2]


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads) in seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) of ``pid`` in MB (10^6 bytes)."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[f"{key}_mb"] = round(int(value.split()[0]) * 1024 / 1e6, 1)
    return out


def cpu_busy(cpus: list[int], seconds: float = 0.5) -> dict[int, float]:
    """Each CPU's busy fraction over ``seconds`` (from /proc/stat; idle includes iowait)."""

    def sample() -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                name, *ticks = line.split()
                if name.startswith("cpu") and name != "cpu" and int(name[3:]) in cpus:
                    values = [int(t) for t in ticks]
                    out[int(name[3:])] = (sum(values), values[3] + values[4])
        return out

    before = sample()
    time.sleep(seconds)
    after = sample()
    busy = {}
    for cpu, (total, idle) in after.items():
        d_total, d_idle = total - before[cpu][0], idle - before[cpu][1]
        busy[cpu] = round(1 - d_idle / d_total, 3) if d_total else 0.0
    return busy


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p90/p99/max of durations in seconds, as milliseconds."""
    if not samples:
        return {}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {
        "p50_ms": at(0.50),
        "p90_ms": at(0.90),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


@dataclass(frozen=True)
class APIAccess:
    """How to reach the API server a kubeconfig names: its HTTPS URL, an SSL context trusting
    its CA (``certificate-authority-data``) and the ``Authorization`` header of its token."""

    url: str
    ssl: ssl.SSLContext
    headers: dict[str, str]


def kubeconfig_access(path: Path) -> APIAccess:
    """The access the current context of the kubeconfig at ``path`` gives (``trainer
    apiserver`` writes one with the CA and a bearer token)."""
    config = yaml.safe_load(path.read_text())
    context = next(
        c["context"] for c in config["contexts"] if c["name"] == config["current-context"]
    )
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    token = user["token"]
    return APIAccess(
        str(cluster["server"]),
        ssl.create_default_context(cadata=ca),
        {"Authorization": f"Bearer {token}"},
    )


# --- processes and the machine (shared by the benchmarks that start their own processes) --------
def machine_busy_seconds() -> float:
    """CPU seconds all CPUs spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


class OtherLoad:
    """CPU time the rest of the machine (not ``pids``, not this driver) used over a phase:
    other work slows the wall-clock figures, and this says how much there was."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.start = time.monotonic()
        self.busy = machine_busy_seconds()
        self.own = self._own()

    def _own(self) -> float:
        me = os.times()
        return me.user + me.system + sum(proc_cpu_seconds(p) for p in self.pids)

    def result(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.start, 1e-9)
        other = (machine_busy_seconds() - self.busy) - (self._own() - self.own)
        return {
            "other_processes_cpu_s": round(max(0.0, other), 2),
            "other_processes_cpu_utilisation": round(max(0.0, other) / wall, 3),
        }


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Run the block (a process spawn: the child inherits the affinity) on ``cpu``."""
    mine = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def child_env() -> dict[str, str]:
    """This environment with the repository on PYTHONPATH (a child runs this checkout)."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s (only ``proc``, which this driver started)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def wait_file(path: Path, timeout: float) -> None:
    """Wait until ``path`` exists (a child writes it once ready)."""
    end = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > end:
            raise RuntimeError(f"{path} did not appear within {timeout:g} s")
        time.sleep(0.05)


def source_state() -> dict[str, Any]:
    """The commit measured and the product files that differed from it (read-only git)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "trainer", "webhooks"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"commit": commit, "uncommitted_product_files": [ln for ln in status.splitlines() if ln]}


def median(values: list[float]) -> float:
    """The median, as a float."""
    return float(statistics.median(values))


# --- the API server over HTTP ---------------------------------------------------------------------
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def session_for(access: APIAccess, limit: int) -> aiohttp.ClientSession:
    """A session to the API server ``access`` names, ``limit`` connections at most."""
    return aiohttp.ClientSession(
        base_url=access.url,
        headers=access.headers,
        connector=aiohttp.TCPConnector(limit=limit, ssl=access.ssl),
        timeout=aiohttp.ClientTimeout(total=120),
    )


async def list_all(session: aiohttp.ClientSession, path: str) -> list[dict[str, Any]]:
    """Every object of a collection, 500 a page."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query = {"limit": "500", **({"continue": token} if token else {})}
        async with session.get(path, params=query, headers=JSON_HEADERS) as resp:
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}")
            page = json.loads(await resp.read())
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


async def count_objects(session: aiohttp.ClientSession, path: str) -> int:
    """Objects in a collection (limit=1 and remainingItemCount: nothing big is serialized)."""
    async with session.get(path, params={"limit": "1"}, headers=JSON_HEADERS) as resp:
        page = json.loads(await resp.read())
    return len(page.get("items") or []) + int(
        (page.get("metadata") or {}).get("remainingItemCount") or 0
    )


# --- the API server process -----------------------------------------------------------------------
class ApiServerProcess:
    """``trainer apiserver`` in a subprocess on ``cpu``; its URL, CA and token come from the
    kubeconfig it writes (atomically, once serving)."""

    def __init__(self, proc: subprocess.Popen[bytes], access: APIAccess, kubeconfig: Path) -> None:
        self.proc = proc
        self.access = access
        self.url = access.url
        self.kubeconfig = kubeconfig

    @classmethod
    def start(
        cls,
        workdir: Path,
        cpu: int | None,
        *,
        profile: Path | None = None,
        state_file: Path | None = None,
        timeout: float = 60.0,
    ) -> ApiServerProcess:
        """Start the server (under cProfile, writing ``profile`` on exit, when given; keeping
        its objects in ``state_file`` when given)."""
        kubeconfig = workdir / f"kubeconfig-{time.monotonic_ns()}"
        cmd = [sys.executable]
        if profile is not None:
            cmd += ["-m", "cProfile", "-o", str(profile)]
        cmd += ["-m", "trainer.cli.main", "apiserver", "--port", "0"]
        cmd += ["--kubeconfig", str(kubeconfig)]
        if state_file is not None:
            cmd += ["--state-file", str(state_file)]
        with pinned(cpu):  # the child (and all its threads) inherit the affinity
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=child_env(),
            )
        deadline = time.monotonic() + timeout
        while not kubeconfig.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the API server did not start (exit {proc.poll()})")
            time.sleep(0.05)
        return cls(proc, kubeconfig_access(kubeconfig), kubeconfig)

    def session(self, limit: int, **kw: Any) -> aiohttp.ClientSession:
        """A keep-alive HTTPS session to the server (``limit`` connections) with its token."""
        return aiohttp.ClientSession(
            base_url=self.url,
            connector=aiohttp.TCPConnector(limit=limit, ssl=self.access.ssl),
            headers=self.access.headers,
            **kw,
        )

    def stop(self) -> None:
        stop_process(self.proc)

    def rss_mb(self) -> dict[str, float]:
        """VmRSS (now) and VmHWM (peak), in MB (10^6 bytes)."""
        return proc_rss_mb(self.proc.pid)

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.proc.pid)
