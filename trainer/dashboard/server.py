"""Serve a dashboard with uvicorn on the running event loop, next to anything else on it
(``trainer up`` runs it beside the local plane).

:class:`Dashboard` connects to the cluster through the project's client
(:mod:`trainer.kube`), checks once that the kubeconfig's user may list TrainJobs (so a wrong
kubeconfig is one clear error rather than a page that stays empty; a cluster that does not
serve them yet is waited for, :attr:`ClusterCache.waiting`), starts the watch caches,
binds the socket (a bind failure raises ``OSError``; port 0 picks a free port) and serves it
under the listener limits of :mod:`trainer.listeners.guard` (docs/local-plane.md, "Listeners
under abuse").
:attr:`Dashboard.url` is the address to open, with the access token.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
from urllib.parse import quote

import uvicorn

from trainer.dashboard.app import build_app
from trainer.dashboard.auth import Access
from trainer.dashboard.context import DashboardContext
from trainer.dashboard.watch.cache import ClusterCache
from trainer.kube.rest import Kube
from trainer.listeners.uvicorn_server import GuardedUvicornServer
from trainer.machinery.sockets import bind_socket

SHUTDOWN_SECONDS = 2


def release_memory() -> None:
    """Collect, then hand freed heap pages back to the system (glibc's ``malloc_trim``): the
    first list of every watch decodes megabytes of JSON that the cache keeps only a compact
    copy of, and without this the process keeps the peak (docs/dashboard.md, "Footprint")."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
        if trim is not None:
            trim(0)


class _Server(GuardedUvicornServer):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield  # the command that runs us owns the signals


class Dashboard:
    """One dashboard: ``await start()``, read :attr:`url`, ``await stop()``."""

    def __init__(
        self,
        kube: Kube,
        namespace: str | None,
        *,
        address: str = "127.0.0.1",
        port: int = 0,
        allow_actions: bool = False,
        allowed_hosts: frozenset[str] = frozenset(),
        cluster: str = "",
    ) -> None:
        self.kube = kube
        self.address = address
        self.cache = ClusterCache(kube, namespace)
        self.sock = bind_socket(address, port, backlog=128)
        self.port: int = self.sock.getsockname()[1]
        self.access = Access(
            cookie_name=f"trainer-dashboard-{self.port}", allowed_hosts=allowed_hosts
        )
        self.ctx = DashboardContext(self.cache, self.access, allow_actions, cluster)
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        config = uvicorn.Config(
            build_app(self.ctx),
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        )
        self._server = _Server(config, name=f"dashboard on port {self.port}", ready=self._ready)

    @property
    def url(self) -> str:
        host = self.address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/?token={quote(self.access.token)}"

    async def start(self) -> None:
        """Check access, fill the caches, serve; raises the API's refusal (``APIError``)."""
        try:
            await self.cache.start()
            release_memory()
        except BaseException:
            self.sock.close()
            await self.cache.stop()
            raise
        self._task = asyncio.create_task(self._serve(), name=f"dashboard:{self.port}")
        ready = asyncio.create_task(self._ready.wait())
        done, _ = await asyncio.wait({self._task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            ready.cancel()
            await self._task
            raise RuntimeError("the dashboard stopped before it was ready")

    async def _serve(self) -> None:
        try:
            await self._server.serve(sockets=[self.sock])
        finally:
            self.sock.close()

    async def stop(self) -> None:
        self.ctx.closing.set()
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.cache.stop()
