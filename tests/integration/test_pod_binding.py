"""``pods/{name}/binding`` on the local API server: how a scheduler assigns a pod to a node,
with kube-apiserver's answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from trainer.kube import resources as r
from trainer.kube.rest import APIError, Kube
from trainer.local.apiserver import APIServer
from trainer.local.executor.api import executor_kube
from trainer.machinery import requests as rq


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[Kube]:
    server = APIServer()
    await server.start()
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    client = await executor_kube(str(tmp_path / "kubeconfig"))
    try:
        yield client
    finally:
        await client.api.close()
        await server.stop()


async def new_pod(kube: Kube, name: str) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    return await kube.create(pod, gvr=r.PODS)


async def test_a_binding_sets_the_node_and_pod_scheduled_once(kube: Kube) -> None:
    created = await new_pod(kube, "p")
    await kube.bind("default", "p", "local", uid=created["metadata"]["uid"])
    pod = await kube.get(r.PODS, "default", "p")
    assert pod is not None
    assert pod["spec"]["nodeName"] == "local"
    scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [c["status"] for c in scheduled] == ["True"]

    with pytest.raises(APIError) as again:
        await kube.bind("default", "p", "other")
    assert again.value.status == 409
    assert again.value.message == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node '
        '"local"'
    )


async def test_a_binding_for_another_pod_of_that_name_or_without_a_node_is_refused(
    kube: Kube,
) -> None:
    await new_pod(kube, "q")
    with pytest.raises(APIError) as stale:
        await kube.bind("default", "q", "local", uid="not-this-one")
    assert stale.value.status == 409 and "Precondition failed: UID in precondition" in str(
        stale.value.message
    )
    request = rq.bind(r.PODS, "default", "q", "local")
    request.body["target"].pop("name")
    with pytest.raises(APIError) as invalid:
        await kube.send(request)
    assert invalid.value.status == 422
    assert "target.name: Required value" in invalid.value.message
    pod = await kube.get(r.PODS, "default", "q")
    assert pod is not None
    assert not pod["spec"].get("nodeName")

    with pytest.raises(APIError) as missing:
        await kube.bind("default", "absent", "local")
    assert missing.value.status == 404
