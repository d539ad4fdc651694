"""trainer.kube.informer against the embedded API server: initial sync, live events, watch
reconnects, relists after compaction (with DELETED for what vanished meanwhile), backoff,
resync, the owner index and optional (unserved) resources.

Nothing sleeps to wait for state: events arrive on a queue, and the informer's sleeps (backoff,
discovery) go through :class:`Sleeps`, which reports each delay and can hold the informer
parked while the test changes the cluster behind its back."""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.informer import Backoff, Informer
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.hooks import Fault

WAIT = 5.0
Event = tuple[str, str, str | None]  # (type, name, resourceVersion of old)


class Sleeps:
    """The informer's sleep: records each delay on ``delays``; returns at once while ``gate``
    is set, otherwise waits for it (the informer stays parked)."""

    def __init__(self) -> None:
        self.delays: asyncio.Queue[float] = asyncio.Queue()
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, delay: float) -> None:
        self.delays.put_nowait(delay)
        await self.gate.wait()
        await asyncio.sleep(0)

    async def next(self) -> float:
        return await asyncio.wait_for(self.delays.get(), WAIT)


@dataclass
class Env:
    server: APIServer
    kube: Kube
    informers: list[Informer] = field(default_factory=list)

    def informer(self, gvr: r.GVR = r.CONFIGMAPS, **kw: Any) -> Informer:
        kw.setdefault("rng", random.Random(7))
        inf = Informer(self.kube, gvr, "default" if gvr.namespaced else None, **kw)
        self.informers.append(inf)
        return inf

    def requests(self, verb: str, resource: str = "configmaps") -> list[int]:
        return [
            rec.code
            for rec in self.server.storage.hooks.log
            if (rec.verb, rec.resource) == (verb, resource)
        ]


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    env = Env(server, Kube(api, timeout=5.0))
    try:
        yield env
    finally:
        for inf in env.informers:
            await inf.stop()
        await api.close()
        await server.stop()


