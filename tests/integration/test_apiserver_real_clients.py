"""What the real Kubernetes programs ask of the local API server, answered as kube-apiserver
answers it (docs/local-plane.md, "Content types" and "Running the real programs against the
plane"): kube-scheduler's protobuf Binding, kube-controller-manager's protobuf Pods and
DeleteOptions, the metadata-only reads of its garbage collector, and the kinds
kube-scheduler's informers wait for."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.unit.test_apiserver_protobuf import envelope, ld, meta, vi
from trainer.local.apiserver import APIServer

PROTOBUF = "application/vnd.kubernetes.protobuf"
# client-go's metadata client (k8s.io/client-go/metadata)
META_LIST = (
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)
META_ONE = (
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,"
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)
PODS = "/api/v1/namespaces/default/pods"


class Client:
    def __init__(self, server: APIServer, http: aiohttp.ClientSession) -> None:
        self.server, self.http = server, http

    async def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.server.token}", "Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        url = self.server.url + path
        async with self.http.request(method, url, data=body, headers=headers) as resp:
            return resp.status, json.loads(await resp.read())

    async def watch(self, path: str, accept: str, count: int) -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.server.token}", "Accept": accept}
        events: list[dict[str, Any]] = []
        async with self.http.get(self.server.url + path, headers=headers) as resp:
            async for line in resp.content:
                events.append(json.loads(line))
                if len(events) == count:
                    break
        return events


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    server = APIServer()
    await server.start()
    connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
    try:
        async with aiohttp.ClientSession(connector=connector) as http:
            yield Client(server, http)
    finally:
        await server.stop()


def pod_body(name: str) -> bytes:
    container = ld(1, "c") + ld(2, "busybox") + vi(16, 0)
    spec = ld(2, container) + ld(3, "Never")
    return envelope("v1", "Pod", ld(1, meta(name, "default")) + ld(2, spec))


async def test_a_protobuf_pod_binding_and_delete(client: Client) -> None:
    # kube-controller-manager's Job controller creates pods as protobuf
    status, pod = await client.call("POST", PODS, pod_body("p"), PROTOBUF)
    assert status == 201, pod
    assert pod["spec"]["containers"][0]["name"] == "c"
    assert "stdin" not in pod["spec"]["containers"][0]
    assert pod["spec"]["schedulerName"] == "default-scheduler"  # kube-scheduler binds only those
    # kube-scheduler binds it as protobuf
    target = ld(1, "Node") + ld(3, "kwok-node-0")
    binding = envelope("v1", "Binding", ld(1, meta("p", "default")) + ld(2, target))
    status, answer = await client.call("POST", f"{PODS}/p/binding", binding, PROTOBUF)
    assert (status, answer["status"]) == (201, "Success"), answer
    status, pod = await client.call("GET", f"{PODS}/p")
    assert pod["spec"]["nodeName"] == "kwok-node-0"
    # a typed client's delete sends DeleteOptions as protobuf
    options = envelope("v1", "DeleteOptions", vi(1, 0))
    status, answer = await client.call("DELETE", f"{PODS}/p", options, PROTOBUF)
    assert status == 200, answer
    status, _ = await client.call("GET", f"{PODS}/p")
    assert status == 404


async def test_metadata_only_list_get_and_watch(client: Client) -> None:
    status, _ = await client.call("POST", PODS, pod_body("p"), PROTOBUF)
    assert status == 201
    status, listed = await client.call("GET", PODS, accept=META_LIST)
    assert status == 200
    assert listed["kind"] == "PartialObjectMetadataList"
    assert listed["apiVersion"] == "meta.k8s.io/v1"
    assert listed["metadata"]["resourceVersion"]
    (item,) = listed["items"]
    assert item["kind"] == "PartialObjectMetadata"
    assert item["metadata"]["name"] == "p" and "spec" not in item
    status, one = await client.call("GET", f"{PODS}/p", accept=META_ONE)
    assert (one["kind"], one["metadata"]["name"]) == ("PartialObjectMetadata", "p")
    assert "spec" not in one
    # the garbage collector's informers watch with bookmarks; every object is metadata
    rv = listed["metadata"]["resourceVersion"]
    path = f"{PODS}?watch=true&resourceVersion=0&allowWatchBookmarks=true&sendInitialEvents=true"
    path += "&resourceVersionMatch=NotOlderThan"
    events = await client.watch(path, META_ONE, 2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert {e["object"]["kind"] for e in events} == {"PartialObjectMetadata"}
    assert events[1]["object"]["metadata"]["resourceVersion"] == rv
    # a JSON client still gets the Pod
    status, plain = await client.call("GET", f"{PODS}/p")
    assert plain["kind"] == "Pod" and plain["spec"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/persistentvolumes",
        "/api/v1/namespaces/default/persistentvolumeclaims",
        "/api/v1/replicationcontrollers",
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/replicasets",
        "/apis/policy/v1/poddisruptionbudgets",
        "/apis/storage.k8s.io/v1/storageclasses",
        "/apis/storage.k8s.io/v1/csinodes",
        "/apis/storage.k8s.io/v1/csidrivers",
        "/apis/storage.k8s.io/v1/csistoragecapacities",
        "/apis/storage.k8s.io/v1/volumeattachments",
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/resource.k8s.io/v1/resourceslices",
    ],
)
async def test_kinds_kube_scheduler_waits_for_are_served(client: Client, path: str) -> None:
    status, listed = await client.call("GET", path)
    assert status == 200, listed
    assert listed["kind"].endswith("List") and listed["items"] == []


async def test_a_job_gets_kube_apiservers_selector_and_defaults(client: Client) -> None:
    # JobSet creates Jobs without a selector; kube-controller-manager's Job controller finds a
    # Job's pods by the selector kube-apiserver generates, and reads parallelism unguarded
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {
            "completions": 2,
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
        },
    }
    body = json.dumps(job).encode()
    status, created = await client.call("POST", "/apis/batch/v1/namespaces/default/jobs", body)
    assert status == 201, created
    uid = created["metadata"]["uid"]
    spec = created["spec"]
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "app": "x",
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "j",
        "controller-uid": uid,
        "job-name": "j",
    }
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 2, 6)
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert (spec["completionMode"], spec["suspend"]) == ("NonIndexed", False)


async def test_a_node_is_created_with_its_status(client: Client) -> None:
    # KWOK's nodes are created with their capacity (kube-apiserver keeps a new Node's status);
    # without it kube-scheduler found "0/2 nodes are available: 2 Insufficient nvidia.com/gpu"
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "kwok-node-0"},
        "status": {"capacity": capacity, "allocatable": capacity},
    }
    status, created = await client.call("POST", "/api/v1/nodes", json.dumps(node).encode())
    assert status == 201, created
    assert created["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    # a Pod's status is still the server's to set
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }
    status, created = await client.call("POST", PODS, json.dumps(pod).encode())
    assert created["status"]["phase"] == "Pending"
