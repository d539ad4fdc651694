"""Fixtures for driving the real ``kubectl`` against the embedded API server.

The server runs in a background thread with its own event loop (kubectl is a subprocess, so
the test thread must stay free to wait on it); :attr:`Kubectl.ready` is set once the server
listens, so nothing sleeps. Tests reach the server's own methods through :meth:`Kubectl.call`,
which runs a coroutine on the server's loop, never touching its state from the test thread.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from trainer.local.apiserver import APIServer

T = TypeVar("T")

KUBECTL = "/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else shutil.which("kubectl")
SKIP_REASON = "needs the kubectl binary (/usr/bin/kubectl or kubectl on PATH)"
START_TIMEOUT = 10.0
DEFAULT_TIMEOUT = 20.0


@dataclass
class Kubectl:
    """A running embedded API server and a kubeconfig kubectl can use with it."""

    url: str
    kubeconfig: str
    server: APIServer
    loop: asyncio.AbstractEventLoop
    home: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting the server's CA (for direct HTTPS requests)."""
        return self.server.client_ssl_context()

    def command(self, *args: str) -> list[str]:
        assert KUBECTL is not None
        return [KUBECTL, f"--cache-dir={self.home}/cache", *args]

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl to completion (bounded by ``timeout``); ``check`` fails the test on a
        non-zero exit and shows what kubectl printed."""
        proc = subprocess.run(
            self.command(*args),
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"kubectl {' '.join(args)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start a long-running kubectl (``get -w``, ``wait``); the caller bounds and ends it."""
        return subprocess.Popen(
            self.command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 10.0) -> T:
        """Run ``make()`` (a coroutine) on the server's loop and return its result."""

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)


def _serve(holder: dict[str, Any], ready: threading.Event, home: str) -> None:
    """The server thread: start, report through ``holder`` and ``ready``, serve until the
    ``stop`` future of ``holder`` is resolved, then stop the server."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        server = APIServer()
        loop.run_until_complete(server.start())
        kubeconfig = os.path.join(home, "kubeconfig")
        server.write_kubeconfig(kubeconfig)
        stopped: asyncio.Future[None] = loop.create_future()
        holder.update(server=server, loop=loop, kubeconfig=kubeconfig, stop=stopped)
    except BaseException as exc:  # reported to the fixture, which fails cleanly
        holder["error"] = exc
        ready.set()
        loop.close()
        return
    ready.set()
    try:
        loop.run_until_complete(stopped)
        loop.run_until_complete(server.stop())
    finally:
        loop.close()


@contextmanager
def kubectl_server(prefix: str = "kubectl-conformance-") -> Iterator[Kubectl]:
    """Start an embedded API server in a background thread (no CRDs installed) and configure
    kubectl for it; stopped on exit. For a test module that needs a server of its own."""
    with tempfile.TemporaryDirectory(prefix=prefix) as home:
        holder: dict[str, Any] = {}
        ready = threading.Event()
        thread = threading.Thread(
            target=_serve, args=(holder, ready, home), name="apiserver", daemon=True
        )
        thread.start()
        if not ready.wait(START_TIMEOUT):
            pytest.fail("the embedded API server did not start")
        if "error" in holder:
            raise holder["error"]
        server: APIServer = holder["server"]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "KUBECONFIG": holder["kubeconfig"],
            "LANG": "C.UTF-8",
        }
        Path(home, "cache").mkdir()
        try:
            yield Kubectl(server.url, holder["kubeconfig"], server, holder["loop"], home, env)
        finally:
            loop: asyncio.AbstractEventLoop = holder["loop"]
            stopped: asyncio.Future[None] = holder["stop"]
            loop.call_soon_threadsafe(stopped.set_result, None)
            thread.join(timeout=10)


@pytest.fixture(scope="session")
def kubectl() -> Iterator[Kubectl]:
    """The embedded API server in a background thread, and kubectl configured for it."""
    if KUBECTL is None:
        pytest.skip(SKIP_REASON)
    with kubectl_server() as running:
        yield running