def recorder(inf: Informer) -> asyncio.Queue[Event]:
    """Queue every handler call as (type, name, old resourceVersion)."""
    queue: asyncio.Queue[Event] = asyncio.Queue()

    def handle(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        old_rv = old["metadata"]["resourceVersion"] if old is not None else None
        queue.put_nowait((kind, obj["metadata"]["name"], old_rv))

    inf.add_handler(handle)
    return queue


async def take(queue: asyncio.Queue[Event], n: int) -> list[Event]:
    return [await asyncio.wait_for(queue.get(), WAIT) for _ in range(n)]


def configmap(name: str, owner: str | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner is not None:
        # An owner of a kind the server does not serve: the garbage collector leaves the
        # object alone (an absent ConfigMap owner would have it collected).
        meta["ownerReferences"] = [
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "name": "o",
                "uid": owner,
                "controller": True,
            }
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


async def test_initial_sync_then_live_events(env: Env) -> None:
    kube = env.kube
    await kube.create(configmap("a", x="1"))
    await kube.create(configmap("b", x="1"))
    inf = env.informer()
    events = recorder(inf)
    await inf.start()
    assert inf.has_synced and inf.lists == 1
    assert sorted(await take(events, 2)) == [("ADDED", "a", None), ("ADDED", "b", None)]
    assert [o["metadata"]["name"] for o in inf.list()] == ["a", "b"]
    a = inf.get("default", "a")
    assert a is not None and a["kind"] == "ConfigMap"  # list items get their kind back

    created = await kube.create(configmap("c", x="1"))
    assert await take(events, 1) == [("ADDED", "c", None)]
    await kube.patch(r.CONFIGMAPS, "default", "c", {"data": {"x": "2"}})
    assert await take(events, 1) == [("MODIFIED", "c", created["metadata"]["resourceVersion"])]
    c = inf.get("default", "c")
    assert c is not None and c["data"] == {"x": "2"}
    await kube.delete(r.CONFIGMAPS, "default", "c")
    assert await take(events, 1) == [("DELETED", "c", c["metadata"]["resourceVersion"])]
    assert inf.get("default", "c") is None and len(inf) == 2
    assert env.requests("list") == [200]


async def test_label_selector_and_owner_index(env: Env) -> None:
    kube = env.kube
    inf = env.informer(label_selector="app=trainer")
    events = recorder(inf)
    await inf.start()
    mine = configmap("mine", owner="uid-1")
    mine["metadata"]["labels"] = {"app": "trainer"}
    other = configmap("other", owner="uid-1")  # no label: never seen
    await kube.create(other)
    await kube.create(mine)
    assert await take(events, 1) == [("ADDED", "mine", None)]
    assert [o["metadata"]["name"] for o in inf.by_owner_uid("uid-1")] == ["mine"]
    await kube.patch(r.CONFIGMAPS, "default", "mine", {"metadata": {"ownerReferences": None}})
    assert (await take(events, 1))[0][0] == "MODIFIED"
    assert inf.by_owner_uid("uid-1") == []
    await kube.patch(r.CONFIGMAPS, "default", "mine", {"metadata": {"labels": None}})
    assert (await take(events, 1))[0][:2] == ("DELETED", "mine")  # left the selector


async def test_reconnects_from_the_last_version_after_the_server_cuts_the_watch(
    env: Env,
) -> None:
    kube, server = env.kube, env.server
    sleeps = Sleeps()
    inf = env.informer(sleep=sleeps)
    events = recorder(inf)
    await inf.start()
    await kube.create(configmap("before"))
    assert await take(events, 1) == [("ADDED", "before", None)]

    server.storage.store.close_watchers()  # a clean end of stream: reopen at once
    await kube.create(configmap("after-cut"))
    assert await take(events, 1) == [("ADDED", "after-cut", None)]

    server.storage.hooks.inject(Fault("watch", "configmaps", 500, times=2))
    server.storage.store.close_watchers()  # the reconnect fails twice: back off, then resume
    first, second = await sleeps.next(), await sleeps.next()
    assert 0.05 <= first <= 0.1 and 0.1 <= second <= 0.2
    await kube.create(configmap("after-errors"))
    assert await take(events, 1) == [("ADDED", "after-errors", None)]
    assert env.requests("list") == [200]  # resumed from the resourceVersion: no relist
    assert env.requests("watch").count(500) == 2
    assert events.empty()  # and nothing replayed twice


async def test_relist_after_compaction_reports_what_changed_meanwhile(env: Env) -> None:
    kube, server = env.kube, env.server
    for name in ("keep", "change", "remove"):
        await kube.create(configmap(name, v="1"))
    sleeps = Sleeps()
    inf = env.informer(sleep=sleeps)
    events = recorder(inf)
    await inf.start()
    await take(events, 3)
    before, removed = inf.get("default", "change"), inf.get("default", "remove")
    assert before is not None and removed is not None

    # Park the informer in backoff (its reconnect fails), change things, compact the history.
    sleeps.gate.clear()
    server.storage.hooks.inject(Fault("watch", "configmaps", 500, times=1))
    server.storage.store.close_watchers()
    await sleeps.next()
    await kube.delete(r.CONFIGMAPS, "default", "remove")
    await kube.patch(r.CONFIGMAPS, "default", "change", {"data": {"v": "2"}})
    await kube.create(configmap("new", v="1"))
    server.storage.store.compact()
    sleeps.gate.set()

    # The watch from the old version gets 410; the relist reports the differences.
    assert sorted(await take(events, 3)) == [
        ("ADDED", "new", None),
        ("DELETED", "remove", removed["metadata"]["resourceVersion"]),
        ("MODIFIED", "change", before["metadata"]["resourceVersion"]),
    ]
    assert env.requests("list") == [200, 200] and inf.lists == 2
    assert [o["metadata"]["name"] for o in inf.list()] == ["change", "keep", "new"]
    await kube.create(configmap("live-again"))
    assert await take(events, 1) == [("ADDED", "live-again", None)]
    assert events.empty()


async def test_backoff_on_list_errors_until_the_first_sync(env: Env) -> None:
    env.server.storage.hooks.inject(Fault("list", "configmaps", 500, times=3))
    sleeps = Sleeps()
    inf = env.informer(sleep=sleeps, backoff=Backoff(base=0.1, cap=0.3, rng=random.Random(1)))
    await inf.start(timeout=WAIT)
    delays = [sleeps.delays.get_nowait() for _ in range(sleeps.delays.qsize())]
    assert len(delays) == 3
    for delay, ceiling in zip(delays, (0.1, 0.2, 0.3), strict=True):
        assert ceiling / 2 <= delay <= ceiling  # jittered, doubling, capped
    assert env.requests("list") == [500, 500, 500, 200]
    assert inf.backoff.attempt == 0  # reset by the successful list


def test_backoff_doubles_to_the_cap() -> None:
    backoff = Backoff(base=0.1, cap=30.0, rng=random.Random(3))
    delays = [backoff.next() for _ in range(12)]
    assert all(0.05 * 2**i <= d <= 0.1 * 2**i for i, d in enumerate(delays[:8]))
    assert all(15.0 <= d <= 30.0 for d in delays[9:])
    backoff.reset()
    assert backoff.next() <= 0.1


async def test_resync_re_emits_every_cached_object(env: Env) -> None:
    await env.kube.create(configmap("a"))
    inf = env.informer(resync_period=0.02)
    events = recorder(inf)
    await inf.start()
    assert await take(events, 1) == [("ADDED", "a", None)]
    cached = inf.get("default", "a")
    assert cached is not None
    rv = cached["metadata"]["resourceVersion"]
    assert await take(events, 2) == [("MODIFIED", "a", rv)] * 2
    assert not [
        rec for rec in env.server.storage.hooks.log if rec.is_write and rec.verb != "create"
    ]


async def test_a_failing_handler_does_not_stop_the_cache(env: Env) -> None:
    inf = env.informer()

    def broken(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        raise RuntimeError("boom")

    inf.add_handler(broken)
    events = recorder(inf)
    await inf.start()
    await env.kube.create(configmap("x"))
    assert await take(events, 1) == [("ADDED", "x", None)]
    assert inf.get("default", "x") is not None


POD_GROUP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "scope": "Namespaced",
        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


async def test_optional_resource_waits_until_it_is_served(env: Env) -> None:
    kube, server = env.kube, env.server
    sleeps = Sleeps()
    sleeps.gate.clear()
    inf = env.informer(
        r.COSCHEDULING_PODGROUPS, optional=True, discovery_interval=7.0, sleep=sleeps
    )
    events = recorder(inf)
    await inf.start(timeout=WAIT)
    assert inf.has_synced and not inf.served and inf.list() == []
    assert await sleeps.next() == 7.0  # the discovery retry, not the error backoff

    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", POD_GROUP_CRD
    )
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"minMember": 2},
    }
    await kube.create(group)
    sleeps.gate.set()
    assert await take(events, 1) == [("ADDED", "pg", None)]
    assert inf.served and inf.lists == 1
    assert env.requests("list", "podgroups") == [200]  # the 404 came before it was routable
    assert [rec.code for rec in server.storage.hooks.log if rec.code == 404] == [404]

    await kube.create({**group, "metadata": {"name": "pg2", "namespace": "default"}})
    assert await take(events, 1) == [("ADDED", "pg2", None)]


