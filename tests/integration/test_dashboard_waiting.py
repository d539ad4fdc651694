"""The dashboard of a cluster that does not serve the Trainer CRDs yet (``trainer up
--without-controller`` before the install is applied, docs/install.md): it starts, says in
``/api/info``, its streams and its output that it waits for them, shows the TrainJobs and
runtimes once they are served, without a restart, and waits again if they are removed
(docs/dashboard.md, "What it watches").

Nothing sleeps: the test reads the page's event stream, which the dashboard writes when its
informers find the CRDs served."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from trainer.api import crds
from trainer.cli.dashboard import start_dashboard
from trainer.dashboard.watch import cache as cache_module
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer

WAIT = 10.0
WAITING = "waiting for the Kubeflow Trainer CRDs to be installed"
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
NO_STATUS: dict[str, Any] = {"waiting": None, "unavailable": {}}


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[tuple[APIServer, Kube]]:
    """An API server serving JobSet's CRD only, as ``trainer up --without-controller``."""
    server = APIServer()
    await server.start()
    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", crds.jobset_crd()
    )
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    api = await new_api_client(str(tmp_path / "kubeconfig"))
    try:
        yield server, Kube(api, timeout=5.0)
    finally:
        await api.close()
        await server.stop()


async def events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """The (event, data) pairs of a server-sent event stream."""
    event, data = "", ""
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif not line and event:
            yield event, json.loads(data)
            event, data = "", ""


Check = Callable[[str, Any], bool]


async def until(stream: AsyncIterator[tuple[str, Any]], *checks: Check) -> list[Any]:
    """Read the stream until an event passed each check, in any order (one batch may hold
    several); the data of the last event each check passed."""
    found: dict[int, Any] = {}
    async with asyncio.timeout(WAIT):
        while len(found) < len(checks):
            event, data = await anext(stream)
            found |= {i: data for i, check in enumerate(checks) if check(event, data)}
    return [found[i] for i in range(len(checks))]


def is_waiting(status: dict[str, Any]) -> bool:
    return str(status.get("waiting") or "").startswith(WAITING)


def waiting(event: str, data: Any) -> bool:
    return event == "status" and is_waiting(data)


def row(name: str) -> Check:
    return lambda event, data: event == "row" and data["name"] == name


async def test_the_dashboard_waits_for_the_trainer_crds_then_shows_them(
    plane: tuple[APIServer, Kube], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, kube = plane
    # The informers look again for the CRDs every 10-50 ms rather than every 5-10 s.
    monkeypatch.setattr(cache_module, "DISCOVERY_FIRST", 0.01)
    monkeypatch.setattr(cache_module, "DISCOVERY_CAP", 0.05)
    lines: list[str] = []
    board = await start_dashboard(kube, None, echo=lines.append)
    try:
        assert any(line.startswith(f"dashboard: {WAITING} (") for line in lines), lines
        assert not [line for line in lines if line.startswith("warning:")], lines
        base, token = board.url.split("/?token=")
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

            async def get(path: str) -> tuple[int, Any]:
                async with http.get(base + path) as resp:
                    if resp.content_type == "application/json":
                        return resp.status, await resp.json()
                    return resp.status, await resp.text()

            status, info = await get("/api/info")
            assert status == 200 and is_waiting(info), info
            assert TRAINJOB_CRD in info["waiting"] and info["unavailable"] == {}
            assert await get("/api/trainjobs") == (200, [])
            assert await get("/api/runtimes") == (200, [])
            status, detail = await get("/api/trainjobs/default/demo")
            assert status == 503 and is_waiting({"waiting": detail["error"]}), detail
            status, page = await get("/")
            assert status == 200 and 'id="waiting"' in page

            async with http.get(base + "/api/stream") as resp:
                stream = events(resp)
                assert await anext(stream) == ("snapshot", [])
                event, first = await anext(stream)
                assert waiting(event, first), first

                for crd in crds.trainer_crds():
                    server.storage.create_unadmitted(
                        "apiextensions.k8s.io/v1", "CustomResourceDefinition", crd
                    )
                server.storage.create_unadmitted(
                    "trainer.kubeflow.org/v1alpha1",
                    "ClusterTrainingRuntime",
                    {"metadata": {"name": "torch"}, "spec": {"mlPolicy": {"numNodes": 1}}},
                )
                server.storage.create_unadmitted(
                    "trainer.kubeflow.org/v1alpha1",
                    "TrainJob",
                    {"metadata": {"name": "demo"}, "spec": {"runtimeRef": {"name": "torch"}}},
                )
                # The three CRDs' informers each find theirs served: the row may come before
                # the last status.
                _, shown = await until(
                    stream, lambda e, d: (e, d) == ("status", NO_STATUS), row("demo")
                )
                assert (shown["namespace"], shown["runtime"]) == ("default", "torch")

                status, info = await get("/api/info")
                assert info["waiting"] is None and info["unavailable"] == {}
                status, rows = await get("/api/trainjobs")
                assert [(x["name"], x["runtime"]) for x in rows] == [("demo", "torch")]
                status, runtimes = await get("/api/runtimes")
                assert [x["name"] for x in runtimes] == ["torch"]
                status, detail = await get("/api/trainjobs/default/demo")
                assert status == 200 and detail["row"]["name"] == "demo"
                assert "dashboard: the Kubeflow Trainer CRDs are served" in lines

                # Removed again: the TrainJobs go and the dashboard waits again (level-based:
                # it follows what the API server serves, not a one-off event).
                assert await kube.delete(r.CRDS, None, TRAINJOB_CRD)
                server.storage.store.close_watchers()  # as a real server ends them
                gone = {"namespace": "default", "name": "demo"}
                again, _ = await until(stream, waiting, lambda e, d: (e, d) == ("gone", gone))
                assert f"({TRAINJOB_CRD} not served yet)" in again["waiting"]
                assert lines[-1].startswith(f"dashboard: {WAITING} ({TRAINJOB_CRD} not served")
    finally:
        await board.stop()
