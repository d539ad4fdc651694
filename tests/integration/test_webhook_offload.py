"""Reviews in worker processes (webhooks.offload) decide exactly what inline reviews decide, and
a worker that dies or runs too long fails only its own review.

Every review here is sent to two apps in-process (ASGI): one deciding inline, one sending every
review to a worker (``inline_max_bytes=0``). Counts: 9 reviews compared on both, 1 review whose
cluster view cannot be read, 1 worker killed mid-review, 1 review past its time limit, 3
reviews after those.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import builders as b
from tests.asgi import asgi_request
from trainer.api.load import parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime
from trainer.jobset.types import JobSet
from webhooks.app import (
    PATH_MUTATE_TRAINJOB,
    PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINJOB,
    create_app,
)
from webhooks.lookup import StaticLookup
from webhooks.offload import Offload
from webhooks.review import Answer, Needs

NOW = "2026-11-22T10:00:00Z"
GROUP_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME = Path(__file__).resolve().parents[2] / "runtimes/torch-distributed.yaml"


def runtime() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(RUNTIME.read_text())
    return data


def lookup() -> StaticLookup:
    parsed = parse_object(runtime())
    assert isinstance(parsed, ClusterTrainingRuntime)
    active = JobSet.from_wire(
        {
            "metadata": {"name": "job", "namespace": "team"},
            "spec": {
                "replicatedJobs": [
                    {"name": "node", "replicas": 1, "template": {"spec": {"template": {}}}}
                ]
            },
            "status": {
                "replicatedJobsStatus": [
                    {
                        "name": "node",
                        "active": 1,
                        "ready": 1,
                        "succeeded": 0,
                        "failed": 0,
                        "suspended": 0,
                    }
                ]
            },
        }
    )
    return StaticLookup(runtimes=[parsed], jobsets=[active])


def trainjob(env: int = 2, **spec: Any) -> dict[str, Any]:
    """TrainJob ``team/job`` whose trainer sets ``env`` variables; ``spec`` entries replace."""
    trainer = {"env": [{"name": f"E{i}", "value": "v"} for i in range(env)]}
    return b.trainjob(namespace="team", **{"trainer": trainer, **spec})


def review(obj: Any, operation: str = "CREATE", old: Any = None, uid: str = "uid-1") -> bytes:
    request: dict[str, Any] = {
        "uid": uid,
        "operation": operation,
        "namespace": "team",
        "name": "job",
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


patch = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}}
CASES = [
    ("allowed", PATH_VALIDATE_TRAINJOB, review(trainjob())),
    ("denied", PATH_VALIDATE_TRAINJOB, review(trainjob(trainer={"numNodes": -1}))),
    ("missing runtime", PATH_VALIDATE_TRAINJOB, review(trainjob(runtimeRef={"name": "nope"}))),
    (
        # The JobSet has an active job: a changed patch list is refused (read from its status).
        "update, active JobSet",
        PATH_VALIDATE_TRAINJOB,
        review(trainjob(suspend=True, runtimePatches=[patch]), "UPDATE", trainjob(suspend=True)),
    ),
    ("stamped", PATH_MUTATE_TRAINJOB, review(trainjob(runtimePatches=[patch]))),
    ("runtime", PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME, review(runtime())),
    ("not JSON", PATH_VALIDATE_TRAINJOB, b"{nope"),
    ("no uid", PATH_VALIDATE_TRAINJOB, b'{"apiVersion":"admission.k8s.io/v1"}'),
    ("bad operation", PATH_MUTATE_TRAINJOB, review(trainjob(), operation="PATCH")),
]


@pytest.fixture
async def offload() -> AsyncIterator[Offload]:
    pool = Offload(inline_max_bytes=0)
    try:
        yield pool
    finally:
        await pool.close()


async def test_workers_decide_what_the_loop_decides(offload: Offload) -> None:
    inline = create_app(lookup(), now=lambda: NOW, offload=Offload(inline_max_bytes=1 << 40))
    workers = create_app(lookup(), now=lambda: NOW, offload=offload)
    for name, path, body in CASES:
        here = await asgi_request(inline, "POST", path, body)
        there = await asgi_request(workers, "POST", path, body)
        assert (there.status, there.json()) == (here.status, here.json()), name
    assert offload.processes, "the reviews ran in worker processes"
    denied = await asgi_request(workers, "POST", PATH_VALIDATE_TRAINJOB, CASES[3][2])
    assert "active" in denied.json()["response"]["status"]["message"]


class Held(Offload):
    """Tells when a worker has been handed a review."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(inline_max_bytes=0, **kw)
        self.handed = asyncio.Event()

    async def _call(self, worker: Any, message: tuple[Any, ...]) -> Answer | Needs:
        self.handed.set()
        return await super()._call(worker, message)