async def test_optional_resource_listed_again_only_once_a_write_shows_it_served(
    env: Env,
) -> None:
    """With ``discovery_interval=None`` an unserved resource is not listed on a timer: a write
    of this process that the API answered (reported through ``record_write``) lists it again,
    and so does ``recheck``."""
    kube, server = env.kube, env.server
    sleeps = Sleeps()
    served: asyncio.Queue[bool] = asyncio.Queue()
    inf = env.informer(
        r.COSCHEDULING_PODGROUPS, optional=True, discovery_interval=None, sleep=sleeps
    )
    inf.add_served_handler(served.put_nowait)
    events = recorder(inf)
    await inf.start(timeout=WAIT)
    assert await asyncio.wait_for(served.get(), WAIT) is False

    def lists() -> int:
        path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"
        # (a 404 on a path not yet routed reads as a get)
        log = server.storage.hooks.log
        return sum(1 for rec in log if rec.path == path and rec.verb in ("list", "get"))

    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", POD_GROUP_CRD
    )
    for _ in range(20):
        await asyncio.sleep(0)
    assert sleeps.delays.empty() and lists() == 1  # no timer, no list: nothing asked for one
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "default"},
    }
    written = await kube.create(group)
    assert not inf.record_write(written)  # not cached by it: the list it asks for decides
    assert await asyncio.wait_for(served.get(), WAIT) is True
    assert await take(events, 1) == [("ADDED", "pg", None)]
    assert lists() == 2

    assert await kube.delete(r.CRDS, None, "podgroups.scheduling.x-k8s.io")
    assert [e[:2] for e in await take(events, 1)] == [("DELETED", "pg")]
    server.storage.store.close_watchers()  # the stream ends, as a real server's does
    assert await asyncio.wait_for(served.get(), WAIT) is False
    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", POD_GROUP_CRD
    )
    inf.recheck()
    assert await asyncio.wait_for(served.get(), WAIT) is True


