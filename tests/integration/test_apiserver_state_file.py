"""The API server's state file in-process: a write is acknowledged only once persisted (a
failed persist answers 503 fast and nobody sees the write), one server per file, and the
garbage collector finishing at start what an interrupted run left (see docs/local-plane.md,
"State file: durability and recovery")."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.kubeconfig_client import session_from_kubeconfig
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.statefile import StateFileError
from trainer.local.apiserver.store import Write

CMS = "/api/v1/namespaces/default/configmaps"


async def started(path: Path) -> APIServer:
    server = APIServer(state_file=str(path))
    await server.start()
    return server


async def session(server: APIServer, tmp_path: Path) -> aiohttp.ClientSession:
    kubeconfig = tmp_path / f"kubeconfig-{time.monotonic_ns()}"
    server.write_kubeconfig(str(kubeconfig))
    return session_from_kubeconfig(kubeconfig)


def configmap(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **extra}}


async def watch_events(api: aiohttp.ClientSession, rv: str) -> AsyncGenerator[dict[str, Any], None]:
    async with api.get(f"{CMS}?watch=1&resourceVersion={rv}") as resp:
        assert resp.status == 200
        async for line in resp.content:
            yield json.loads(line)


async def test_a_failed_persist_answers_503_fast_and_nobody_sees_the_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    server = await started(path)
    try:
        async with await session(server, tmp_path) as api:
            async with api.post(CMS, json=configmap("kept")) as resp:
                assert resp.status == 201
                kept_rv = int((await resp.json())["metadata"]["resourceVersion"])
            events = watch_events(api, str(kept_rv))
            first_event = asyncio.ensure_future(anext(events))
            # Another program holds the file's write lock.
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            try:
                for method, url, body in (
                    ("POST", CMS, configmap("lost")),
                    ("PUT", f"{CMS}/kept", {**configmap("kept"), "data": {"k": "changed"}}),
                    ("DELETE", f"{CMS}/kept", None),
                ):
                    began = time.monotonic()
                    async with api.request(method, url, json=body) as resp:
                        elapsed = time.monotonic() - began
                        status = await resp.json()
                    assert resp.status == 503, status
                    assert elapsed < 1.0
                    assert status["kind"] == "Status"
                    assert status["reason"] == "ServiceUnavailable"
                    assert str(path) in status["message"]
                    assert "locked" in status["message"]
                async with api.get(f"{CMS}/lost") as resp:
                    assert resp.status == 404
                async with api.get(f"{CMS}/kept") as resp:
                    kept = await resp.json()
                assert "data" not in kept
                assert int(kept["metadata"]["resourceVersion"]) == kept_rv
                assert not first_event.done()
            finally:
                other.execute("ROLLBACK")
                other.close()
            async with api.post(CMS, json=configmap("after")) as resp:
                assert resp.status == 201
                after_rv = int((await resp.json())["metadata"]["resourceVersion"])
            assert after_rv == kept_rv + 1  # the failed writes left no gap in the clock
            event = await asyncio.wait_for(first_event, 10)
            assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "after")
            await events.aclose()
    finally:
        await server.stop()
    server = await started(path)
    try:
        names = {
            o["metadata"]["name"] for o in server.storage.objects("v1", "configmaps", "default")
        }
        assert names == {"kept", "after"}
    finally:
        await server.stop()


async def test_a_second_server_on_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    server = await started(path)
    try:
        with pytest.raises(StateFileError, match=f"is in use by process {os.getpid()}"):
            APIServer(state_file=str(path))
    finally:
        await server.stop()
    APIServer(state_file=str(path)).storage.close()


def owned_by(owner: dict[str, Any], name: str) -> dict[str, Any]:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    return configmap(name, namespace="default", ownerReferences=[ref])


async def test_collection_interrupted_by_a_stop_is_finished_at_the_next_start(
    tmp_path: Path,
) -> None:
    """The collector is stopped before it runs (as a kill would leave it), so every cascade,
    foreground and orphan deletion and a namespace termination are left half done."""
    path = tmp_path / "state.db"
    server = await started(path)
    rt = server.storage.resource("v1", "configmaps")
    owners = {
        policy: server.storage.create_unadmitted(
            "v1", "ConfigMap", configmap(f"owner-{policy.lower()}")
        )
        for policy in ("Background", "Foreground", "Orphan")
    }
    for policy, owner in owners.items():
        for i in range(3):
            server.storage.create_unadmitted(
                "v1", "ConfigMap", owned_by(owner, f"dep-{policy.lower()}-{i}")
            )
    server.storage.create_unadmitted("v1", "Namespace", {"metadata": {"name": "doomed"}})
    server.storage.create_unadmitted("v1", "ConfigMap", configmap("inside", namespace="doomed"))
    await server.storage.gc.stop()
    for policy in owners:
        await server.storage.delete(rt, "default", f"owner-{policy.lower()}", policy=policy)
    await server.storage.delete(server.storage.resource("v1", "namespaces"), "", "doomed")
    await server.stop()

    server = await started(path)
    try:
        await asyncio.wait_for(server.storage.gc.idle(), 20)
        names = {
            o["metadata"]["name"] for o in server.storage.objects("v1", "configmaps", "default")
        }
        assert names == {"dep-orphan-0", "dep-orphan-1", "dep-orphan-2"}
        for name in names:
            obj = server.storage.get_object("v1", "configmaps", "default", name)
            assert obj is not None and "ownerReferences" not in obj["metadata"]
        assert server.storage.get_object("v1", "namespaces", "", "doomed") is None
        assert server.storage.objects("v1", "configmaps", "doomed") == []
    finally:
        await server.stop()


async def test_a_dependent_keeps_its_remaining_owners_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    server = await started(path)
    rt = server.storage.resource("v1", "configmaps")
    gone = server.storage.create_unadmitted("v1", "ConfigMap", configmap("gone"))
    stays = server.storage.create_unadmitted("v1", "ConfigMap", configmap("stays"))
    dep = owned_by(gone, "dep")
    dep["metadata"]["ownerReferences"] += owned_by(stays, "x")["metadata"]["ownerReferences"]
    server.storage.create_unadmitted("v1", "ConfigMap", dep)
    await server.storage.gc.stop()
    await server.storage.delete(rt, "default", "gone")
    await server.stop()

    server = await started(path)
    try:
        await asyncio.wait_for(server.storage.gc.idle(), 20)
        kept = server.storage.get_object("v1", "configmaps", "default", "dep")
        assert kept is not None
        assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["stays"]
    finally:
        await server.stop()


async def test_a_file_from_before_row_checksums_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = sqlite3.connect(path)
    old.executescript(
        """
        CREATE TABLE objects (
            grp TEXT NOT NULL, plural TEXT NOT NULL, namespace TEXT NOT NULL,
            name TEXT NOT NULL, rv INTEGER NOT NULL, body TEXT NOT NULL,
            PRIMARY KEY (grp, plural, namespace, name)
        );
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """
    )
    body = {**configmap("old"), "metadata": {"name": "old", "namespace": "default", "uid": "u1"}}
    old.execute(
        "INSERT INTO objects VALUES ('', 'configmaps', 'default', 'old', 7, ?)",
        (json.dumps(body),),
    )
    old.execute("INSERT INTO meta VALUES ('rv', '9')")
    old.commit()
    old.close()
    server = await started(path)
    try:
        kept = server.storage.get_object("v1", "configmaps", "default", "old")
        assert kept is not None and kept["metadata"]["uid"] == "u1"
        created = server.storage.create_unadmitted("v1", "ConfigMap", configmap("new"))
        assert int(created["metadata"]["resourceVersion"]) > 9
    finally:
        await server.stop()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (1,)
    assert db.execute("SELECT crc IS NULL FROM objects WHERE name = 'old'").fetchone() == (1,)
    assert db.execute("SELECT crc IS NULL FROM objects WHERE name = 'new'").fetchone() == (0,)
    db.close()


async def test_collection_whose_write_cannot_be_stored_is_retried(tmp_path: Path) -> None:
    server = await started(tmp_path / "state.db")
    try:
        owner = server.storage.create_unadmitted("v1", "ConfigMap", configmap("owner"))
        server.storage.create_unadmitted("v1", "ConfigMap", owned_by(owner, "dep"))
        persist = server.storage.store.backend
        assert persist is not None
        failures: list[int] = []

        def failing_twice(writes: list[Write]) -> None:
            if len(failures) < 2:
                failures.append(len(writes))
                raise APIError(503, "ServiceUnavailable", "injected: the disk is full")
            persist(writes)

        await asyncio.wait_for(server.storage.gc.idle(), 20)  # nothing queued but what follows
        await server.storage.delete(server.storage.resource("v1", "configmaps"), "default", "owner")
        # The owner's delete is stored; the collector's first two writes are not.
        server.storage.store.backend = failing_twice
        await asyncio.wait_for(server.storage.gc.idle(), 20)
        assert failures == [1, 1]
        assert server.storage.get_object("v1", "configmaps", "default", "dep") is None
    finally:
        await server.stop()
