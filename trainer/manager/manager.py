"""The manager: runnables added to it start in stages and stop in reverse order, as with
controller-runtime's ``Manager.Add`` and ``Manager.Start`` (docs/design.md, "The manager").

:meth:`Manager.start` starts each :class:`~trainer.manager.runnable.Stage` once every runnable
of the one before has started: the servers (health probes, metrics) listen, then the webhooks
start, then the watch caches sync, then the other runnables every replica runs start. The
process is then ready. Last, the manager campaigns for the Lease and starts the leader
runnables once elected (at once, without leader election). It runs until ``stop`` is set, a
runnable fails, or leadership is lost; then it stops the stages in reverse order, each
runnable told through its stage's stop event and awaited, and raises the first failure.
The liveness and readiness checks the probe server serves are the manager's
(:attr:`Manager.liveness`, :attr:`Manager.readiness`), as controller-runtime's
``AddHealthzCheck`` and ``AddReadyzCheck``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from trainer.manager.election import LeaderElection, campaign
from trainer.manager.leader import LeaderElector
from trainer.manager.runnable import Runnable, Stage
from trainer.observability.metrics import HealthChecks

log = logging.getLogger(__name__)

EVERY_REPLICA = (Stage.SERVERS, Stage.WEBHOOKS, Stage.CACHES, Stage.OTHERS)


class Manager:
    """The runnables of one process. ``leader_election``: the Lease the leader runnables need
    (None: every replica runs them); ``on_leader_change(leading)`` is told when this replica
    starts or stops leading (without leader election: leading, once, when they start)."""

    def __init__(
        self,
        *,
        leader_election: LeaderElection | None = None,
        on_leader_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.liveness = HealthChecks()
        self.readiness = HealthChecks()
        self._on_leader_change = on_leader_change
        self.elector: LeaderElector | None = (
            leader_election.elector(on_leader_change) if leader_election is not None else None
        )
        self._runnables: list[Runnable] = []
        self._started = False

    def add(self, runnable: Runnable) -> None:
        """Add ``runnable`` to its stage (before :meth:`start`)."""
        if self._started:
            raise RuntimeError(f"cannot add {runnable.name}: the manager has started")
        self._runnables.append(runnable)

    def runnables(self, stage: Stage) -> list[Runnable]:
        """The runnables of ``stage``, in the order they were added."""
        return [r for r in self._runnables if r.stage == stage]

    async def start(self, stop: asyncio.Event, *, ready: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set, a runnable fails (its error is raised once every
        runnable has stopped) or leadership is lost; ``ready`` is set once every stage but
        the leader's has started. Whatever ends it, ``stop`` is set on return: whoever else
        waits on it learns that the process stops. A manager starts once."""
        if self._started:
            raise RuntimeError("the manager has started already")
        self._started = True
        run = _Run(stop)
        try:
            for stage in EVERY_REPLICA:
                if not await run.start_stage(stage, self.runnables(stage)):
                    break
            else:
                if ready is not None:
                    ready.set()
                self._lead(run)
                await stop.wait()
        finally:
            stop.set()
            await self._stop(run)
        if run.failure is not None:
            raise run.failure

    def _lead(self, run: _Run) -> None:
        leaders = self.runnables(Stage.LEADER)
        if self.elector is None:
            if self._on_leader_change is not None:
                self._on_leader_change(True)
            run.launch(Stage.LEADER, leaders)
            return

        async def lead() -> None:
            run.launch(Stage.LEADER, leaders)
            try:
                await asyncio.get_running_loop().create_future()  # until leadership ends
            finally:
                # The leader runnables have stopped before the Lease is released.
                await run.stop_stage(Stage.LEADER)

        run.campaign = asyncio.create_task(
            campaign(self.elector, lead, run.stop), name="leader-election"
        )
        run.campaign.add_done_callback(run.watch)

    async def _stop(self, run: _Run) -> None:
        if run.campaign is not None and self.elector is not None:
            self.elector.stop()
            await asyncio.wait({run.campaign})
        for stage in reversed(Stage):
            await run.stop_stage(stage)


class _Run:
    """One run of a manager: the tasks and stop event of each stage started, and the first
    failure."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.failure: BaseException | None = None
        self.campaign: asyncio.Task[None] | None = None
        self._stops: dict[Stage, asyncio.Event] = {}
        self._tasks: dict[Stage, list[asyncio.Task[None]]] = {}

    def launch(self, stage: Stage, runnables: list[Runnable]) -> list[asyncio.Task[None]]:
        stop = self._stops[stage] = asyncio.Event()
        tasks = [asyncio.create_task(r.start(stop), name=r.name) for r in runnables]
        self._tasks[stage] = tasks
        for task in tasks:
            task.add_done_callback(self.watch)
        return tasks

    def watch(self, task: asyncio.Task[None]) -> None:
        """A runnable's task (or the campaign) ended: a failure stops the manager."""
        if not task.cancelled() and (error := task.exception()) is not None:
            self.fail(task.get_name(), error)

    def fail(self, name: str, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
            self.stop.set()
        elif error is not self.failure:
            log.error(
                "runnable failed while the manager stops",
                extra={"runnable": name, "error": str(error) or type(error).__name__},
            )

    async def start_stage(self, stage: Stage, runnables: list[Runnable]) -> bool:
        """Start ``runnables`` and wait until each has started (or ended); False when the
        manager is to stop instead (``stop`` set or a runnable failed)."""
        tasks = self.launch(stage, runnables)
        if tasks and not self.stop.is_set():
            every = asyncio.gather(*(_started(r, t) for r, t in zip(runnables, tasks, strict=True)))
            halt = asyncio.ensure_future(self.stop.wait())
            waiting: set[asyncio.Future[Any]] = {every, halt}
            try:
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                halt.cancel()
                every.cancel()
            if every.done() and not every.cancelled() and (error := every.exception()):
                self.fail(stage.name, error)
        return not self.stop.is_set()

    async def stop_stage(self, stage: Stage) -> None:
        """Tell the stage's runnables to stop and wait until they have."""
        if stage in self._stops:
            self._stops[stage].set()
            if self._tasks[stage]:
                await asyncio.wait(self._tasks[stage])


async def _started(runnable: Runnable, task: asyncio.Task[None]) -> None:
    """Until ``runnable`` has started or its task has ended (a failure is the task's to
    report)."""
    waiter = asyncio.ensure_future(runnable.wait_started())
    try:
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if waiter.done() and not waiter.cancelled():
        waiter.result()