async def test_start_times_out_while_the_resource_is_not_served(env: Env) -> None:
    sleeps = Sleeps()
    sleeps.gate.clear()  # park after the first failure
    inf = env.informer(r.COSCHEDULING_PODGROUPS, sleep=sleeps)  # required, not optional
    with pytest.raises(TimeoutError):
        await inf.start(timeout=0.2)
    assert not inf.has_synced
    assert await sleeps.next() <= 0.1  # a 404 on a required resource is an error: backoff


async def test_optional_resource_that_goes_away(env: Env) -> None:
    kube, server = env.kube, env.server
    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", POD_GROUP_CRD
    )
    server.storage.create_unadmitted(
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
        {"metadata": {"name": "pg", "namespace": "default"}, "spec": {}},
    )
    sleeps = Sleeps()
    inf = env.informer(
        r.COSCHEDULING_PODGROUPS, optional=True, discovery_interval=7.0, sleep=sleeps
    )
    events = recorder(inf)
    await inf.start(timeout=WAIT)
    assert inf.served and await take(events, 1) == [("ADDED", "pg", None)]
    await kube.create(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pg2", "namespace": "default"},
        }
    )
    assert await take(events, 1) == [("ADDED", "pg2", None)]  # so the watch is open

    sleeps.gate.clear()
    assert await kube.delete(r.CRDS, None, "podgroups.scheduling.x-k8s.io")
    deleted = sorted(await take(events, 2))  # the objects go first
    assert [d[:2] for d in deleted] == [("DELETED", "pg"), ("DELETED", "pg2")]
    server.storage.store.close_watchers()  # then the stream ends, as a real server does
    assert await sleeps.next() <= 0.1  # the watch gets 404: back off, then relist
    sleeps.gate.set()
    assert await sleeps.next() == 7.0  # the relist gets 404 too: wait for discovery
    assert not inf.served and inf.list() == []


