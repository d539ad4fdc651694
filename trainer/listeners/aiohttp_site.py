"""An aiohttp site on a guarded listener (:mod:`trainer.listeners.guard`): the local API
server, metrics and health probes.

aiohttp's ``TCPSite`` hands its runner's protocol factory to ``loop.create_server``;
:class:`GuardedSite` hands it to :func:`~trainer.listeners.guard.serve_guarded` with a socket
bound beforehand. The runner's cleanup stops the site (closing the listener) and then ends the
open connections, as with a ``TCPSite``.
"""

from __future__ import annotations

import socket
import ssl

from aiohttp import web

from trainer.listeners.guard import ListenerLimits, serve_guarded


class GuardedSite(web.BaseSite):
    """``runner``'s server on ``sock`` (bound and listening; the site closes it)."""

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        name: str,
        ssl_context: ssl.SSLContext | None = None,
        limits: ListenerLimits | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._sock = sock
        self._listener_name = name
        self._limits = limits

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        host, port = self._sock.getsockname()[:2]
        host = f"[{host}]" if ":" in host else host
        return f"{scheme}://{host}:{port}"

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        if server is None:
            raise RuntimeError("call runner.setup() before starting a site")
        self._server = await serve_guarded(
            server,
            self._sock,
            ssl_context=self._ssl_context,
            limits=self._limits,
            name=self._listener_name,
        )
