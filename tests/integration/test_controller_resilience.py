"""The controller under restarts and API faults, against the embedded API server.

- Restarts: a burst of TrainJobs is created while controllers are started, stopped (gracefully,
  or crashed with requests in flight) and started again at random points; afterwards every
  TrainJob has exactly its objects, with the right owner and status, and nothing else exists.
- Faults: 409, 429 and 500 answers on the controller's applies, patches, creates, lists and
  watches, watch streams cut and the watch history compacted in the middle of a burst; every
  TrainJob converges, the reconcile errors and the requests stay bounded, the workers live on.

Random points come from a seeded ``random.Random``, so a failure replays; waiting is on API
requests and controller state, never on sleeping.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.builders import trainjob
from tests.integration.harness import GROUP, VERSION, Plane, jobsets_report_status, local_plane
from tests.integration.test_controller import conditions
from tests.integration.test_controller_flows import new_controller, running, until
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.informer import Informer, strip_managed_fields
from trainer.kube.rest import Kube
from trainer.local.apiserver.hooks import Fault, RequestRecord

CONTROLLER_AGENT = "trainer-controller"
"""The user agent of the controllers under test (the test's own client is ``trainer/...``)."""


@pytest.fixture
async def plane() -> AsyncIterator[Plane]:
    """The plane, where each JobSet reports its status as JobSet's controller would (the
    controller writes a TrainJob's first status once it has ``jobsStatus`` to mirror)."""
    async with local_plane() as p, jobsets_report_status(p):
        yield p


@contextmanager
def kubeconfig_file(plane: Plane) -> Iterator[str]:
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as f:
        plane.server.write_kubeconfig(f.name)
        yield f.name


class Requests:
    """What the API server served, as it serves it: the controllers' writes, the TrainJobs
    whose status a controller patched, how many TrainJobs the test created. Every request
    sets ``changed``."""

    def __init__(self, plane: Plane) -> None:
        self.changed = asyncio.Event()
        self.controller = 0  # requests of any verb, any answer
        self.controller_writes = 0  # writes that succeeded
        self.events = 0  # of which Event creations
        self.status_patched: set[str] = set()
        self.created = 0
        plane.server.storage.hooks.on_request.append(self.record)

    def record(self, rec: RequestRecord) -> None:
        if rec.user_agent.startswith(CONTROLLER_AGENT):
            self.controller += 1
            if rec.is_write and rec.code < 300:
                self.controller_writes += 1
                self.events += rec.resource == "events"
                if rec.resource == "trainjobs/status":
                    self.status_patched.add(rec.name)
        elif rec.verb == "create" and rec.resource == "trainjobs" and rec.code < 300:
            self.created += 1
        self.changed.set()

    async def until(self, check: Any, what: str, timeout: float = 30.0) -> Any:
        return await until(self.changed, check, timeout, what)


def job_names(plane: Plane) -> set[str]:
    return {
        o["metadata"]["name"]
        for o in plane.server.storage.objects(f"{GROUP}/{VERSION}", "trainjobs", "default")
        if not o["metadata"]["name"].startswith("marker")
    }


def controller_uid(obj: dict[str, Any]) -> str | None:
    refs = [x for x in obj["metadata"].get("ownerReferences") or [] if x.get("controller")]
    assert len(refs) <= 1, obj["metadata"]
    return refs[0]["uid"] if refs and refs[0]["kind"] == "TrainJob" else None


def check_converged(plane: Plane, expected: set[str]) -> None:
    """Every TrainJob in ``expected`` (and no other) exists with exactly one JobSet and one
    snapshot ConfigMap, each controlled by it, and a Pending status; every JobSet and owned
    ConfigMap belongs to an existing TrainJob."""
    jobs = {
        o["metadata"]["name"]: o
        for o in plane.server.storage.objects(f"{GROUP}/{VERSION}", "trainjobs", "default")
        if not o["metadata"]["name"].startswith("marker")
    }
    assert set(jobs) == expected
    uids = {o["metadata"]["uid"]: name for name, o in jobs.items()}
    jobsets = [
        o
        for o in plane.server.storage.objects("jobset.x-k8s.io/v1alpha2", "jobsets", "default")
        if not o["metadata"]["name"].startswith("marker")
    ]
    owned_maps = [
        o
        for o in plane.server.storage.objects("v1", "configmaps", "default")
        if o["metadata"].get("ownerReferences")
    ]
    by_owner: dict[str, Counter[str]] = {name: Counter() for name in jobs}
    for obj in [*jobsets, *owned_maps]:
        uid = controller_uid(obj)
        assert uid in uids, f"orphan {obj['kind']} {obj['metadata']['name']}"
        by_owner[uids[uid]][obj["kind"]] += 1
        suffix = "" if obj["kind"] == "JobSet" else "-runtime-snapshot"
        assert obj["metadata"]["name"] == uids[uid] + suffix
    for name, job in jobs.items():
        assert by_owner[name] == {"JobSet": 1, "ConfigMap": 1}, name
        conds = conditions(job)
        assert job["status"]["state"] == "Pending", (name, job["status"])
        assert conds.get("BuildFailed", ("False", ""))[0] == "False", (name, conds)


# --- restarts ------------------------------------------------------------------------------

BURST = 200
RESTARTS = 4
CONCURRENCY = 5  # the controller's default number of workers


async def restart_cycle(
    plane: Plane, kubeconfig: str, requests: Requests, rng: random.Random, cycle: int
) -> str:
    """Wait while no controller runs until a few more TrainJobs arrived, run one until it
    made a random number of writes (or has nothing left to do), then stop it gracefully or
    crash it with requests in flight. Returns what happened."""
    down_until = min(BURST, requests.created + rng.randint(0, 30))
    await requests.until(lambda: requests.created >= down_until, what="TrainJobs")
    api = await new_api_client(kubeconfig, qps_user_agent=CONTROLLER_AGENT)
    ctl, _ = new_controller(plane, Kube(api))
    await ctl.start_caches()
    ctl.start_workers()
    up_until = requests.controller_writes + rng.randint(10, 120)
    await requests.until(
        lambda: requests.controller_writes >= up_until or len(requests.status_patched) == BURST,
        what="controller writes",
    )
    crash = cycle % 2 == 1  # both ways of stopping, at random points
    what = (
        f"cycle {cycle}: {'crash' if crash else 'stop'} after {requests.controller_writes} "
        f"writes, {requests.created} created"
    )
    if crash:  # requests in flight fail; whatever reached the server stays
        await api.close()
        await ctl.stop()
    else:
        await ctl.stop()
        await api.close()
    return what


async def test_restarts_during_a_burst_leave_exactly_one_of_everything(plane: Plane) -> None:
    rng = random.Random(2026)
    requests = Requests(plane)
    names = [f"job-{i:03d}" for i in range(BURST)]

    async def burst() -> None:
        for name in names:
            await plane.kube.create(trainjob(name, trainer={"numNodes": 2}))

    creator = asyncio.create_task(burst(), name="burst")
    history: list[str] = []
    try:
        with kubeconfig_file(plane) as kubeconfig:
            for cycle in range(RESTARTS):
                history.append(await restart_cycle(plane, kubeconfig, requests, rng, cycle))
            await creator
            # One final controller runs until everything is settled.
            api = await new_api_client(kubeconfig, qps_user_agent=CONTROLLER_AGENT)
            try:
                async with running(plane, new_controller(plane, Kube(api))) as run:
                    await run.until(
                        lambda: (
                            len(requests.status_patched) == BURST
                            and all(
                                (
                                    (run.ctl.caches.trainjobs.get("default", n) or {}).get("status")
                                    or {}
                                ).get("state")
                                == "Pending"
                                for n in names
                            )
                        ),
                        timeout=30.0,
                        what="every TrainJob Pending",
                    )
                    caches = run.ctl.caches
                    await run.settle(caches.trainjobs, caches.jobsets, caches.config_maps)
                    await plane.server.storage.gc.idle()
                    check_converged(plane, set(names))
                    # Settled: reconciling everything again writes nothing.
                    writes = requests.controller_writes
                    for job in caches.trainjobs.list():
                        await run.ctl.reconciler.reconcile(f"default/{job['metadata']['name']}")
                    assert requests.controller_writes == writes
                    assert run.observer.counts["error"] == 0
            finally:
                await api.close()
    finally:
        if not creator.done():
            creator.cancel()
    # Each TrainJob needs 3 writes (snapshot, JobSet, status) and no Event (nothing failed). A
    # restart starts from what the API holds, so at most a write in flight at a crash is
    # repeated (one per worker).
    assert requests.events == 0, history
    assert requests.controller_writes <= 3 * BURST + RESTARTS * CONCURRENCY, history


# --- faults ----------------------------------------------------------------------------------

FAULT_BURST = 30


def patch_faults() -> list[Fault]:
    """Answers the controller's writes get instead of being served (nth counts matching
    requests; a fault fires ``times`` in a row)."""
    return [
        Fault("patch", "jobsets", 409, nth=2, times=2, message="conflict (injected)"),
        Fault("patch", "jobsets", 500, nth=6, times=1),
        Fault("patch", "configmaps", 429, nth=3, times=3, message="slow down (injected)"),
        Fault("patch", "configmaps", 500, nth=12, times=1),
        Fault("patch", "trainjobs/status", 500, nth=4, times=2),
        Fault("patch", "trainjobs/status", 409, nth=9, times=1),
        Fault("patch", "trainjobs/status", 429, nth=15, times=2),
    ]


def stream_faults() -> list[Fault]:
    """Answers the informers get when they list and watch again after the cut."""
    return [
        Fault("list", "jobsets", 500, times=2),
        Fault("list", "trainjobs", 429, times=1),
        Fault("list", "configmaps", 500, times=1),
        Fault("watch", "secrets", 500, times=1),
    ]


async def test_faults_mid_burst_converge_without_a_crash_loop(plane: Plane) -> None:
    requests = Requests(plane)
    names = [f"flaky-{i:02d}" for i in range(FAULT_BURST)]
    with kubeconfig_file(plane) as kubeconfig:
        api = await new_api_client(kubeconfig, qps_user_agent=CONTROLLER_AGENT)
    try:
        async with running(plane, new_controller(plane, Kube(api))) as run:
            start = requests.controller
            writes = patch_faults()
            for fault in writes:
                plane.server.storage.hooks.inject(fault)
            streams: list[Fault] = []
            for i, name in enumerate(names):
                await plane.kube.create(trainjob(name, trainer={"numNodes": 2}))
                if i in (FAULT_BURST // 3, 2 * FAULT_BURST // 3):
                    streams += [plane.server.storage.hooks.inject(f) for f in stream_faults()]
                    cut_and_compact(plane)
            await run.until(
                lambda: all(
                    ((plane.trainjob("default", n) or {}).get("status") or {}).get("state")
                    == "Pending"
                    and conditions(plane.trainjob("default", n)).get("BuildFailed", ("False",))[0]
                    == "False"
                    for n in names
                ),
                timeout=30.0,
                what="every TrainJob converged",
            )
            caches = run.ctl.caches
            await run.settle(caches.trainjobs, caches.jobsets, caches.config_maps, caches.secrets)
            await plane.server.storage.gc.idle()
            check_converged(plane, set(names))
            for fault in [*writes, *streams]:
                assert fault.fired == fault.times, fault  # every fault really happened
            # Bounded: one failed reconcile per failed write, and few requests per TrainJob.
            assert run.observer.counts["error"] <= sum(f.fired for f in writes)
            per_job = (requests.controller - start) / FAULT_BURST
            assert per_job < 20, per_job
            # The caches relisted after the compaction, and the workers still work.
            assert all(inf.lists >= 2 for inf in (caches.trainjobs, caches.jobsets))
            await plane.kube.create(trainjob("after", trainer={"numNodes": 2}))
            await run.until(lambda: plane.jobset("default", "after"), what="a JobSet after all")
            assert not run.ctl.queue.shutting_down
    finally:
        await api.close()


def cut_and_compact(plane: Plane) -> None:
    """Cut every watch stream and forget the watch history, so every informer comes back
    with a resourceVersion that is too old (410) and must list again. A write nobody watches
    first moves the store past any resourceVersion an informer has seen."""
    plane.server.storage.create_unadmitted(
        "v1", "ConfigMap", {"metadata": {"name": f"bump-{plane.server.storage.store.rv}"}}
    )
    plane.server.storage.store.compact()
    plane.server.storage.store.close_watchers()


# --- the controller's own writes in its caches -------------------------------------------------


async def test_own_writes_enter_the_cache_but_never_go_back_in_time(plane: Plane) -> None:
    """``Informer.record_write`` (what the reconciler calls with each API answer) makes a read
    after a write see the write; it never resurrects an object the watch saw deleted, never
    replaces a newer cached version, and ignores objects outside the informer's selector."""
    informer = Informer(plane.kube, r.CONFIGMAPS, label_selector="app")
    seen: list[tuple[str, str]] = []
    changed = asyncio.Event()

    def handler(kind: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        seen.append((kind, obj["metadata"]["name"]))
        changed.set()

    informer.add_handler(handler)
    await informer.start(timeout=10)
    try:

        def cm(name: str, **labels: str) -> dict[str, Any]:
            meta = {"name": name, "namespace": "default", "labels": labels}
            return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "1"}}

        first = await plane.kube.create(cm("one", app="x"))
        await until(changed, lambda: ("ADDED", "one") in seen, 10, "ADDED")
        assert not informer.record_write(first)  # the watch already delivered it
        # While the informer is not watching, a write's answer is newer than anything cached.
        await informer.stop()
        patched = await plane.kube.patch(r.CONFIGMAPS, "default", "one", {"data": {"k": "2"}})
        assert informer.record_write(patched)
        assert informer.get("default", "one") == strip_managed_fields(patched)
        assert not informer.record_write(first)  # an older answer never replaces a newer one
        assert informer.get("default", "one") == strip_managed_fields(patched)
        assert not informer.record_write(await plane.kube.create(cm("other")))  # no label
        assert informer.get("default", "other") is None
        await informer.start(timeout=10)
        lists = informer.lists
        await plane.kube.create(cm("later", app="x"))  # arrives after the relist
        await until(changed, lambda: ("ADDED", "later") in seen, 10, "ADDED after the relist")
        assert informer.lists == lists + 1
        assert ("MODIFIED", "one") not in seen  # the relist found the version already cached
        # An answer the watch has since seen deleted is not brought back.
        doomed = await plane.kube.create(cm("doomed", app="x"))
        await plane.kube.delete(r.CONFIGMAPS, "default", "doomed")
        await until(changed, lambda: ("DELETED", "doomed") in seen, 10, "DELETED")
        assert not informer.record_write(doomed)
        assert informer.get("default", "doomed") is None
    finally:
        await informer.stop()
