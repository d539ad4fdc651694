"""The dashboard's access rules (trainer/dashboard/auth.py), request by request through the
ASGI middleware: Host check, token to session cookie, bearer tokens, CSRF and Origin on
writes, security headers."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.dashboard.auth import MAX_SESSIONS, Access, AccessMiddleware, host_allowed

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


async def test_the_token_becomes_a_session_cookie_and_leaves_the_url() -> None:
    access = Access(cookie_name="trainer-dashboard-8080")
    status, headers, _, _ = await call(access, "/runtimes", query=f"a=1&token={access.token}")
    assert status == 303 and headers["location"] == "/runtimes?a=1"
    cookie = headers["set-cookie"]
    assert cookie.startswith("trainer-dashboard-8080=") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    session = cookie.split(";")[0].split("=", 1)[1]
    status, headers, body, seen = await call(
        access, headers={"cookie": f"other=1; trainer-dashboard-8080={session}"}
    )
    assert status == 200 and body == b"app"
    assert seen is not None and seen["state"]["csrf"] == access.csrf_of(session)
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize(
    ("query", "headers", "why"),
    [
        ("", {}, b"no session"),
        ("token=wrong", {}, b"wrong access token"),
        ("", {"cookie": "trainer-dashboard=forged"}, b"no session"),
        ("", {"cookie": "trainer-dashboard=\x7f;;=="}, b"no session"),
        ("", {"authorization": "Bearer wrong"}, b"wrong access token"),
    ],
)
async def test_no_token_no_entry(query: str, headers: dict[str, str], why: bytes) -> None:
    status, _, body, seen = await call(Access(), query=query, headers=headers)
    assert status == 403 and why in body and seen is None
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
    wrong = {**cookie, "x-csrf-token": "nope"}
    assert (await call(access, path, method="POST", headers=wrong))[0] == 403
    good = {**cookie, "x-csrf-token": csrf}
    assert (await call(access, path, method="POST", headers=good))[0] == 200
    same = {**good, "origin": "http://127.0.0.1:8080"}
    assert (await call(access, path, method="POST", headers=same))[0] == 200
    cross = {**good, "origin": "http://evil.example"}
    status, _, body, _ = await call(access, path, method="POST", headers=cross)
    assert status == 403 and b"cross-origin" in body


def test_sessions_are_bounded_oldest_first() -> None:
    access = Access()
    first = access.new_session()
    later = [access.new_session() for _ in range(MAX_SESSIONS)]
    assert access.csrf_of(first) is None
    assert all(access.csrf_of(s) is not None for s in later)
    assert first not in access.sessions  # kept by digest only
