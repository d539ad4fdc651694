"""A listening socket served under two limits (docs/local-plane.md, "Listeners under abuse").

Why: the local plane's servers share one process, and so one table of file descriptors. Before
these limits, 20,000 idle sockets opened by another user to the dashboard used every
descriptor of ``trainer up``: the API server could not accept kubectl, pods could not start,
and every failed ``accept`` was logged. Now each listener

1. **drops a connection that has not sent a complete request head** (the bytes up to the
   blank line that ends the headers) within :attr:`ListenerLimits.header_timeout` seconds of
   being accepted, TLS handshake included (Go's ``ReadHeaderTimeout``). Once a request head
   has arrived the connection is the server's: a watch, an event stream or a log that lasts
   hours is never cut, and idle time between requests is the server's keep-alive timeout;
2. **holds at most** :attr:`ListenerLimits.max_connections` **connections**: one accepted
   beyond that is closed at once, before any TLS or HTTP work, so a flood against one
   listener leaves descriptors for the others. The default is a tenth of the process's
   descriptor limit (at most :data:`MAX_CONNECTIONS_CEILING`), after :func:`raise_fd_limit`
   has raised the soft limit to the hard one, as kubelet and kube-apiserver do at start.

Refusals and failed accepts are logged at most once per :data:`WARN_INTERVAL_SECONDS` per
listener (with a count); single dropped connections only at debug level.

:func:`serve_guarded` runs the accept loop for any asyncio protocol factory (uvicorn's and
aiohttp's), and returns a :class:`GuardedServer` that stands where ``loop.create_server``'s
server would. Standard library only, so lean processes (the dashboard) can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

HEADER_TIMEOUT_SECONDS = 10.0
"""Default time from accept to a complete first request head (TLS handshake included)."""
MAX_CONNECTIONS_CEILING = 4096
MAX_CONNECTIONS_FLOOR = 16
FD_SHARE = 10
"""A listener holds at most 1/FD_SHARE of the descriptor limit: five listeners at their caps
leave half of it for pods' pipes, clients and files."""
FALLBACK_FD_TARGET = 65536
"""Soft limit asked for when the hard limit is unlimited (no kernel takes "unlimited")."""
WARN_INTERVAL_SECONDS = 60.0
ACCEPT_PAUSE_SECONDS = 1.0
"""How long accepting pauses when the process is out of descriptors (asyncio's own delay)."""
ENV_MAX_CONNECTIONS = "TRAINER_LISTENER_MAX_CONNECTIONS"
ENV_HEADER_TIMEOUT = "TRAINER_LISTENER_HEADER_TIMEOUT"
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True)
class ListenerLimits:
    max_connections: int
    header_timeout: float


def raise_fd_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (or to
    :data:`FALLBACK_FD_TARGET` when that is unlimited); returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = FALLBACK_FD_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as err:  # e.g. above fs.nr_open: keep what we have
            log.debug("cannot raise the descriptor limit to %d: %s", target, err)
    return FALLBACK_FD_TARGET if soft == resource.RLIM_INFINITY else soft


def _env_number(name: str, default: float, kind: Callable[[str], float]) -> float:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = 0
    if value <= 0:
        log.warning("%s=%r is not a positive number; using %s", name, text, default)
        return default
    return value


