"""The dashboard's Nodes view follows the cluster (docs/dashboard.md, "What it watches"): a
dashboard of one namespace counts the pods every namespace binds to a node, stops counting a
pod once it finishes, and counts pods that wait Unschedulable; its subscription wakes on each
change (nothing polls)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from trainer.api import crds
from trainer.dashboard.watch.cache import ClusterCache, Subscription
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer

WAIT = 5.0
NAMESPACES = r.GVR("", "v1", "namespaces", False, "Namespace")
GPU = "nvidia.com/gpu"


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[Kube]:
    server = APIServer()
    await server.start()
    for crd in crds.trainer_crds():
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    api = await new_api_client(str(tmp_path / "kubeconfig"))
    try:
        yield Kube(api, timeout=5.0)
    finally:
        await api.close()
        await server.stop()


async def until(
    cache: ClusterCache, sub: Subscription, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The Nodes view once ``check`` holds, woken by the subscription only."""
    async with asyncio.timeout(WAIT):
        while True:
            view = cache.nodes_view()
            if check(view):
                return view
            await sub.next()


def gpus(view: dict[str, Any]) -> Any:
    (row,) = view["nodes"]
    return next(u["requests"] for u in row["resources"] if u["name"] == GPU)


async def test_nodes_view_follows_binds_finishes_and_waits(kube: Kube) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}
    await kube.create(namespace, gvr=NAMESPACES)
    cache = ClusterCache(kube, "default")
    await cache.start(timeout=WAIT)
    try:
        assert (
            "nodes" not in cache.unavailable and "pods in all namespaces" not in cache.unavailable
        )
        with cache.subscribe(nodes=True) as sub:
            offer = {"cpu": "8", "memory": "16Gi", "pods": "110", GPU: "2"}
            # Registered as the local kubelet does: the Node, then its status.
            labels = {"nvidia.com/gpu.product": "Fake-GPU"}
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "labels": labels},
            }
            await kube.create(node, gvr=r.NODES)
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            status = {"capacity": offer, "allocatable": offer, "conditions": [ready]}
            await kube.patch_status(r.NODES, None, "n1", {"status": status})
            view = await until(cache, sub, lambda v: GPU in v["resources"])
            assert view["nodes"][0]["gpuProduct"] == "Fake-GPU" and gpus(view) == 0
            assert view["nodes"][0]["ready"] == "Ready"

            # A pod of another namespace than the dashboard's, bound to the node, counts.
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "trainer", "namespace": "other"},
                "spec": {
                    "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "2"}}}]
                },
            }
            await kube.create(pod, gvr=r.PODS)
            await kube.bind("other", "trainer", "n1")
            view = await until(cache, sub, lambda v: gpus(v) == 2)
            # Cached slim (the informer's transform): what the allocation reads, no image.
            cached = cache.node_pods.get("other", "trainer")
            assert cached is not None and cached["spec"]["containers"] == [
                {"name": "c", "resources": {"limits": {GPU: "2"}, "requests": {GPU: "2"}}}
            ]
            (row,) = view["nodes"]
            assert next(u for u in row["resources"] if u["name"] == GPU)["text"]["free"] == "0"

            waiting = {**pod, "metadata": {"name": "waiting", "namespace": "default"}}
            await kube.create(waiting, gvr=r.PODS)
            message = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
            await kube.patch_status(
                r.PODS,
                "default",
                "waiting",
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": message,
                            }
                        ]
                    }
                },
            )
            view = await until(cache, sub, lambda v: v["pending"] is not None)
            assert view["pending"] == {"count": 1, "pod": "default/waiting", "message": message}

            # A finished pod leaves the watch (the field selector) and the allocation.
            await kube.patch_status(r.PODS, "other", "trainer", {"status": {"phase": "Succeeded"}})
            view = await until(cache, sub, lambda v: gpus(v) == 0)
            assert cache.node_pods.get("other", "trainer") is None
    finally:
        await cache.stop()
