"""The manager (trainer/manager): stages start in order, each once the one before has
started, and stop in reverse; a failing runnable stops it and its error is raised; the
leader runnables run only while the Lease is held, and a lost Lease stops the process."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.leases import MemoryLeases
from trainer.manager.election import LeaderElection
from trainer.manager.manager import Manager
from trainer.manager.runnable import RunnableFunc, Stage


class Recorder:
    """Runnables that note when they start and stop."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def runnable(
        self, name: str, stage: Stage, *, started: asyncio.Event | None = None
    ) -> RunnableFunc:
        async def run(stop: asyncio.Event) -> None:
            self.events.append(f"start {name}")
            try:
                await stop.wait()
            finally:
                self.events.append(f"stop {name}")

        return RunnableFunc(name, stage, run, started=started)


async def start(manager: Manager, stop: asyncio.Event) -> tuple[asyncio.Task[None], asyncio.Event]:
    ready = asyncio.Event()
    task = asyncio.create_task(manager.start(stop, ready=ready))
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiting}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    return task, ready


async def test_stages_start_in_order_and_stop_in_reverse() -> None:
    rec = Recorder()
    leading: list[bool] = []
    manager = Manager(on_leader_change=leading.append)
    # Added out of order: the stage decides, not the order of adding.
    for name, stage in (
        ("workers", Stage.LEADER),
        ("states", Stage.OTHERS),
        ("caches", Stage.CACHES),
        ("webhook", Stage.WEBHOOKS),
        ("probes", Stage.SERVERS),
    ):
        manager.add(rec.runnable(name, stage))
    stop = asyncio.Event()
    task, ready = await start(manager, stop)
    assert ready.is_set()
    await asyncio.sleep(0)  # the leader stage's task begins
    assert rec.events == [
        "start probes",
        "start webhook",
        "start caches",
        "start states",
        "start workers",
    ]
    assert leading == [True]  # without leader election: leading, once
    stop.set()
    await asyncio.wait_for(task, 5)
    assert rec.events[5:] == [
        "stop workers",
        "stop states",
        "stop caches",
        "stop webhook",
        "stop probes",
    ]


async def test_the_next_stage_waits_until_the_caches_have_synced() -> None:
    rec = Recorder()
    synced = asyncio.Event()
    manager = Manager()
    manager.add(rec.runnable("caches", Stage.CACHES, started=synced))
    manager.add(rec.runnable("states", Stage.OTHERS))
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(manager.start(stop, ready=ready))
    for _ in range(5):
        await asyncio.sleep(0)
    assert rec.events == ["start caches"] and not ready.is_set()
    synced.set()
    await asyncio.wait_for(ready.wait(), 5)
    assert rec.events == ["start caches", "start states"]
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_a_stop_before_the_caches_sync_starts_nothing_more() -> None:
    rec = Recorder()
    manager = Manager()
    manager.add(rec.runnable("caches", Stage.CACHES, started=asyncio.Event()))  # never synced
    manager.add(rec.runnable("workers", Stage.LEADER))
    stop = asyncio.Event()
    ready = asyncio.Event()
    task = asyncio.create_task(manager.start(stop, ready=ready))
    await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert rec.events == ["start caches", "stop caches"] and not ready.is_set()


async def test_a_failing_runnable_stops_the_manager_and_its_error_is_raised() -> None:
    rec = Recorder()
    manager = Manager()
    manager.add(rec.runnable("probes", Stage.SERVERS))
    failed = asyncio.Event()

    async def broken(stop: asyncio.Event) -> None:
        await failed.wait()
        raise OSError("address already in use")

    manager.add(RunnableFunc("webhook", Stage.WEBHOOKS, broken))
    manager.add(rec.runnable("workers", Stage.LEADER))
    stop = asyncio.Event()
    task, ready = await start(manager, stop)
    assert ready.is_set()
    failed.set()
    with pytest.raises(OSError, match="address already in use"):
        await asyncio.wait_for(task, 5)
    assert stop.is_set()  # whoever else waits on it learns that the process stops
    assert rec.events == ["start probes", "start workers", "stop workers", "stop probes"]


