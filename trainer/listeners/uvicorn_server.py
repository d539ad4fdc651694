"""uvicorn's server on guarded listeners (:mod:`trainer.listeners.guard`): the webhook, the
status server and the dashboard.

uvicorn passes its protocol factory straight to ``loop.create_server``; :meth:`startup` makes
the same factory and serves it with :func:`~trainer.listeners.guard.serve_guarded` instead.
The rest of uvicorn (the main loop, graceful shutdown, which closes the servers in
``self.servers`` and waits for them) is unchanged.
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from trainer.listeners.guard import ListenerLimits, serve_guarded


class GuardedUvicornServer(uvicorn.Server):
    """A uvicorn server that must be given its listening sockets (``serve(sockets=...)``),
    each served under ``limits`` (:func:`~trainer.listeners.guard.default_limits` when None);
    ``ready`` is set once they accept connections."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        name: str,
        ready: asyncio.Event | None = None,
        limits: ListenerLimits | None = None,
    ) -> None:
        super().__init__(config)
        self.listener_name = name
        self.ready = ready if ready is not None else asyncio.Event()
        self.limits = limits

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if not sockets:
            raise ValueError("a guarded uvicorn server serves the sockets it is given")
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise RuntimeError(f"{self.listener_name}: the application failed to start")
        config = self.config

        def create_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        servers = [
            await serve_guarded(
                create_protocol,
                sock,
                ssl_context=config.ssl,
                limits=self.limits,
                name=self.listener_name,
            )
            for sock in sockets
        ]
        self.servers = servers  # type: ignore[assignment]  # what shutdown closes and awaits
        self.started = True
        self.ready.set()
