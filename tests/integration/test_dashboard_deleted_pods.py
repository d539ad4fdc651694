"""The dashboard lists the pods a Job controller deleted while their JobSet stays, marked
deleted with their last state, and reads the log the local plane kept of them; both go with
the JobSet (docs/dashboard.md, "Pages")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from trainer.api import crds
from trainer.dashboard.watch.cache import ClusterCache
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.podlogs import stream_log
from trainer.kube.rest import APIError, Kube
from trainer.local.apiserver import APIServer
from trainer.local.executor.api import append_log

WAIT = 5.0
POD = "demo-node-0-0-x7k2p"


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[tuple[APIServer, Kube]]:
    server = APIServer()
    await server.start()
    for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    api = await new_api_client(str(tmp_path / "kubeconfig"))
    try:
        yield server, Kube(api, timeout=5.0)
    finally:
        await api.close()
        await server.stop()


async def until(cache: ClusterCache, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    with cache.subscribe() as sub:
        async with asyncio.timeout(WAIT):
            while True:
                detail = cache.detail("default", "demo")
                if detail is not None and check(detail):
                    return detail
                await sub.next()


async def test_a_deleted_pod_stays_listed_with_its_log_until_its_jobset_goes(
    plane: tuple[APIServer, Kube],
) -> None:
    server, kube = plane
    job = server.storage.create_unadmitted(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        {"metadata": {"name": "demo"}, "spec": {"runtimeRef": {"name": "torch-distributed"}}},
    )
    owner = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": "demo",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    jobset = server.storage.create_unadmitted(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        {"metadata": {"name": "demo", "ownerReferences": [owner]}, "spec": {}},
    )
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "demo",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
    }

    def owned_by(kind: str, api_version: str, obj: dict[str, Any]) -> list[dict[str, Any]]:
        meta = obj["metadata"]
        ref = {"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": meta["uid"]}
        return [{**ref, "controller": True}]

    batch = server.storage.create_unadmitted(
        "batch/v1",
        "Job",
        {
            "metadata": {
                "name": "demo-node-0",
                "labels": labels,
                "ownerReferences": owned_by("JobSet", "jobset.x-k8s.io/v1alpha2", jobset),
            },
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}},
        },
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": POD,
            "namespace": "default",
            "labels": labels,
            "ownerReferences": owned_by("Job", "batch/v1", batch),
        },
        "spec": {"containers": [{"name": "node", "image": "python", "command": ["python"]}]},
    }
    await kube.create(pod, gvr=r.PODS)
    crashed = {
        "name": "node",
        "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "message": "no train.py\n"}},
    }
    status = {"phase": "Running", "containerStatuses": [crashed]}
    await kube.patch_status(r.PODS, "default", POD, {"status": status})
    await append_log(kube, "default", POD, "node", "python: can't open file 'train.py'\n", run=2)

    cache = ClusterCache(kube, None)
    await cache.start(timeout=WAIT)
    try:
        await until(cache, lambda d: [p["name"] for p in d["pods"]] == [POD])
        await kube.delete(r.PODS, "default", POD, grace_period_seconds=0)
        detail = await until(cache, lambda d: bool(d["pods"]) and d["pods"][0]["deleted"])
        (row,) = detail["pods"]
        assert (row["name"], row["phase"], row["restarts"]) == (POD, "Running", 2)
        assert row["reasons"] == [
            "node: waiting: CrashLoopBackOff",
            "node: previously Error (exit code 2): no train.py",
        ]
        assert cache.deleted_pod("default", POD) is not None
        chunks = stream_log(kube, "default", POD, "node", deleted_pod=True)
        async with contextlib.aclosing(chunks):
            text = b"".join([c async for c in chunks]).decode()
        assert text == "python: can't open file 'train.py'\n"

        await kube.delete(r.JOBSETS, "default", "demo")
        await until(cache, lambda d: d["pods"] == [])
        assert cache.deleted_pod("default", POD) is None
        with pytest.raises(APIError) as gone:
            chunks = stream_log(kube, "default", POD, "node", deleted_pod=True)
            async with contextlib.aclosing(chunks):
                await anext(chunks)
        assert gone.value.status == 404
    finally:
        await cache.stop()
