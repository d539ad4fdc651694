"""What the benchmark scripts share: process and machine CPU and memory from /proc, and
latency percentiles. Imported by the scripts in this directory (``python hack/bench/X.py``
puts it on the path)."""

from __future__ import annotations

import base64
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path

import yaml


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
