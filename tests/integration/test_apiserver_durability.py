"""Crash suite: the real ``trainer apiserver --state-file`` is SIGKILLed during writes and
during deletes, restarted on the same file, and must lose no acknowledged write, resurrect no
acknowledged delete, and finish every interrupted garbage collection (zero orphans, zero
owners stuck in foreground deletion). See docs/local-plane.md, "State file: durability and
recovery".

Counts (bounded so the file runs in well under a minute): 3 SIGKILLs and 6 server starts; a
burst of 600 acknowledged writes from 8 writers; 150 owners with 300 dependents; 60
TrainJobs with a JobSet and a ConfigMap each. Each test prints what it counted (pytest -s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.kubeconfig_client import session_from_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0
CONVERGE_TIMEOUT = 30.0
IN_FLIGHT = 16


class ServerProcess:
    """``trainer apiserver --state-file STATE`` as a user runs it; started, killed, stopped."""

    def __init__(self, tmp_path: Path, state: Path, *args: str) -> None:
        self.kubeconfig = tmp_path / "kubeconfig"
        self.state = state
        self.args = args
        self.log = tmp_path / "apiserver.log"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.kubeconfig.unlink(missing_ok=True)
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trainer.cli.main",
                    "apiserver",
                    "--port",
                    "0",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--state-file",
                    str(self.state),
                    *self.args,
                ],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        assert self.proc.stdout is not None
        # The kubeconfig is written (atomically) before the first line is printed.
        for _line in self.proc.stdout:
            if self.kubeconfig.exists():
                return
        raise AssertionError(f"apiserver exited before serving: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def session(self) -> aiohttp.ClientSession:
        return session_from_kubeconfig(self.kubeconfig, limit=IN_FLIGHT)


@contextlib.contextmanager
def running(server: ServerProcess) -> Any:
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def ok(resp: aiohttp.ClientResponse, *codes: int) -> dict[str, Any]:
    body: dict[str, Any] = await resp.json()
    assert resp.status in codes, body
    return body


async def bounded(jobs: list[Callable[[], Awaitable[None]]]) -> None:
    sem = asyncio.Semaphore(IN_FLIGHT)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with sem:
            await job()

    await asyncio.gather(*(one(j) for j in jobs))


Key = tuple[str, str, str]  # collection path, namespace, name


class Mirror:
    """The objects of some collections, kept current by a list and a watch, so a test can
    await a condition on them instead of polling."""

    def __init__(self, api: aiohttp.ClientSession, paths: list[str]) -> None:
        self.api = api
        self.paths = paths
        self.objects: dict[Key, dict[str, Any]] = {}
        self._changed = asyncio.Event()

    def of(self, path: str) -> list[dict[str, Any]]:
        return [o for (p, _, _), o in self.objects.items() if p == path]

    async def load(self, path: str) -> str:
        """List ``path`` into the mirror; its resourceVersion."""
        async with self.api.get(path) as resp:
            body = await ok(resp, 200)
        for obj in body["items"]:
            meta = obj["metadata"]
            self.objects[(path, meta.get("namespace", ""), meta["name"])] = obj
        return str(body["metadata"]["resourceVersion"])

    async def _watch(self, path: str, rv: str) -> None:
        url = f"{path}?watch=1&resourceVersion={rv}&timeoutSeconds={int(CONVERGE_TIMEOUT) + 5}"
        async with self.api.get(url) as resp:
            assert resp.status == 200
            async for line in resp.content:
                event = json.loads(line)
                meta = event["object"]["metadata"]
                key = (path, meta.get("namespace", ""), meta["name"])
                if event["type"] == "DELETED":
                    self.objects.pop(key, None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    self.objects[key] = event["object"]
                self._changed.set()

    async def until(self, problems: Callable[[Mirror], list[str]]) -> None:
        """Wait until ``problems`` finds none; fail with what is left after the timeout."""
        rvs = [await self.load(p) for p in self.paths]
        watches = [
            asyncio.create_task(self._watch(p, rv)) for p, rv in zip(self.paths, rvs, strict=True)
        ]
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CONVERGE_TIMEOUT
            while left := problems(self):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise AssertionError(f"{len(left)} problems left, e.g. {left[:5]}")
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)


def cm_path(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/configmaps"


async def create_namespace(api: aiohttp.ClientSession, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    async with api.post("/api/v1/namespaces", json=body) as resp:
        await ok(resp, 201)


# --- (a) acknowledged writes --------------------------------------------------------------

WRITERS = 8
KILL_AFTER_ACKS = 600


async def test_every_acknowledged_write_survives_a_sigkill(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, tmp_path / "state.db", "--no-install-crds")
    path = cm_path("burst")
    expected: dict[str, str | None] = {}  # acknowledged: data.v, or None once deleted
    unsure: set[str] = set()  # the request in flight when the server died: either outcome
    acked: Counter[str] = Counter()
    enough = asyncio.Event()
    with running(server):
        async with server.session() as api:
            await create_namespace(api, "burst")

            async def write(op: str, name: str, method: str, url: str, body: Any) -> bool:
                unsure.add(name)
                try:
                    async with api.request(method, url, json=body, headers=HEADERS[op]) as resp:
                        await ok(resp, 200, 201)
                except (aiohttp.ClientError, ConnectionError):
                    return False  # the server was killed: the outcome is unknown
                unsure.discard(name)
                value = None if op == "delete" else str(body["data"]["v"])
                expected[name] = value
                acked[op] += 1
                if acked.total() >= KILL_AFTER_ACKS:
                    enough.set()
                return True

            async def writer(w: int) -> None:
                live: list[str] = []
                for i in range(10_000):
                    name = f"w{w}-{i}"
                    if i % 4 in (0, 1) or len(live) < 2:
                        body = {"metadata": {"name": name}, "data": {"v": "0"}}
                        if not await write("create", name, "POST", path, body):
                            return
                        live.append(name)
                    elif i % 4 == 2:
                        target = live[len(live) // 2]
                        patch = {"data": {"v": str(i)}}
                        if not await write("update", target, "PATCH", f"{path}/{target}", patch):
                            return
                    else:
                        target = live.pop(0)
                        if not await write("delete", target, "DELETE", f"{path}/{target}", None):
                            return

            writers = [asyncio.create_task(writer(w)) for w in range(WRITERS)]
            await asyncio.wait_for(enough.wait(), 60)
            server.kill()
            await asyncio.gather(*writers)
        server.start()
        async with server.session() as api:
            async with api.get(path) as resp:
                stored = {o["metadata"]["name"]: o for o in (await ok(resp, 200))["items"]}
            lost = [
                n
                for n, v in expected.items()
                if n not in unsure
                and v is not None
                and (stored.get(n) or {}).get("data", {}).get("v") != v
            ]
            resurrected = [
                n for n, v in expected.items() if n not in unsure and v is None and n in stored
            ]
            unexpected = set(stored) - {n for n, v in expected.items() if v is not None} - unsure
            print(
                f"\nacknowledged before the kill: {dict(acked)} ({acked.total()} writes); "
                f"in flight at the kill: {len(unsure)}; lost {len(lost)}, resurrected "
                f"{len(resurrected)}, unexpected {len(unexpected)}"
            )
            assert acked.total() >= KILL_AFTER_ACKS
            assert lost == [] and resurrected == [] and not unexpected
            top = max(int(o["metadata"]["resourceVersion"]) for o in stored.values())
            body = {"metadata": {"name": "after-restart"}}
            async with api.post(path, json=body) as resp:
                created = await ok(resp, 201)
            assert int(created["metadata"]["resourceVersion"]) > top


HEADERS = {
    "create": {"Content-Type": "application/json"},
    "update": {"Content-Type": "application/merge-patch+json"},
    "delete": {"Content-Type": "application/json"},
}


# --- (b) garbage collection interrupted ---------------------------------------------------

OWNERS = 150
DEPENDENTS = 2


def policy_of(i: int) -> str:
    return "Background" if i % 10 < 6 else "Foreground" if i % 10 < 9 else "Orphan"


def owner_ref(api_version: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def test_deletes_cut_short_by_a_sigkill_converge_after_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, tmp_path / "state.db", "--no-install-crds")
    path = cm_path("gc")
    owners: dict[int, dict[str, Any]] = {}
    deleted: set[int] = set()  # acknowledged deletes
    with running(server):
        async with server.session() as api:
            await create_namespace(api, "gc")

            async def create_owner(i: int) -> None:
                meta = {"name": f"owner-{i}", "labels": {"policy": policy_of(i)}}
                async with api.post(path, json={"metadata": meta}) as resp:
                    owners[i] = await ok(resp, 201)

            async def create_dependents(i: int) -> None:
                for j in range(DEPENDENTS):
                    ref = owner_ref("v1", "ConfigMap", owners[i])
                    meta = {"name": f"dep-{i}-{j}", "ownerReferences": [ref]}
                    async with api.post(path, json={"metadata": meta}) as resp:
                        await ok(resp, 201)

            async def delete_owners(policy: str) -> None:
                # One deletecollection per policy: its cascades are all queued at once.
                options = {"propagationPolicy": policy}
                url = f"{path}?labelSelector=policy%3D{policy}"
                async with api.delete(url, json=options) as resp:
                    body = await ok(resp, 200)
                    if policy == POLICIES[-1]:
                        server.kill()  # at its answer: the collector is far behind
                deleted.update(int(o["metadata"]["name"].split("-")[1]) for o in body["items"])

            await bounded([create_owner_job(create_owner, i) for i in range(OWNERS)])
            await bounded([create_owner_job(create_dependents, i) for i in range(OWNERS)])
            for policy in POLICIES:
                await delete_owners(policy)
        on_disk = {o["metadata"]["name"]: o for o in stored_objects(server)}
        left = Counter(_gc_problem(o, on_disk.get, owners, deleted) for o in on_disk.values())
        left.pop("", None)
        print(
            f"\n{len(deleted)} of {OWNERS} owner deletes acknowledged before the kill "
            f"({OWNERS * DEPENDENTS} dependents); left for the collector: {dict(left)}"
        )
        assert left["resurrected owner"] == 0
        server.start()
        async with server.session() as api:
            mirror = Mirror(api, [path])
            await mirror.until(
                lambda m: [
                    f"{o['metadata']['name']}: {p}"
                    for o in m.of(path)
                    if (
                        p := _gc_problem(
                            o, lambda n: m.objects.get((path, "gc", n)), owners, deleted
                        )
                    )
                ]
            )
            for i in deleted:
                assert ("", "gc", f"owner-{i}") not in mirror.objects
            names = {o["metadata"]["name"] for o in mirror.of(path)}
            for i in range(OWNERS):
                dependents = {f"dep-{i}-{j}" for j in range(DEPENDENTS)}
                owner_kept = f"owner-{i}" in names
                assert (dependents <= names) == (owner_kept or policy_of(i) == "Orphan")


# Foreground last: its owners wait for their dependents over several rounds of the collector.
POLICIES = ("Orphan", "Background", "Foreground")


def create_owner_job(fn: Callable[[int], Awaitable[None]], i: int) -> Callable[[], Awaitable[None]]:
    return lambda: fn(i)


def stored_objects(server: ServerProcess, plural: str = "configmaps") -> list[dict[str, Any]]:
    """The objects (of one resource, "": all) in the state file of a killed server."""
    db = sqlite3.connect(server.state)
    try:
        rows = db.execute("SELECT body FROM objects WHERE ? IN ('', plural)", (plural,)).fetchall()
    finally:
        db.close()
    return [json.loads(body) for (body,) in rows]


def _gc_problem(
    obj: dict[str, Any],
    objects: Callable[[str], dict[str, Any] | None],
    owners: dict[int, dict[str, Any]],
    deleted: set[int],
) -> str:
    """What is wrong with ``obj`` once collection is over ("" when nothing)."""
    meta = obj["metadata"]
    name = meta["name"]
    i = int(name.split("-")[1])
    if name.startswith("owner-"):
        if meta.get("deletionTimestamp"):
            return "owner being deleted"
        return "resurrected owner" if i in deleted else ""  # an unacknowledged delete
    if meta.get("deletionTimestamp"):
        return "dependent being deleted"
    owner = objects(f"owner-{i}")
    if owner is not None and owner["metadata"]["uid"] == owners[i]["metadata"]["uid"]:
        return ""  # its owner is still there (being deleted, or its delete never landed)
    if policy_of(i) != "Orphan":
        return "orphaned dependent"
    uid = owners[i]["metadata"]["uid"]
    if any(r.get("uid") == uid for r in meta.get("ownerReferences") or []):
        return "orphan-policy dependent still refers to its deleted owner"
    return ""


# --- (c) TrainJobs with their JobSets and ConfigMaps ------------------------------------------

TRAINJOBS = 60
KEPT = 10  # TrainJobs not deleted: their JobSets and ConfigMaps must stay
TJ_API = "trainer.kubeflow.org/v1alpha1"
JS_API = "jobset.x-k8s.io/v1alpha2"


async def test_trainjobs_deleted_before_a_sigkill_leave_no_orphans(tmp_path: Path) -> None:
    """Owner references shaped like the controller's: the JobSet and a ConfigMap of each
    TrainJob have it as controller owner with blockOwnerDeletion."""
    server = ServerProcess(tmp_path, tmp_path / "state.db")  # CRDs installed
    tjs = f"/apis/{TJ_API}/namespaces/default/trainjobs"
    jss = f"/apis/{JS_API}/namespaces/default/jobsets"
    cms = cm_path("default")
    with running(server):
        async with server.session() as api:

            async def create(i: int) -> None:
                tj = {
                    "apiVersion": TJ_API,
                    "kind": "TrainJob",
                    "metadata": {"name": f"job-{i}", "labels": {"doomed": str(i >= KEPT).lower()}},
                    "spec": {"runtimeRef": {"name": "torch-distributed"}},
                }
                async with api.post(tjs, json=tj) as resp:
                    owner = owner_ref(TJ_API, "TrainJob", await ok(resp, 201))
                pod = {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}
                js = {
                    "apiVersion": JS_API,
                    "kind": "JobSet",
                    "metadata": {"name": f"job-{i}", "ownerReferences": [owner]},
                    "spec": {
                        "replicatedJobs": [
                            {"name": "node", "template": {"spec": {"template": pod}}}
                        ]
                    },
                }
                async with api.post(jss, json=js) as resp:
                    await ok(resp, 201)
                cm = {"metadata": {"name": f"job-{i}-hostfile", "ownerReferences": [owner]}}
                async with api.post(cms, json=cm) as resp:
                    await ok(resp, 201)

            await bounded([create_owner_job(create, i) for i in range(TRAINJOBS)])
            # As `kubectl delete trainjobs -l doomed=true`: one deletecollection, every
            # cascade queued at once, the server killed at its answer.
            async with api.delete(f"{tjs}?labelSelector=doomed%3Dtrue") as resp:
                body = await ok(resp, 200)
                server.kill()
            assert len(body["items"]) == TRAINJOBS - KEPT
        on_disk = stored_objects(server, "")
        uids = {o["metadata"]["uid"] for o in on_disk}
        orphans = [
            o["kind"]
            for o in on_disk
            if (refs := o["metadata"].get("ownerReferences"))
            and all(r["uid"] not in uids for r in refs)
        ]
        print(f"\nleft orphaned by the kill: {dict(Counter(orphans))}")
        server.start()
        async with server.session() as api:
            mirror = Mirror(api, [tjs, jss, cms])

            def problems(m: Mirror) -> list[str]:
                kept = {f"job-{i}" for i in range(KEPT)}
                out = [f"TrainJob {o['metadata']['name']}" for o in m.of(tjs)]
                out = [p for p in out if p.split()[1] not in kept]
                out += [
                    f"JobSet {o['metadata']['name']}"
                    for o in m.of(jss)
                    if o["metadata"]["name"] not in kept
                ]
                out += [
                    f"ConfigMap {o['metadata']['name']}"
                    for o in m.of(cms)
                    if o["metadata"]["name"].startswith("job-")
                    and o["metadata"]["name"].removesuffix("-hostfile") not in kept
                ]
                return out

            await mirror.until(problems)
            assert {o["metadata"]["name"] for o in mirror.of(tjs)} == {
                f"job-{i}" for i in range(KEPT)
            }
            assert len(mirror.of(jss)) == KEPT
            assert sum(o["metadata"]["name"].startswith("job-") for o in mirror.of(cms)) == KEPT
            print(f"{TRAINJOBS - KEPT} TrainJobs deleted then killed: no orphans after restart")