async def test_a_runnable_failing_before_it_started_stops_the_start() -> None:
    rec = Recorder()
    manager = Manager()

    async def unsynced(stop: asyncio.Event) -> None:
        raise TimeoutError("Informer(trainjobs in *, 0 cached) did not sync within 60s")

    manager.add(RunnableFunc("caches", Stage.CACHES, unsynced, started=asyncio.Event()))
    manager.add(rec.runnable("states", Stage.OTHERS))
    stop = asyncio.Event()
    ready = asyncio.Event()
    with pytest.raises(TimeoutError, match="did not sync"):
        await asyncio.wait_for(manager.start(stop, ready=ready), 5)
    assert rec.events == [] and not ready.is_set()


async def test_a_runnable_that_returns_early_does_not_stop_the_others() -> None:
    rec = Recorder()
    manager = Manager()

    async def nothing_to_do(stop: asyncio.Event) -> None:
        return

    manager.add(RunnableFunc("metrics", Stage.SERVERS, nothing_to_do, started=asyncio.Event()))
    manager.add(rec.runnable("workers", Stage.LEADER))
    stop = asyncio.Event()
    task, ready = await start(manager, stop)
    assert ready.is_set() and not task.done()
    stop.set()
    await asyncio.wait_for(task, 5)
    assert rec.events == ["start workers", "stop workers"]


async def test_runnables_are_added_before_the_start() -> None:
    manager = Manager()
    stop = asyncio.Event()
    stop.set()
    await manager.start(stop)
    with pytest.raises(RuntimeError, match="has started"):
        manager.add(Recorder().runnable("late", Stage.OTHERS))
    with pytest.raises(RuntimeError, match="has started"):
        await manager.start(stop)


def election(leases: MemoryLeases) -> LeaderElection:
    return LeaderElection(
        leases,
        namespace="kubeflow-system",
        lease_duration=0.6,
        renew_deadline=0.4,
        retry_period=0.05,
    )


async def test_the_leader_stage_runs_while_the_lease_is_held_and_stops_before_release() -> None:
    rec = Recorder()
    leases = MemoryLeases()
    leading: list[bool] = []
    manager = Manager(leader_election=election(leases), on_leader_change=leading.append)
    manager.add(rec.runnable("states", Stage.OTHERS))
    manager.add(rec.runnable("workers", Stage.LEADER))
    assert manager.elector is not None
    stop = asyncio.Event()
    task, _ready = await start(manager, stop)
    await asyncio.wait_for(manager.elector.leading.wait(), 5)
    await asyncio.sleep(0)
    assert rec.events == ["start states", "start workers"] and leading == [True]
    stop.set()
    await asyncio.wait_for(task, 5)
    # The workers stopped first; the Lease was released (graceful stop).
    assert rec.events[2:] == ["stop workers", "stop states"]
    assert leading == [True, False]
    assert leases.lease is not None and leases.lease["spec"]["holderIdentity"] == ""


async def test_a_lost_lease_stops_the_process(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="trainer.manager.election")
    rec = Recorder()
    leases = MemoryLeases()
    manager = Manager(leader_election=election(leases))
    manager.add(rec.runnable("workers", Stage.LEADER))
    assert manager.elector is not None
    stop = asyncio.Event()
    task, _ready = await start(manager, stop)
    await asyncio.wait_for(manager.elector.leading.wait(), 5)
    leases.failing = True  # renewals fail until the renew deadline passes
    await asyncio.wait_for(task, 5)  # returns: leadership lost is no error of the manager
    assert stop.is_set()
    assert rec.events == ["start workers", "stop workers"]
    assert "leader election lost; stopping" in caplog.messages