def default_limits() -> ListenerLimits:
    """The limits of a listener made now: from the descriptor limit (raised first) and the
    environment (``TRAINER_LISTENER_MAX_CONNECTIONS``, ``TRAINER_LISTENER_HEADER_TIMEOUT``)."""
    soft = raise_fd_limit()
    cap = max(MAX_CONNECTIONS_FLOOR, min(MAX_CONNECTIONS_CEILING, soft // FD_SHARE))
    return ListenerLimits(
        max_connections=int(_env_number(ENV_MAX_CONNECTIONS, cap, int)),
        header_timeout=_env_number(ENV_HEADER_TIMEOUT, HEADER_TIMEOUT_SECONDS, float),
    )


def dual_stack_socket(port: int, *, backlog: int = 2048) -> socket.socket:
    """A listening, non-blocking TCP socket on every interface, IPv4 and IPv6 where the
    system has both (what aiohttp's ``host=None`` gives, in one socket so port 0 is one
    port)."""
    from trainer.machinery.sockets import bind_socket  # noqa: PLC0415 - stdlib-only sibling, kept lazy

    if not socket.has_dualstack_ipv6():
        return bind_socket("0.0.0.0", port, backlog=backlog)
    return bind_socket("::", port, backlog=backlog, dual_stack=True)


class _Throttled:
    """A warning logged at most once per :data:`WARN_INTERVAL_SECONDS`, saying how many times
    it happened since the last one was logged."""

    def __init__(self) -> None:
        self.count = 0
        self._last: float | None = None

    def warn(self, message: str, *args: Any) -> None:
        self.count += 1
        now = time.monotonic()
        if self._last is not None and now - self._last < WARN_INTERVAL_SECONDS:
            return
        if self._last is not None:
            message += f" ({self.count} times in the last {now - self._last:.0f} s)"
        log.warning(message, *args)
        self._last = now
        self.count = 0


class _HeadDeadline(asyncio.Protocol):
    """Stands in front of the server's protocol for one connection: passes everything
    through, and aborts the connection if no complete request head arrived by ``deadline``
    (loop time). Releases the listener's slot when the connection ends."""

    def __init__(
        self, inner: asyncio.Protocol, deadline: float, release: Callable[[], None]
    ) -> None:
        self.inner = inner
        self.deadline = deadline
        self.head_seen = False
        self._release: Callable[[], None] | None = release
        self._tail = b""
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self.inner.connection_made(transport)
        if not self.head_seen:
            self._timer = asyncio.get_running_loop().call_at(self.deadline, self._expire)

    def _expire(self) -> None:
        if not self.head_seen and self._transport is not None:
            log.debug("dropping a connection that sent no request head in time")
            abort = getattr(self._transport, "abort", self._transport.close)
            abort()

    def data_received(self, data: bytes) -> None:
        if not self.head_seen:
            seen = self._tail + data
            if _HEAD_END in seen:
                self.head_seen = True
                self._tail = b""
                if self._timer is not None:
                    self._timer.cancel()
            else:
                self._tail = seen[-(len(_HEAD_END) - 1) :]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.release()
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class GuardedServer(asyncio.AbstractServer):
    """One listening socket served under :class:`ListenerLimits`; what
    ``loop.create_server`` would return, for uvicorn and aiohttp. It owns the socket:
    :meth:`close` stops accepting and closes it (open connections are the server's to end)."""

    def __init__(
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        sock: socket.socket,
        *,
        ssl_context: ssl.SSLContext | None,
        limits: ListenerLimits,
        name: str,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._factory = protocol_factory
        self._sock: socket.socket | None = sock
        self._ssl = ssl_context
        self.limits = limits
        self.name = name
        self.open = 0
        """Connections held now: accepted and not yet closed."""
        self.refused = 0
        """Connections closed at once because :attr:`open` was at the cap (since start)."""
        self._starting: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self._refusals = _Throttled()
        self._accept_errors = _Throttled()
        self._resume: asyncio.TimerHandle | None = None
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._accept_ready)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,) if self._sock is not None else ()

    def _accept_ready(self) -> None:
        sock = self._sock
        if sock is None:
            return
        for _ in range(128):  # then let the loop run other work; the reader fires again
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:
                if err.errno == errno.ECONNABORTED:
                    continue
                if err.errno in _OUT_OF_RESOURCES:
                    self._accept_errors.warn(
                        "%s: cannot accept a connection (%s); pausing accepts for %.0f s",
                        self.name,
                        err.strerror,
                        ACCEPT_PAUSE_SECONDS,
                    )
                    self._pause_accepting()
                    return
                raise
            self._admit(conn)

    def _pause_accepting(self) -> None:
        if self._sock is None:
            return
        self._loop.remove_reader(self._sock.fileno())

        def resume() -> None:
            self._resume = None
            if self._sock is not None:
                self._loop.add_reader(self._sock.fileno(), self._accept_ready)

        self._resume = self._loop.call_later(ACCEPT_PAUSE_SECONDS, resume)

    def _admit(self, conn: socket.socket) -> None:
        if self.open >= self.limits.max_connections:
            self.refused += 1
            conn.close()
            self._refusals.warn(
                "%s: refused a connection: %d open, the cap is %d (%s)",
                self.name,
                self.open,
                self.limits.max_connections,
                ENV_MAX_CONNECTIONS,
            )
            return
        self.open += 1
        task = self._loop.create_task(self._start(conn))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    def _released(self) -> None:
        self.open -= 1

    async def _start(self, conn: socket.socket) -> None:
        timeout = self.limits.header_timeout
        guard = _HeadDeadline(self._factory(), self._loop.time() + timeout, self._released)
        try:
            await self._loop.connect_accepted_socket(
                lambda: guard,
                conn,
                ssl=self._ssl,
                ssl_handshake_timeout=timeout if self._ssl is not None else None,
            )
        except BaseException as err:
            # A handshake that failed or took too long; or the server is closing.
            guard.release()
            conn.close()
            if isinstance(err, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
            log.debug("%s: connection not started: %s", self.name, err)

    # --- asyncio.AbstractServer ----------------------------------------------------------
    def close(self) -> None:
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(sock.fileno())
            sock.close()
        for task in list(self._starting):
            task.cancel()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()
        if self._starting:
            await asyncio.gather(*self._starting, return_exceptions=True)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._sock is not None

    async def start_serving(self) -> None:
        return None  # serving starts in the constructor

    async def serve_forever(self) -> None:
        await self._closed.wait()


async def serve_guarded(
    protocol_factory: Callable[[], asyncio.Protocol],
    sock: socket.socket,
    *,
    ssl_context: ssl.SSLContext | None = None,
    limits: ListenerLimits | None = None,
    name: str = "listener",
) -> GuardedServer:
    """Start accepting on ``sock`` (bound and listening) under ``limits``
    (:func:`default_limits` when None); ``name`` is what warnings call the listener."""
    return GuardedServer(
        protocol_factory,
        sock,
        ssl_context=ssl_context,
        limits=limits if limits is not None else default_limits(),
        name=name,
    )
