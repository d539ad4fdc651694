"""Deleting a pod on the local API server as kube-apiserver does: a pod running on a node
that exists is only marked (``deletionTimestamp`` = now + its grace period) until its kubelet
confirms with a grace period of 0; a pod not bound, finished, or on a node that does not exist
is deleted at once. A later delete may shorten the grace period, never lengthen it."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from trainer.kube import resources as r
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer
from trainer.local.executor.api import executor_kube
from trainer.machinery.times import parse_time


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[Kube]:
    server = APIServer()
    await server.start()
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    client = await executor_kube(str(tmp_path / "kubeconfig"))
    await client.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}, gvr=r.NODES
    )
    try:
        yield client
    finally:
        await client.api.close()
        await server.stop()


async def pod_on(
    kube: Kube, name: str, node: str | None, grace: int | None = None, phase: str = "Running"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    created = await kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        },
        gvr=r.PODS,
    )
    if node:
        await kube.bind("default", name, node, uid=created["metadata"]["uid"])
    await kube.patch_status(r.PODS, "default", name, {"status": {"phase": phase}})
    return created


async def test_a_running_pod_is_kept_for_its_grace_period_until_its_kubelet_confirms(
    kube: Kube,
) -> None:
    await pod_on(kube, "p", "n1", grace=20)
    assert await kube.delete(r.PODS, "default", "p")
    marked = await kube.get(r.PODS, "default", "p")
    assert marked is not None
    meta = marked["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 20
    when = parse_time(meta["deletionTimestamp"])
    assert when is not None
    left = (when - dt.datetime.now(dt.UTC)).total_seconds()
    assert 15 < left <= 20
    # A shorter grace period shortens it; a longer one does not lengthen it.
    await kube.delete(r.PODS, "default", "p", grace_period_seconds=5)
    shorter = await kube.get(r.PODS, "default", "p")
    assert shorter is not None and shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    await kube.delete(r.PODS, "default", "p", grace_period_seconds=60)
    kept = await kube.get(r.PODS, "default", "p")
    assert kept is not None and kept["metadata"]["deletionGracePeriodSeconds"] == 5
    # The kubelet's confirmation (and kubectl delete --grace-period=0 --force) removes it.
    await kube.delete(r.PODS, "default", "p", grace_period_seconds=0)
    assert await kube.get(r.PODS, "default", "p") is None


@pytest.mark.parametrize(
    ("node", "phase"),
    [(None, "Pending"), ("n1", "Succeeded"), ("n1", "Failed"), ("gone", "Running")],
    ids=["not-bound", "succeeded", "failed", "node-does-not-exist"],
)
async def test_pods_no_kubelet_must_stop_are_deleted_at_once(
    kube: Kube, node: str | None, phase: str
) -> None:
    await pod_on(kube, "p", node, phase=phase)
    assert await kube.delete(r.PODS, "default", "p")
    assert await kube.get(r.PODS, "default", "p") is None