async def test_a_killed_worker_fails_only_its_review() -> None:
    pool = Held()
    app = create_app(lookup(), now=lambda: NOW, offload=pool)
    try:
        slow = review(trainjob(env=80_000), uid="killed")
        task = asyncio.create_task(asgi_request(app, "POST", PATH_MUTATE_TRAINJOB, slow))
        await asyncio.wait_for(pool.handed.wait(), 30)
        (pid,) = pool.processes
        os.kill(pid, signal.SIGKILL)
        resp = await asyncio.wait_for(task, 30)
        answer = resp.json()["response"]
        assert resp.status == 200 and answer["uid"] == "killed"
        assert answer["status"]["code"] == 500
        assert "the worker process exited" in answer["status"]["message"]
        # The next review gets a new worker.
        after = await asgi_request(app, "POST", PATH_VALIDATE_TRAINJOB, review(trainjob()))
        assert after.json()["response"]["allowed"] is True
        assert pool.processes and pid not in pool.processes
    finally:
        await pool.close()


async def test_a_review_past_its_time_limit_is_denied_and_its_worker_replaced() -> None:
    pool = Offload(inline_max_bytes=0, review_timeout=0.2)
    app = create_app(lookup(), now=lambda: NOW, offload=pool)
    try:
        slow = review(trainjob(env=80_000), uid="late")
        answer = (await asgi_request(app, "POST", PATH_MUTATE_TRAINJOB, slow)).json()["response"]
        assert answer["uid"] == "late"
        assert answer["status"]["code"] == 500
        assert "took longer than" in answer["status"]["message"]
        assert not pool.processes  # killed, not reused
        pool.review_timeout = 30
        after = await asgi_request(app, "POST", PATH_VALIDATE_TRAINJOB, review(trainjob()))
        assert after.json()["response"]["allowed"] is True
    finally:
        await pool.close()


class BrokenLookup(StaticLookup):
    async def runtime(self, kind: str, namespace: str, name: str) -> Any:
        raise ConnectionError("apiserver unreachable")


async def test_a_cluster_that_cannot_be_read_is_the_same_denial(offload: Offload) -> None:
    inline = create_app(BrokenLookup(), offload=Offload(inline_max_bytes=1 << 40))
    workers = create_app(BrokenLookup(), offload=offload)
    body = review(trainjob())
    here = await asgi_request(inline, "POST", PATH_VALIDATE_TRAINJOB, body)
    there = await asgi_request(workers, "POST", PATH_VALIDATE_TRAINJOB, body)
    assert there.json() == here.json()
    assert here.json()["response"]["status"] == {
        "code": 500,
        "reason": "InternalError",
        "message": "internal error in the admission webhook: ConnectionError",
    }
    # The worker answered it (and dropped the review it kept): it serves the next one.
    good = create_app(lookup(), now=lambda: NOW, offload=offload)
    after = await asgi_request(good, "POST", PATH_VALIDATE_TRAINJOB, body)
    assert after.json()["response"]["allowed"] is True
