"""The load of the API server benchmark (hack/bench/apiserver.py): the objects it writes
(ConfigMaps with varied labels, TrainJobs like examples/multi-node.yaml), how it writes them
(a closed loop of creates with a bounded number in flight) and the CPU the server and the
client used meanwhile.

Held apart from the phases that use it (create, list, watch, TrainJobs) so that what is
measured and how the load is made read separately.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import yaml
from benchlib import JSON_HEADERS, ROOT, ApiServerProcess, percentiles

TRAINJOB_EXAMPLE = ROOT / "examples" / "multi-node.yaml"
APPS = 100  # distinct values of the "app" label: one selects 1% of the ConfigMaps
TIERS = ("web", "batch", "cache", "db", "queue")


# ---------------------------------------------------------------------------------------------
# Measuring the server process


class CPUMeter:
    """Server and client CPU utilisation (CPU seconds per wall second) over a phase."""

    def __init__(self, server: ApiServerProcess) -> None:
        self.server = server
        self.wall = time.perf_counter()
        self.client = time.process_time()
        self.srv = server.cpu_seconds()

    def result(self) -> dict[str, float]:
        wall = max(time.perf_counter() - self.wall, 1e-9)
        server_cpu = self.server.cpu_seconds() - self.srv
        return {
            "server_cpu_s": round(server_cpu, 3),
            "server_cpu_utilisation": round(server_cpu / wall, 3),
            "client_cpu_utilisation": round((time.process_time() - self.client) / wall, 3),
        }


# ---------------------------------------------------------------------------------------------
# Objects


def configmap(name: str, i: int) -> dict[str, Any]:
    """A small ConfigMap with three labels: app (100 values), tier (5) and shard (7)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {
                "app": f"app-{i % APPS}",
                "tier": TIERS[i % len(TIERS)],
                "shard": str(i % 7),
            },
        },
        "data": {"index": str(i), "mode": "bench"},
    }


def trainjob_factory() -> Callable[[str, int], dict[str, Any]]:
    """TrainJobs like examples/multi-node.yaml with the given name."""
    template = json.dumps(yaml.safe_load(TRAINJOB_EXAMPLE.read_text()))

    def make(name: str, _i: int) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(template)
        obj["metadata"]["name"] = name
        return obj

    return make


def collection(group_version: str, namespace: str, plural: str) -> str:
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


# ---------------------------------------------------------------------------------------------
# Load


async def create_namespace(session: aiohttp.ClientSession, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    async with session.post("/api/v1/namespaces", json=body) as resp:
        if resp.status not in (201, 409):
            raise RuntimeError(f"creating namespace {name}: HTTP {resp.status}")


async def create_many(
    session: aiohttp.ClientSession,
    server: ApiServerProcess,
    path: str,
    make: Callable[[str, int], dict[str, Any]],
    *,
    prefix: str,
    count: int,
    concurrency: int,
    deadline: float,
    rvs: list[int] | None = None,
) -> dict[str, Any]:
    """Create ``count`` objects named ``prefix-NNNNN`` with ``concurrency`` requests in flight
    (a closed loop: each worker sends its next create when the last one returns). Bodies are
    encoded before the clock starts. Stops early at ``deadline`` (perf_counter)."""
    bodies = [json.dumps(make(f"{prefix}-{i:05d}", i)).encode() for i in range(count)]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    next_index = 0
    meter = CPUMeter(server)
    start = time.perf_counter()

    async def worker() -> None:
        nonlocal next_index
        while next_index < count and time.perf_counter() < deadline:
            body = bodies[next_index]
            next_index += 1
            sent = time.perf_counter()
            async with session.post(path, data=body, headers=JSON_HEADERS) as resp:
                payload = await resp.read()
                status = resp.status
            latencies.append(time.perf_counter() - sent)
            if status != 201:
                errors[str(status)] = errors.get(str(status), 0) + 1
            elif rvs is not None:
                rvs.append(int(json.loads(payload)["metadata"]["resourceVersion"]))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    done = len(latencies)
    cpu = meter.result()
    return {
        "requested": count,
        "completed": done,
        "stopped_early": done < count,
        "errors": errors,
        "concurrency": concurrency,
        "request_bytes": len(bodies[0]) if bodies else 0,
        "seconds": round(elapsed, 3),
        "writes_per_s": round(done / elapsed, 1) if elapsed > 0 else 0.0,
        **percentiles(latencies),
        **cpu,
        # Server CPU per write: what the server would sustain on a whole core, and a figure
        # that other load on the machine does not move (wall-clock rates are noisier).
        "server_cpu_ms_per_write": round(cpu["server_cpu_s"] * 1000 / done, 3) if done else None,
    }
