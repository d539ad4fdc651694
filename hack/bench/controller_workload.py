"""The workload of the controller benchmark (hack/bench/controller.py): which TrainJob, in which
namespaces, created how, and how the result is checked on the server.

Shared by the driver's phases (:mod:`controller_phases`) and the bare writer child
(:mod:`controller_roles`), which must render exactly the TrainJobs the driver creates.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from benchlib import JSON_HEADERS, ROOT, list_all

from trainer.api import constants as c
from trainer.runtime.builtin import builtin_runtime_documents
from trainer.runtime.info import SSHKeyPair

TRAINJOB_EXAMPLE: Path = ROOT / "examples" / "multi-node.yaml"
RUNTIME = "torch-distributed"
NUM_NODES = 2
NAMESPACE = "bench"
WARM_NAMESPACE = "bench-warm"
WARM_JOBS = 20
UID_PLACEHOLDER = "00000000-0000-0000-0000-000000000000"
TRAINJOBS_PATH = f"/apis/{c.GROUP}/v1alpha1/namespaces/{{ns}}/trainjobs"
KEYS = SSHKeyPair(b"-----BEGIN EC PRIVATE KEY-----\n-----END EC PRIVATE KEY-----\n", b"k")


def trainjob_template() -> dict[str, Any]:
    """examples/multi-node.yaml with numNodes 2 (torch-distributed), name and namespace unset."""
    obj: dict[str, Any] = yaml.safe_load(TRAINJOB_EXAMPLE.read_text())
    assert obj["spec"]["runtimeRef"]["name"] == RUNTIME
    obj["spec"]["trainer"]["numNodes"] = NUM_NODES
    obj["metadata"] = {}
    return obj


def trainjob_body(template: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(json.dumps(template))
    obj["metadata"] = {"name": name, "namespace": namespace}
    return obj


def job_names(prefix: str, start: int, stop: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(start, stop)]


async def prepare_server(session: aiohttp.ClientSession) -> None:
    """Namespaces and the built-in ClusterTrainingRuntimes."""
    for ns in (NAMESPACE, WARM_NAMESPACE):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        async with session.post("/api/v1/namespaces", json=body) as resp:
            if resp.status not in (201, 409):
                raise RuntimeError(f"creating namespace {ns}: HTTP {resp.status}")
    path = f"/apis/{c.GROUP}/v1alpha1/clustertrainingruntimes"
    for doc in builtin_runtime_documents():
        async with session.post(path, json=doc, headers=JSON_HEADERS) as resp:
            if resp.status not in (201, 409):
                raise RuntimeError(f"creating a built-in runtime: HTTP {resp.status}")


@dataclass
class Creates:
    """The outcome of one burst of creates (times are time.monotonic())."""

    started: float = 0.0
    finished: float = 0.0
    done: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        secs = self.finished - self.started
        return {
            "created": self.done,
            "errors": self.errors,
            "seconds": round(secs, 3),
            "creates_per_s": round(self.done / secs, 1) if secs > 0 else None,
        }


async def create_trainjobs(
    session: aiohttp.ClientSession,
    namespace: str,
    names: list[str],
    template: dict[str, Any],
    concurrency: int,
    on_created: Callable[[str, str], Awaitable[None]] | None = None,
) -> Creates:
    """POST the TrainJobs, ``concurrency`` in flight (bodies encoded before the clock starts);
    ``on_created(name, uid)`` after each success."""
    bodies = [json.dumps(trainjob_body(template, namespace, n)).encode() for n in names]
    path = TRAINJOBS_PATH.format(ns=namespace)
    out = Creates(started=time.monotonic())
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(names):
            i = next_index
            next_index += 1
            async with session.post(path, data=bodies[i], headers=JSON_HEADERS) as resp:
                payload = await resp.read()
                status = resp.status
            if status != 201:
                out.errors[str(status)] = out.errors.get(str(status), 0) + 1
                continue
            out.done += 1
            if on_created is not None:
                await on_created(names[i], str(json.loads(payload)["metadata"]["uid"]))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out.finished = time.monotonic()
    return out


async def verify(
    session: aiohttp.ClientSession, namespace: str, names: list[str]
) -> dict[str, int]:
    """From the server: how many of ``names`` have a JobSet of their name (complete) and a
    status (none where no JobSet controller runs: the controller's first status write waits for
    the JobSet's)."""
    jobs = await list_all(session, TRAINJOBS_PATH.format(ns=namespace))
    jobsets = await list_all(
        session, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    )
    with_status = {j["metadata"]["name"] for j in jobs if j.get("status")}
    with_jobset = {j["metadata"]["name"] for j in jobsets}
    wanted = set(names)
    return {
        "trainjobs": len(wanted & {j["metadata"]["name"] for j in jobs}),
        "with_status": len(wanted & with_status),
        "with_jobset": len(wanted & with_jobset),
        "complete": len(wanted & with_jobset),
    }