async def test_optional_resource_backs_off_and_reports_when_it_is_served(env: Env) -> None:
    """With ``discovery_backoff`` the lists of an unserved resource back off (and start over
    once it was served); served handlers hear each change, even with no object to report."""
    kube, server = env.kube, env.server
    sleeps = Sleeps()
    sleeps.gate.clear()
    served: asyncio.Queue[bool] = asyncio.Queue()
    inf = env.informer(
        r.COSCHEDULING_PODGROUPS,
        optional=True,
        discovery_backoff=Backoff(base=1.0, cap=3.0, rng=random.Random(7)),
        sleep=sleeps,
    )
    inf.add_served_handler(served.put_nowait)
    events = recorder(inf)
    await inf.start(timeout=WAIT)
    assert await asyncio.wait_for(served.get(), WAIT) is False
    first = await sleeps.next()
    assert 0.5 <= first <= 1.0
    sleeps.gate.set()
    assert 1.0 <= await sleeps.next() <= 2.0  # 404 again: the next delay doubles
    assert 1.5 <= await sleeps.next() <= 3.0  # capped
    assert served.empty() and not inf.served

    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", POD_GROUP_CRD
    )
    assert await asyncio.wait_for(served.get(), WAIT) is True
    assert inf.served and inf.list() == [] and events.empty()
    assert inf.discovery_backoff is not None and inf.discovery_backoff.attempt == 0

    assert await kube.delete(r.CRDS, None, "podgroups.scheduling.x-k8s.io")
    server.storage.store.close_watchers()  # the stream ends, as a real server's does
    assert await asyncio.wait_for(served.get(), WAIT) is False
    assert not inf.served


async def test_watch_answering_410_relists(env: Env) -> None:
    kube, server = env.kube, env.server
    await kube.create(configmap("a"))
    inf = env.informer()
    events = recorder(inf)
    await inf.start()
    await take(events, 1)
    server.storage.hooks.inject(Fault("watch", "configmaps", 410, times=1))
    server.storage.store.close_watchers()
    await kube.create(configmap("b"))
    assert await take(events, 1) == [("ADDED", "b", None)]  # by the relist or the watch
    await kube.create(configmap("c"))
    assert await take(events, 1) == [("ADDED", "c", None)]
    assert inf.lists == 2 and env.requests("watch").count(410) == 1
    assert events.empty()


async def test_cached_objects_carry_no_managed_fields(env: Env) -> None:
    """The cache drops metadata.managedFields (listed, watched and recorded objects alike)
    without touching the caller's copy of a write's answer."""
    kube = env.kube
    await kube.apply(configmap("listed", x="1"), field_manager="t")
    inf = env.informer()
    events = recorder(inf)
    await inf.start()
    await take(events, 1)
    await kube.apply(configmap("watched", x="1"), field_manager="t")
    await take(events, 1)
    answer = await kube.apply(configmap("written", x="1"), field_manager="t")
    assert answer["metadata"]["managedFields"]
    assert inf.record_write(answer)
    assert answer["metadata"]["managedFields"]  # the caller's object is unchanged
    for name in ("listed", "watched", "written"):
        cached = inf.get("default", name)
        assert cached is not None and cached["data"] == {"x": "1"}
        assert "managedFields" not in cached["metadata"], name
        assert cached["metadata"]["resourceVersion"]


async def test_cached_objects_share_repeated_strings(env: Env) -> None:
    """Objects decoded from separate events share one copy of each repeated key and value
    (what keeps 10,000 cached jobs within the memory target), and still compare equal to what
    the server stores."""
    kube = env.kube
    text = "the same long runtime snapshot text " * 20
    inf = env.informer()
    events = recorder(inf)
    await inf.start()
    for name in ("a", "b"):
        await kube.apply(configmap(name, snapshot=text), field_manager="t")
    await take(events, 2)
    a, b = inf.get("default", "a"), inf.get("default", "b")
    assert a is not None and b is not None
    assert a["data"]["snapshot"] == text
    assert a["data"]["snapshot"] is b["data"]["snapshot"]
    key_a = next(k for k in a["metadata"] if k == "resourceVersion")
    key_b = next(k for k in b["metadata"] if k == "resourceVersion")
    assert key_a is key_b
    stored = await kube.get(r.CONFIGMAPS, "default", "a")
    assert stored is not None
    assert {
        **stored,
        "metadata": {k: v for k, v in stored["metadata"].items() if k != "managedFields"},
    } == a
