"""Serve an ASGI app over HTTPS with uvicorn, on a TLS context that can be reloaded: the admission
webhook (:mod:`webhooks.run`) and the status server (:mod:`trainer.statusserver`).

How the certificate reaches uvicorn: uvicorn builds its ``ssl.SSLContext`` in ``Config.load()``, and
since 0.36 accepts ``ssl_context_factory(config, default_factory)`` there. We pass a factory that
returns the caller's context (the webhook's is :class:`webhooks.certs.ServerTLS`); uvicorn hands
that very object to ``loop.create_server(ssl=...)``, and asyncio wraps every accepted connection
with it. Reloading the certificate is then ``ServerTLS.reload``: ``load_cert_chain`` on the live
context, seen by the next handshake, without restarting the server or dropping open connections.

The listening socket is bound here rather than by uvicorn, so a caller (a test) can ask for port
0 and learn the real port before any request, and a bind failure raises ``OSError`` instead of
uvicorn's ``sys.exit``. It is served under the listener limits of :mod:`trainer.listeners.guard`
(a connection cap, and a deadline for the TLS handshake and first request head;
docs/local-plane.md, "Listeners under abuse").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Generator
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from trainer.listeners.guard import ListenerLimits
from trainer.listeners.uvicorn_server import GuardedUvicornServer
from trainer.machinery.sockets import bind_socket

log = logging.getLogger(__name__)

#: Longer than Go's default idle timeout (90 s), so the API server, not us, closes idle
#: connections: a server-side close can race with a request the client just sent on it.
KEEP_ALIVE_SECONDS = 120


class _UvicornServer(GuardedUvicornServer):
    """uvicorn's server on a guarded listener, leaving signals alone when asked."""

    def __init__(
        self,
        config: uvicorn.Config,
        started: asyncio.Event,
        handle_signals: bool,
        limits: ListenerLimits | None,
        name: str,
    ) -> None:
        super().__init__(config, name=name, ready=started, limits=limits)
        self._handle_signals = handle_signals

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if self._handle_signals:
            with super().capture_signals():
                yield
        else:
            yield


class HttpsAppServer:
    """An ASGI app served over HTTPS by uvicorn (h11), on a context we keep a handle to.

    Use :meth:`serve` to run until :meth:`stop` (or SIGTERM/SIGINT when ``handle_signals``), or
    ``async with HttpsAppServer(...) as server:`` to run in the background; :attr:`port` is the
    bound port and :attr:`ready` is set once the server accepts connections.
    Shutdown is graceful: stop accepting, let in-flight requests finish (up to
    ``graceful_timeout`` seconds), then close. The listener is served under ``limits``
    (:func:`trainer.listeners.guard.default_limits` when None); ``name`` is what its warnings
    call it.
    """

    def __init__(
        self,
        app: Starlette,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext,
        *,
        graceful_timeout: float = 10.0,
        handle_signals: bool = False,
        sock: socket.socket | None = None,
        ready: asyncio.Event | None = None,
        uvicorn_options: dict[str, Any] | None = None,
        limits: ListenerLimits | None = None,
        name: str | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.ssl_context = ssl_context
        self.ready = ready if ready is not None else asyncio.Event()
        self._sock = sock or bind_socket(host, port)
        self.port: int = self._sock.getsockname()[1]
        context = ssl_context
        options: dict[str, Any] = {
            "http": "h11",
            "ws": "none",
            "lifespan": "off",
            "log_config": None,
            "access_log": False,
            "server_header": False,
            "timeout_keep_alive": KEEP_ALIVE_SECONDS,
            "timeout_graceful_shutdown": graceful_timeout,
            **(uvicorn_options or {}),
        }
        config = uvicorn.Config(
            app,
            host=host,
            port=self.port,
            ssl_context_factory=lambda _config, _default: context,
            **options,
        )
        self._server = _UvicornServer(
            config, self.ready, handle_signals, limits, name or f"HTTPS server on port {self.port}"
        )
        self._task: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        """Serve until stopped; closes the socket on the way out."""
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            self._sock.close()

    def stop(self) -> None:
        """Ask the server to shut down gracefully (returns at once; :meth:`serve` returns when
        the shutdown is done)."""
        self._server.should_exit = True

    async def __aenter__(self) -> HttpsAppServer:
        self._task = asyncio.create_task(self.serve(), name=f"https-server:{self.port}")
        ready = asyncio.create_task(self.ready.wait())
        done, _ = await asyncio.wait({self._task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            ready.cancel()
            await self._task  # raises what stopped it
            raise RuntimeError("the HTTPS server stopped before it was ready")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if self._task is not None:
            await self._task


async def serve(
    app: Starlette,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext,
    *,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
    sock: socket.socket | None = None,
    handle_signals: bool = True,
    graceful_timeout: float = 10.0,
) -> None:
    """Run the app over HTTPS until ``stop`` is set (or a signal arrives, when
    ``handle_signals``). ``ready`` is set once connections are accepted. For an ephemeral port,
    bind first with :func:`bind_socket` (``port=0``), read the port from the socket, and pass it
    as ``sock``; or use :class:`HttpsAppServer` as an async context manager."""
    server = HttpsAppServer(
        app,
        host,
        port,
        ssl_context,
        graceful_timeout=graceful_timeout,
        handle_signals=handle_signals,
        sock=sock,
        ready=ready,
    )
    watcher: asyncio.Task[None] | None = None
    if stop is not None:

        async def _stop_when_set() -> None:
            await stop.wait()
            server.stop()

        watcher = asyncio.create_task(_stop_when_set())
    try:
        await server.serve()
    finally:
        if watcher is not None:
            watcher.cancel()
