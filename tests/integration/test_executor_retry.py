"""A failed reconcile in the local executor is retried with back-off: the real local API
server answers the executor's first writes with errors (500, 503, a 409 Conflict; its fault
hooks, over the wire), and the executor's client meets a dropped connection and a timeout
before others, and the JobSet still converges: its Service, Jobs and pods are created once each
and its status is written, up to Completed."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.harness import Plane, local_plane
from trainer.kube import resources as r
from trainer.kube.rest import Kube
from trainer.local.apiserver.hooks import Fault
from trainer.local.executor.api import API_TIMEOUT
from trainer.local.executor.runner import Executor
from trainer.machinery.requests import JSON, Request

JS = "jobset.x-k8s.io/v1alpha2"


def server_faults() -> list[Fault]:
    """Answered by the API server instead of serving the request (no state changes)."""
    return [
        Fault("create", "services", 503),
        Fault("create", "jobs", 500),
        Fault("create", "jobs", 409, nth=2, message="the object has been modified"),
        Fault("create", "pods", 500),
        Fault("patch", "jobs/status", 500),
        Fault("patch", "jobsets/status", 500, times=2),
    ]


CLIENT_FAULTS: dict[tuple[str, str], list[Exception]] = {
    ("create", "jobs.batch"): [aiohttp.ClientConnectionError("injected: connection reset")],
    ("patch", "jobsets.jobset.x-k8s.io/status"): [TimeoutError()],
}
"""Met by the executor's client where it would send (a dropped connection, no answer)."""


class FaultyKube(Kube):
    """Fails the first writes of each kind listed in :data:`CLIENT_FAULTS` where they would
    go on the wire (the client maps the failure to its ``APIError`` as for a real one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending = {key: list(errors) for key, errors in CLIENT_FAULTS.items()}
        self.injected: list[tuple[str, str]] = []

    async def open(
        self, req: Request, timeout: aiohttp.ClientTimeout, accept: str = JSON
    ) -> aiohttp.ClientResponse:
        errors = self.pending.get((req.verb, req.resource))
        if errors:
            self.injected.append((req.verb, req.resource))
            raise errors.pop(0)
        return await super().open(req, timeout, accept)


@pytest.fixture
async def env() -> AsyncIterator[tuple[Plane, FaultyKube, list[Fault]]]:
    from trainer.kube.client import new_api_client  # noqa: PLC0415

    async with local_plane(runtimes=False) as plane:
        faults = [plane.server.storage.hooks.inject(fault) for fault in server_faults()]
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = str(Path(tmp) / "kubeconfig")
            plane.server.write_kubeconfig(kubeconfig)
            api = await new_api_client(kubeconfig, qps_user_agent="trainer-executor")
            kube = FaultyKube(api, timeout=API_TIMEOUT)
            executor = Executor(kube, workdir=Path(tmp), state_dir=Path(tmp), kubelet=False)
            await executor.start()
            try:
                yield plane, kube, faults
            finally:
                await executor.stop()
                await api.close()


def rjob(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": 1,
                "completions": 1,
                "template": {
                    "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}
                },
            }
        },
    }


def jobs_of(plane: Plane) -> list[str]:
    return sorted(
        j["metadata"]["name"] for j in plane.server.storage.objects("batch/v1", "jobs", "default")
    )


def pods_of(plane: Plane) -> list[dict[str, Any]]:
    return list(plane.server.storage.objects("v1", "pods", "default"))


def status(plane: Plane) -> dict[str, Any]:
    return (plane.get(JS, "jobsets", "default", "flaky") or {}).get("status") or {}


async def test_the_jobset_converges_through_failed_writes(
    env: tuple[Plane, FaultyKube, list[Fault]],
) -> None:
    plane, kube, faults = env
    await plane.kube.create(
        {
            "apiVersion": JS,
            "kind": "JobSet",
            "metadata": {"name": "flaky", "namespace": "default"},
            "spec": {"replicatedJobs": [rjob("init"), rjob("node", replicas=2)]},
        }
    )
    expected = ["flaky-init-0", "flaky-node-0", "flaky-node-1"]
    await plane.until(lambda: jobs_of(plane) == expected, what="every Job, once")
    await plane.until(lambda: len(pods_of(plane)) == 3, what="a pod per Job")
    await plane.until(
        lambda: len(status(plane).get("replicatedJobsStatus") or []) == 2, what="JobSet status"
    )
    assert plane.get("v1", "services", "default", "flaky") is not None
    for pod in pods_of(plane):
        await plane.kube.patch_status(
            r.PODS, "default", pod["metadata"]["name"], {"status": {"phase": "Succeeded"}}
        )
    done = await plane.until(
        lambda: status(plane).get("terminalState") and status(plane), what="Completed"
    )
    assert done["terminalState"] == "Completed"
    assert {s["name"]: s["succeeded"] for s in done["replicatedJobsStatus"]} == {
        "init": 1,
        "node": 2,
    }
    # Every injected failure was met (and retried past), and nothing was made twice.
    assert all(not errors for errors in kube.pending.values()), kube.pending
    assert len(kube.injected) == sum(len(errors) for errors in CLIENT_FAULTS.values())
    assert [f.fired for f in faults] == [f.times for f in faults]
    assert jobs_of(plane) == expected
    assert len(pods_of(plane)) == 3
