"""The dashboard's access rules (trainer/dashboard/auth.py), request by request through the
ASGI middleware: Host check, token to session cookie and key, bearer tokens, the key (CSRF
token) on every API request and Origin on writes, session expiry, security headers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trainer.dashboard.auth import (
    MAX_SESSIONS,
    SESSION_LIFETIME_SECONDS,
    Access,
    AccessMiddleware,
    host_allowed,
)

Answer = tuple[int, dict[str, str], bytes, dict[str, Any] | None]


async def call(
    access: Access,
    path: str = "/",
    *,
    query: str = "",
    method: str = "GET",
    headers: dict[str, str] | None = None,
) -> Answer:
    """One request; returns (status, headers, body, the scope the app saw or None)."""
    seen: dict[str, Any] = {}

    async def app(scope: Any, _receive: Any, send: Any) -> None:
        seen.update(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"app"})

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    all_headers = {"host": "127.0.0.1:8080", **(headers or {})}
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": query.encode(),
        "headers": [(k.encode(), v.encode()) for k, v in all_headers.items()],
    }
    await AccessMiddleware(app, access)(scope, receive, send)
    start = sent[0]
    out = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], out, b"".join(m.get("body", b"") for m in sent[1:]), seen or None


def test_host_names_allowed() -> None:
    assert host_allowed("127.0.0.1:8080") and host_allowed("[::1]:80")
    assert host_allowed("localhost:1") and host_allowed("10.1.2.3")
    assert not host_allowed("evil.example:8080") and not host_allowed("")
    assert host_allowed("box.lan:9", frozenset({"box.lan"}))


async def test_a_foreign_host_is_refused_even_with_the_token() -> None:
    access = Access()
    status, _, body, seen = await call(
        access, query=f"token={access.token}", headers={"host": "rebind.example:8080"}
    )
    assert status == 403 and b"Host 'rebind.example:8080' is not allowed" in body
    assert seen is None and not access.sessions


async def test_the_token_becomes_a_session_cookie_and_a_key_and_leaves_the_url() -> None:
    access = Access(cookie_name="trainer-dashboard-8080")
    status, headers, _, _ = await call(access, "/runtimes", query=f"a=1&token={access.token}")
    cookie = headers["set-cookie"]
    session = cookie.split(";")[0].split("=", 1)[1]
    key = access.csrf_of(session)
    # The key rides in the fragment, which the browser never sends to a server.
    assert status == 303 and headers["location"] == f"/runtimes?a=1#session-key={key}"
    assert cookie.startswith("trainer-dashboard-8080=") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie and f"Max-Age={SESSION_LIFETIME_SECONDS}" in cookie
    status, headers, body, _ = await call(
        access, headers={"cookie": f"other=1; trainer-dashboard-8080={session}"}
    )
    assert status == 200 and body == b"app"  # a page: the cookie is enough
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"
    both = {"cookie": f"trainer-dashboard-8080={session}", "x-csrf-token": str(key)}
    status, _, body, _ = await call(access, "/api/trainjobs", headers=both)
    assert status == 200 and body == b"app"


@pytest.mark.parametrize(
    ("query", "headers", "why"),
    [
        ("", {}, b"no session"),
        ("token=wrong", {}, b"wrong access token"),
        ("", {"cookie": "trainer-dashboard=forged", "x-csrf-token": "x"}, b"no session"),
        ("", {"cookie": "trainer-dashboard=\x7f;;=="}, b"no session"),
        ("", {"authorization": "Bearer wrong"}, b"wrong access token"),
    ],
)
async def test_no_token_no_entry(query: str, headers: dict[str, str], why: bytes) -> None:
    status, answer, body, seen = await call(Access(), query=query, headers=headers)
    assert status == 403 and why in body and seen is None
    assert answer["connection"] == "close"  # a refused client keeps no socket
    if why == b"no session":
        assert b"?token=" in body  # says where to find the URL


async def test_static_files_need_no_session_and_bearer_tokens_work() -> None:
    access = Access()
    assert (await call(access, "/static/dashboard.js"))[0] == 200
    assert (await call(access, "/static/x", method="POST"))[0] == 403
    bearer = {"authorization": f"Bearer {access.token}"}
    assert (await call(access, "/api/trainjobs/ns/j/suspend", method="POST", headers=bearer))[
        0
    ] == 200


async def test_writes_need_the_csrf_token_and_a_same_origin() -> None:
    access = Access()
    session = access.new_session()
    csrf = access.csrf_of(session)
    assert csrf is not None
    cookie = {"cookie": f"trainer-dashboard={session}"}
    path = "/api/trainjobs/ns/j/delete"
    status, _, body, seen = await call(access, path, method="POST", headers=cookie)
    assert status == 403 and b"CSRF" in body and seen is None
    status, _, body, seen = await call(access, "/trainjobs/ns/j", method="POST", headers=cookie)
    assert status == 403 and b"CSRF" in body and seen is None  # a write anywhere
    wrong = {**cookie, "x-csrf-token": "nope"}
    assert (await call(access, path, method="POST", headers=wrong))[0] == 403
    good = {**cookie, "x-csrf-token": csrf}
    assert (await call(access, path, method="POST", headers=good))[0] == 200
    same = {**good, "origin": "http://127.0.0.1:8080"}
    assert (await call(access, path, method="POST", headers=same))[0] == 200
    cross = {**good, "origin": "http://evil.example"}
    status, _, body, _ = await call(access, path, method="POST", headers=cross)
    assert status == 403 and b"cross-origin" in body


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_replayed_cookie_alone_reads_and_does_nothing(method: str) -> None:
    """What another loopback port captures from the browser is the cookie: without the key
    that only the page holds, the API refuses to read or to act (the page itself is only a
    skeleton, see views.py)."""
    access = Access(cookie_name="trainer-dashboard-8080")
    session = access.new_session()
    cookie = {"cookie": f"trainer-dashboard-8080={session}"}
    for path in ("/api/trainjobs", "/api/stream", "/api/trainjobs/ns/j/suspend"):
        status, _, body, seen = await call(access, path, method=method, headers=cookie)
        assert status == 403 and b"CSRF token" in body and seen is None, path
        forged = {**cookie, "x-csrf-token": session}  # the cookie is not the key
        assert (await call(access, path, method=method, headers=forged))[0] == 403


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_sessions_end_after_their_lifetime_or_when_idle() -> None:
    clock = Clock()
    access = Access(lifetime=100, idle=10, clock=clock)
    session = access.new_session()
    key = access.csrf_of(session)
    both = {"cookie": f"trainer-dashboard={session}", "x-csrf-token": str(key)}
    for _ in range(11):  # used every 9 s: never idle for 10
        clock.now += 9
        assert (await call(access, "/api/trainjobs", headers=both))[0] == 200
    clock.now += 9  # 108 s after it started: past its lifetime
    status, _, body, _ = await call(access, "/api/trainjobs", headers=both)
    assert status == 403 and b"no session, or it ended" in body
    assert not access.sessions
    idle = access.new_session()
    clock.now += 10
    assert access.csrf_of(idle) is None and not access.sessions


async def test_an_open_stream_keeps_its_session_and_ends_with_its_lifetime() -> None:
    """A page's event stream is a request in flight: the session is in use (not idle) while
    it is open, and the stream is ended, cleanly, when the session's lifetime is over."""
    access = Access(lifetime=0.3, idle=0.05)
    session = access.new_session()
    both = {"cookie": f"trainer-dashboard={session}", "x-csrf-token": str(access.csrf_of(session))}
    streamed: list[dict[str, Any]] = []

    async def stream(_scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while (await receive())["type"] != "http.disconnect":
            pass
        # Starlette's StreamingResponse stops at http.disconnect (ASGI 2.3, as uvicorn speaks).

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never leaves
        raise AssertionError

    async def send(message: Any) -> None:
        streamed.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/stream",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8080")]
        + [(k.encode(), v.encode()) for k, v in both.items()],
    }
    middleware = AccessMiddleware(stream, access)
    serving = asyncio.ensure_future(middleware(scope, receive, send))
    await asyncio.sleep(0.1)  # longer than the idle timeout
    assert access.csrf_of(session) is not None  # in use, so not idle
    await asyncio.wait_for(serving, 2)
    assert streamed[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert access.csrf_of(session) is None


def test_sessions_are_bounded_oldest_first() -> None:
    access = Access()
    first = access.new_session()
    later = [access.new_session() for _ in range(MAX_SESSIONS)]
    assert access.csrf_of(first) is None
    assert all(access.csrf_of(s) is not None for s in later)
    assert first not in access.sessions  # kept by digest only
