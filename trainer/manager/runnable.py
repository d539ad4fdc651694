"""What a manager runs: the :class:`Runnable` protocol, the :class:`Stage` each starts in, and
:class:`RunnableFunc`, a runnable made of one coroutine function (controller-runtime's
``Runnable``, ``RunnableFunc`` and runnable groups; docs/design.md, "The manager")."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from typing import Protocol


class Stage(enum.IntEnum):
    """Where a runnable starts. The manager starts the stages in this order, each once every
    runnable of the one before has started, and stops them in the reverse order (the runnable
    groups of controller-runtime's manager)."""

    SERVERS = 1
    """HTTP servers every replica runs: health probes, metrics."""
    WEBHOOKS = 2
    """TLS servers others call: the admission webhook, the status server (every replica)."""
    CACHES = 3
    """Watch caches: the next stage starts once every one has synced."""
    OTHERS = 4
    """Everything else every replica runs."""
    LEADER = 5
    """What only the replica holding the Lease runs (every replica without leader election):
    the controllers' workers."""


class Runnable(Protocol):
    """A part of a process that the manager starts and stops."""

    @property
    def name(self) -> str:
        """What logs and task names call it."""
        ...

    @property
    def stage(self) -> Stage:
        """When it starts (and, in reverse, stops)."""
        ...

    async def start(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then clean up and return. Raising stops the manager,
        which raises the error; returning early is allowed (nothing left to do)."""
        ...

    async def wait_started(self) -> None:
        """Return once started far enough for the next stage to start (a server listens, a
        cache has synced). Called while :meth:`start` runs; a runnable whose :meth:`start`
        returns or raises first counts as started (or failed)."""
        ...


class RunnableFunc:
    """A runnable made of ``run(stop)``. With ``started`` the manager waits, before the next
    stage, until ``run`` has set that event; without it the runnable counts as started at
    once."""

    def __init__(
        self,
        name: str,
        stage: Stage,
        run: Callable[[asyncio.Event], Awaitable[None]],
        *,
        started: asyncio.Event | None = None,
    ) -> None:
        self._name = name
        self._stage = stage
        self._run = run
        self._started = started

    def __repr__(self) -> str:
        return f"RunnableFunc({self._name!r}, {self._stage.name})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def stage(self) -> Stage:
        return self._stage

    async def start(self, stop: asyncio.Event) -> None:
        await self._run(stop)

    async def wait_started(self) -> None:
        if self._started is not None:
            await self._started.wait()
