"""trainer.kube.rest against the embedded API server: CRUD, server-side apply, status patches,
error mapping, request metrics and raw watches."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tests.builders import trainjob
from trainer.api import crds
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import JSON_PATCH, APIError, Expired, Kube
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.hooks import Fault

WAIT = 5.0


@dataclass
class Env:
    server: APIServer
    kube: Kube
    calls: list[tuple[str, str, int, float]] = field(default_factory=list)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    for crd in crds.trainer_crds():
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    calls: list[tuple[str, str, int, float]] = []
    kube = Kube(api, timeout=5.0, on_request=lambda *call: calls.append(call))
    try:
        yield Env(server, kube, calls)
    finally:
        await api.close()
        await server.stop()


def configmap(name: str, data: dict[str, str], **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


@pytest.mark.parametrize(
    ("gvr", "namespace", "name", "sub", "path"),
    [
        (r.CONFIGMAPS, "ns", None, None, "/api/v1/namespaces/ns/configmaps"),
        (r.CONFIGMAPS, None, None, None, "/api/v1/configmaps"),
        (
            r.TRAINJOBS,
            "ns",
            "a",
            "status",
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/a/status",
        ),
        (
            r.CLUSTER_TRAINING_RUNTIMES,
            "ns",
            "t",
            None,
            "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/t",
        ),
        (
            r.VOLCANO_PODGROUPS,
            "ns",
            "p",
            None,
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/p",
        ),
        (
            r.LEASES,
            "kube-system",
            "l",
            None,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
        ),
    ],
)
def test_paths(
    gvr: r.GVR, namespace: str | None, name: str | None, sub: str | None, path: str
) -> None:
    assert gvr.path(namespace, name, sub) == path


def test_gvr_for() -> None:
    assert r.gvr_for("jobset.x-k8s.io/v1alpha2", "JobSet") is r.JOBSETS
    assert r.gvr_for("scheduling.x-k8s.io/v1alpha1", "PodGroup") is r.COSCHEDULING_PODGROUPS
    assert r.gvr_for("scheduling.volcano.sh/v1beta1", "PodGroup") is r.VOLCANO_PODGROUPS
    assert r.gvr_for("v1", "Secret") is r.SECRETS
    with pytest.raises(KeyError, match="no known resource for Node in v1"):
        r.gvr_for("v1", "Node")
    with pytest.raises(ValueError, match="needs an object name"):
        r.CONFIGMAPS.path("default", None, "status")


async def test_crud(env: Env) -> None:
    kube = env.kube
    created = await kube.create(configmap("a", {"k": "1"}, app="x"))
    assert created["metadata"]["uid"] and created["data"] == {"k": "1"}
    await kube.create(configmap("b", {"k": "2"}, app="y"))
    got = await kube.get(r.CONFIGMAPS, "default", "a")
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert await kube.get(r.CONFIGMAPS, "default", "absent") is None

    items, rv = await kube.list(r.CONFIGMAPS, "default", label_selector="app=x")
    assert [i["metadata"]["name"] for i in items] == ["a"]
    assert items[0]["kind"] == "ConfigMap" and items[0]["apiVersion"] == "v1"
    assert int(rv) >= int(created["metadata"]["resourceVersion"])
    everywhere, _ = await kube.list(r.CONFIGMAPS)
    assert {"a", "b"} <= {i["metadata"]["name"] for i in everywhere}
    paged, _ = await kube.list(r.CONFIGMAPS, "default", limit=1)
    assert {i["metadata"]["name"] for i in paged} == {"a", "b"}

    merged = await kube.patch(r.CONFIGMAPS, "default", "a", {"data": {"k": None, "n": "3"}})
    assert merged["data"] == {"n": "3"}
    patched = await kube.patch(
        r.CONFIGMAPS, "default", "a", [{"op": "add", "path": "/data/j", "value": "4"}], JSON_PATCH
    )
    assert patched["data"] == {"n": "3", "j": "4"}

    stale = {**created, "data": {"k": "stale"}}
    with pytest.raises(APIError) as err:
        await kube.replace(stale)
    assert err.value.is_conflict and not err.value.is_retryable
    replaced = await kube.replace({**patched, "data": {"fresh": "1"}})
    assert replaced["data"] == {"fresh": "1"}

    with pytest.raises(APIError) as dup:
        await kube.create(configmap("a", {}))
    assert dup.value.is_already_exists and dup.value.is_conflict
    assert dup.value.status == 409 and isinstance(dup.value.body, dict)

    with pytest.raises(APIError) as precondition:
        await kube.delete(r.CONFIGMAPS, "default", "a", preconditions={"uid": "not-the-uid"})
    assert precondition.value.is_conflict
    assert await kube.delete(r.CONFIGMAPS, "default", "a") is True
    assert await kube.delete(r.CONFIGMAPS, "default", "a") is False
    assert await kube.get(r.CONFIGMAPS, "default", "a") is None


async def test_server_side_apply_creates_then_updates(env: Env) -> None:
    kube, server = env.kube, env.server
    created = await kube.apply(configmap("ssa", {"a": "1", "b": "2"}), "trainer")
    assert created["data"] == {"a": "1", "b": "2"} and created["metadata"]["uid"]
    updated = await kube.apply(configmap("ssa", {"a": "1"}), "trainer")
    assert updated["data"] == {"a": "1"}  # the field the manager stopped applying is removed
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    applies = [
        (rec.code, rec.field_manager) for rec in server.storage.hooks.log if rec.verb == "patch"
    ]
    assert applies == [(201, "trainer"), (200, "trainer")]

    dry = await kube.apply(configmap("ssa", {"a": "dry"}), "trainer", dry_run=True)
    assert dry["data"] == {"a": "dry"}
    live = await kube.get(r.CONFIGMAPS, "default", "ssa")
    assert live is not None and live["data"] == {"a": "1"}

    with pytest.raises(APIError) as conflict:
        await kube.apply(configmap("ssa", {"a": "other"}), "someone-else", force=False)
    assert conflict.value.is_conflict and conflict.value.reason == "Conflict"
    forced = await kube.apply(configmap("ssa", {"a": "other"}), "someone-else")
    assert forced["data"] == {"a": "other"}

    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "mini"},
        "spec": {"template": {"spec": {"replicatedJobs": []}}},
    }
    cluster_scoped = await kube.apply(runtime, "trainer")
    assert cluster_scoped["metadata"]["name"] == "mini"
    assert "namespace" not in cluster_scoped["metadata"]


async def test_status_patch_changes_only_status(env: Env) -> None:
    kube = env.kube
    job = await kube.create(trainjob("tj"))
    counts = {"active": 1, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0}
    status = {"status": {"jobsStatus": [{"name": "node", **counts}]}}
    patched = await kube.patch_status(
        r.TRAINJOBS, "default", "tj", {**status, "spec": {"suspend": True}}
    )
    assert patched["status"]["jobsStatus"][0]["active"] == 1
    assert patched["spec"]["suspend"] is False  # /status ignores spec changes
    assert patched["metadata"]["generation"] == job["metadata"]["generation"]
    main = await kube.patch(r.TRAINJOBS, "default", "tj", {"status": {"jobsStatus": []}})
    assert main["status"]["jobsStatus"][0]["active"] == 1  # the main resource ignores status


async def test_errors_and_metrics(env: Env) -> None:
    kube, server = env.kube, env.server
    server.storage.hooks.inject(Fault("get", "configmaps", 503, times=1))
    with pytest.raises(APIError) as unavailable:
        await kube.get(r.CONFIGMAPS, "default", "x")
    assert unavailable.value.status == 503 and unavailable.value.is_retryable
    server.storage.hooks.inject(Fault("create", "configmaps", 429, times=1))
    with pytest.raises(APIError) as throttled:
        await kube.create(configmap("x", {}))
    assert throttled.value.is_retryable and throttled.value.reason == "TooManyRequests"
    with pytest.raises(APIError) as invalid:
        await kube.create(configmap("Not_A_Name", {}))
    assert invalid.value.status == 422 and not invalid.value.is_retryable
    assert "Not_A_Name" in invalid.value.message
    with pytest.raises(APIError) as missing:
        await kube.patch(r.CONFIGMAPS, "default", "none", {"data": {}})
    assert missing.value.is_not_found

    verbs = [(verb, resource, code) for verb, resource, code, _ in env.calls]
    assert verbs == [
        ("get", "configmaps", 503),
        ("create", "configmaps", 429),
        ("create", "configmaps", 422),
        ("patch", "configmaps", 404),
    ]
    assert all(seconds >= 0 for *_, seconds in env.calls)


async def test_connection_errors_and_timeouts_are_retryable(env: Env) -> None:
    kube, server = env.kube, env.server
    await server.stop()
    with pytest.raises(APIError) as refused:
        await kube.get(r.CONFIGMAPS, "default", "x")
    assert refused.value.status == 0 and refused.value.is_retryable
    assert env.calls[-1][:3] == ("get", "configmaps", 0)

    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/{tail:.*}", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    # A stand-in that hangs, on the same port with the same certificate (the client trusts it).
    site = web.TCPSite(runner, "127.0.0.1", server.port, ssl_context=server.tls.server_context())
    await site.start()
    try:
        with pytest.raises(APIError) as slow:
            await kube.get(r.CONFIGMAPS, "default", "x", timeout=0.2)
        assert slow.value.reason == "Timeout" and slow.value.is_retryable
    finally:
        release.set()
        await runner.cleanup()


async def test_watch_streams_events_and_bookmarks(env: Env) -> None:
    kube = env.kube
    _, rv = await kube.list(r.CONFIGMAPS, "default")
    seen: list[tuple[str, str]] = []
    ready = asyncio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(kube.watch(r.CONFIGMAPS, "default", rv, 30)) as events:
            async for event in events:
                obj = event["object"]
                seen.append((event["type"], obj["metadata"].get("name", "")))
                ready.set()
                if event["type"] == "DELETED":
                    return

    task = asyncio.create_task(consume())
    await kube.create(configmap("w", {"a": "1"}))
    await kube.patch(r.CONFIGMAPS, "default", "w", {"data": {"a": "2"}})
    await kube.delete(r.CONFIGMAPS, "default", "w")
    await asyncio.wait_for(task, WAIT)
    assert [s for s in seen if s[0] != "BOOKMARK"] == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]
    assert env.calls[0][:3] == ("list", "configmaps", 200)
    assert ("watch", "configmaps", 200) in [c[:3] for c in env.calls]


async def test_watch_from_a_compacted_version_raises_expired(env: Env) -> None:
    kube, server = env.kube, env.server
    _, rv = await kube.list(r.CONFIGMAPS, "default")
    await kube.create(configmap("later", {}))
    server.storage.store.compact()
    with pytest.raises(Expired) as gone:
        async with contextlib.aclosing(kube.watch(r.CONFIGMAPS, "default", rv, 5)) as events:
            async for _ in events:
                pass
    assert gone.value.status == 410 and gone.value.is_gone

    server.storage.hooks.inject(Fault("watch", "configmaps", 410, times=1))
    with pytest.raises(Expired):
        async with contextlib.aclosing(kube.watch(r.CONFIGMAPS, "default", rv, 5)) as events:
            async for _ in events:
                pass
    server.storage.hooks.inject(Fault("watch", "configmaps", 500, times=1))
    with pytest.raises(APIError) as failed:
        async with contextlib.aclosing(kube.watch(r.CONFIGMAPS, "default", rv, 5)) as events:
            async for _ in events:
                pass
    assert failed.value.status == 500 and not isinstance(failed.value, Expired)


async def test_every_request_and_watch_waits_for_the_rate_limiter(env: Env) -> None:
    """clientConnection.qps/burst: with the burst spent, a request waits for a token (here
    the clock is the test's, so the wait is observed, not timed)."""
    from trainer.kube.ratelimit import RateLimiter  # noqa: PLC0415

    now = [0.0]
    waited: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waited.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(10.0, 2, clock=lambda: now[0], sleep=fake_sleep)
    kube = Kube(env.kube.api, timeout=5.0, limiter=limiter)
    await kube.create(configmap("r1", {"k": "1"}))
    await kube.get(r.CONFIGMAPS, "default", "r1")
    assert waited == []  # the burst of 2
    await kube.list(r.CONFIGMAPS, "default")
    assert waited == [pytest.approx(0.1)]  # one token at 10 qps
    async for _ in kube.watch(r.CONFIGMAPS, "default", resource_version="0", timeout_seconds=1):
        break
    assert len(waited) == 2
