"""Listeners under abuse (trainer/listeners, docs/local-plane.md "Listeners under abuse"): a
connection that sends no complete request head in time is dropped, TLS handshake included; a
request that has arrived is never cut, however long its answer streams (the API server's
watches); connections beyond the cap are closed at once and leave the others served; the API
server closes the connection of a client that fails authentication; the descriptor limit is
raised."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from aiohttp import web

from trainer.listeners.aiohttp_site import GuardedSite
from trainer.listeners.guard import (
    ENV_HEADER_TIMEOUT,
    ENV_MAX_CONNECTIONS,
    GuardedServer,
    ListenerLimits,
    default_limits,
)
from trainer.listeners.uvicorn_server import GuardedUvicornServer
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.auth.tls import ServingTLS
from trainer.machinery.sockets import bind_socket

TIMEOUT = 0.4


async def streaming(request: web.Request) -> web.StreamResponse:
    """Answers for 3 x TIMEOUT, a chunk at a time (a watch, an event stream)."""
    resp = web.StreamResponse()
    await resp.prepare(request)
    for _ in range(6):
        await resp.write(b"tick\n")
        await asyncio.sleep(TIMEOUT / 2)
    await resp.write_eof()
    return resp


@asynccontextmanager
async def aiohttp_listener(
    limits: ListenerLimits, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[int, GuardedServer]]:
    app = web.Application()
    app.router.add_get("/", streaming)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = GuardedSite(
        runner, bind_socket("127.0.0.1", 0), name="test", ssl_context=tls, limits=limits
    )
    await site.start()
    server = site._server
    assert isinstance(server, GuardedServer)
    try:
        yield site.port, server
    finally:
        await runner.cleanup()


async def closed_after(reader: asyncio.StreamReader) -> float:
    """Seconds until the server closes the connection (EOF or reset), awaited."""
    started = time.monotonic()
    try:
        while await reader.read(1024):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


async def get(port: int, tls: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None
    )
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    body = await reader.read()
    writer.close()
    return body


async def test_idle_and_slow_connections_are_dropped_and_a_long_answer_is_not() -> None:
    async with aiohttp_listener(ListenerLimits(50, TIMEOUT)) as (port, server):
        idle, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        slow, slow_writer = await asyncio.open_connection("127.0.0.1", port)
        slow_writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: no head
        waited = await asyncio.gather(closed_after(idle), closed_after(slow))
        assert all(TIMEOUT * 0.8 <= w < TIMEOUT + 2 for w in waited), waited
        started = time.monotonic()
        body = await get(port)
        assert body.count(b"tick") == 6 and time.monotonic() - started >= TIMEOUT * 2
        for writer in (idle_writer, slow_writer):
            writer.close()
        # Every slot was given back.
        await wait_for(lambda: server.open == 0)


async def wait_for(condition: Callable[[], bool], timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def test_connections_beyond_the_cap_are_closed_at_once() -> None:
    async with aiohttp_listener(ListenerLimits(3, 30)) as (port, server):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await wait_for(lambda: server.open == 3)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_after(reader) < 2  # not the 30 s of the deadline
        assert server.refused == 1 and server.open == 3
        writer.close()
        held[0][1].close()
        await wait_for(lambda: server.open == 2)
        assert b"tick" in await get(port)  # a slot was free again
        for _, w in held[1:]:
            w.close()


async def test_a_tls_listener_drops_a_socket_that_never_says_hello() -> None:
    tls = ServingTLS()
    async with aiohttp_listener(ListenerLimits(50, TIMEOUT), tls.server_context()) as (port, _):
        silent, writer = await asyncio.open_connection("127.0.0.1", port)
        assert TIMEOUT * 0.8 <= await closed_after(silent) < TIMEOUT + 2
        writer.close()
        # Handshake, then no request: dropped as well.
        quiet, quiet_writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=tls.client_context(), server_hostname="127.0.0.1"
        )
        assert await closed_after(quiet) < TIMEOUT + 2
        quiet_writer.close()
        assert (await get(port, tls.client_context())).count(b"tick") == 6


async def sse_app(
    scope: dict[str, Any], receive: Any, send: Callable[..., Awaitable[None]]
) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for _ in range(6):
        await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
        await asyncio.sleep(TIMEOUT / 2)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def test_uvicorn_on_a_guarded_listener() -> None:
    config = uvicorn.Config(sse_app, http="h11", lifespan="off", log_config=None)
    server = GuardedUvicornServer(config, name="test", limits=ListenerLimits(2, TIMEOUT))
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    await server.ready.wait()
    try:
        idle, writer = await asyncio.open_connection("127.0.0.1", port)
        assert TIMEOUT * 0.8 <= await closed_after(idle) < TIMEOUT + 2
        writer.close()
        assert (await get(port)).count(b"tick") == 6
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


def test_limits_follow_the_descriptor_limit_and_the_environment(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(ENV_MAX_CONNECTIONS, raising=False)
    monkeypatch.delenv(ENV_HEADER_TIMEOUT, raising=False)
    limits = default_limits()
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # as default_limits() left it
    assert limits == ListenerLimits(max(16, min(4096, soft // 10)), 10.0)
    monkeypatch.setenv(ENV_MAX_CONNECTIONS, "200")
    monkeypatch.setenv(ENV_HEADER_TIMEOUT, "2.5")
    assert default_limits() == ListenerLimits(200, 2.5)
    monkeypatch.setenv(ENV_MAX_CONNECTIONS, "lots")
    with caplog.at_level(logging.WARNING):
        assert default_limits().max_connections == limits.max_connections
    assert f"{ENV_MAX_CONNECTIONS}='lots' is not a positive number" in caplog.text


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip(f"the hard descriptor limit ({hard}) leaves nothing to raise to")
    code = (
        "import resource; from trainer.listeners.guard import default_limits; "
        "cap = default_limits().max_connections; "
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], cap)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("TRAINER_LISTENER_")},
    )
    soft, cap = map(int, done.stdout.split())
    assert soft == hard and cap == max(16, min(4096, hard // 10))


async def test_the_api_server_drops_idle_sockets_and_strangers_but_not_a_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_HEADER_TIMEOUT, str(TIMEOUT))
    server = APIServer()
    await server.start()
    tls = server.client_ssl_context()

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=tls, server_hostname="127.0.0.1"
        )

    def request(path: str, token: str) -> bytes:
        return (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Authorization: Bearer {token}\r\n\r\n"
        ).encode()

    try:
        idle, idle_writer = await connect()
        assert TIMEOUT * 0.8 <= await closed_after(idle) < TIMEOUT + 2
        idle_writer.close()
        # A wrong token: 401, and the connection is closed (no keep-alive for strangers).
        stranger, stranger_writer = await connect()
        stranger_writer.write(request("/api/v1/namespaces", "not-the-token"))
        answer = await asyncio.wait_for(stranger.read(), 5)  # to EOF
        assert answer.startswith(b"HTTP/1.1 401")
        stranger_writer.close()
        # A watch outlives the deadline and still delivers.
        watch, watch_writer = await connect()
        watch_writer.write(request("/api/v1/namespaces/default/configmaps?watch=1", server.token))
        assert b" 200 " in await watch.readuntil(b"\r\n\r\n")
        with pytest.raises(TimeoutError):  # neither data nor a close for 3 deadlines
            await asyncio.wait_for(watch.read(1), TIMEOUT * 3)
        server.storage.create_unadmitted("v1", "ConfigMap", {"metadata": {"name": "late"}})
        seen = b""
        while b'"late"' not in seen:
            chunk = await asyncio.wait_for(watch.read(4096), 5)
            assert chunk, "the watch was closed"
            seen += chunk
        assert b'"ADDED"' in seen
        watch_writer.close()
    finally:
        await server.stop()
