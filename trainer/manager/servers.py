"""Observability servers (health probes, metrics) as runnables of the servers' stage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from trainer.manager.runnable import RunnableFunc, Stage
from trainer.observability.metrics import ObservabilityServer

Served = Callable[[str | None], None]
"""Told the server's base URL once it listens (None: its address disables it)."""


def server_runnable(name: str, server: ObservabilityServer, served: Served) -> RunnableFunc:
    """``server`` as a runnable that listens before the next stage starts."""
    listening = asyncio.Event()

    async def run(stop: asyncio.Event) -> None:
        await serve(server, stop, served, listening)

    return RunnableFunc(name, Stage.SERVERS, run, started=listening)


async def serve(
    server: ObservabilityServer,
    stop: asyncio.Event,
    served: Served,
    listening: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set, then stop serving; ``listening`` is set once it listens."""
    try:
        served(await server.start())
        if listening is not None:
            listening.set()
        await stop.wait()
    finally:
        await server.stop()
