"""Who may use the dashboard: an ASGI middleware in front of every route (docs/dashboard.md,
"Security").

The dashboard acts with the user's own kubeconfig credentials, so reaching it must be as hard
as reading that kubeconfig. The rules, as Jupyter's:

1. **Host check** (DNS rebinding): a request whose ``Host`` header is not ``localhost``, an IP
   address, or a name given with ``--allow-host`` is refused (403) before anything else. A
   web page on ``evil.example`` whose name was re-pointed at 127.0.0.1 sends
   ``Host: evil.example`` and gets nothing.
2. **Access token**: a random token made at start is in the URL the command prints. A request
   carrying it as ``?token=`` gets a session cookie (``HttpOnly``, ``SameSite=Strict``) and is
   redirected to the same page without the token, so the token does not stay in the address
   bar. ``Authorization: Bearer <token>`` works for scripts. Anything else is refused (403)
   with a page saying where the URL is. Tokens and sessions are compared in constant time.
3. **CSRF**: a request that changes something (any method but GET/HEAD) made with a session
   cookie must carry the session's CSRF token in ``X-CSRF-Token`` (the page reads it from a
   ``<meta>`` tag) and, when the browser sends ``Origin``, an origin on the same host and port.
   Bearer requests are exempt: a browser never adds that header by itself.
4. Every answer gets a Content-Security-Policy allowing only the dashboard's own scripts,
   styles and connections (no inline script), ``X-Frame-Options: DENY``,
   ``Referrer-Policy: no-referrer`` and ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_SESSIONS = 64
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_HEADER = "x-csrf-token"
PUBLIC_PREFIXES = ("/static/",)
"""Paths served without a session: the stylesheet and script, which hold no data."""
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]
LOGIN_HINT = (
    "This dashboard needs its access token: open the URL that `trainer dashboard` (or "
    "`trainer up`) printed, which ends in ?token=..."
)


def host_allowed(host_header: str, extra: frozenset[str] = frozenset()) -> bool:
    """Whether a ``Host`` header names this machine by address, ``localhost``, or an allowed
    name (rule 1)."""
    host = urlsplit("//" + host_header).hostname if host_header else None
    if not host:
        return False
    if host == "localhost" or host in extra:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _digest(session: str) -> str:
    return hashlib.sha256(session.encode()).hexdigest()


@dataclass
class Access:
    """The token, the live sessions and the allowed host names.

    Sessions are kept by the SHA-256 of their id (so looking one up reveals nothing through
    timing about the ids that exist), each with its CSRF token; the oldest are dropped past
    :data:`MAX_SESSIONS` (every visit of the token URL makes one)."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    cookie_name: str = "trainer-dashboard"
    allowed_hosts: frozenset[str] = frozenset()
    sessions: dict[str, str] = field(default_factory=dict)
    """SHA-256 of a session id -> its CSRF token, oldest first."""

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def new_session(self) -> str:
        session = secrets.token_urlsafe(32)
        self.sessions[_digest(session)] = secrets.token_urlsafe(32)
        while len(self.sessions) > MAX_SESSIONS:
            del self.sessions[next(iter(self.sessions))]
        return session

    def csrf_of(self, session: str) -> str | None:
        return self.sessions.get(_digest(session))


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def _plain(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *SECURITY_HEADERS,
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class AccessMiddleware:
    """Rules 1-4 of the module docstring around ``app``; the session's CSRF token is put in
    ``scope["state"]["csrf"]`` for the pages."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host", "")
        if not host_allowed(host, self.access.allowed_hosts):
            await _plain(send, 403, f"403: Host {host!r} is not allowed (see --allow-host)\n", [])
            return
        path: str = scope["path"]
        method: str = scope["method"]
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = next((v for k, v in query if k == "token"), None)
        if given is not None:
            if not self.access.token_ok(given):
                await _plain(send, 403, f"403: wrong access token. {LOGIN_HINT}\n", [])
                return
            session = self.access.new_session()
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = path + (f"?{rest}" if rest else "")
            cookie = (
                f"{self.access.cookie_name}={session}; Path=/; HttpOnly; SameSite=Strict"
            ).encode()
            await _plain(
                send,
                303,
                "see other\n",
                [(b"location", location.encode()), (b"set-cookie", cookie)],
            )
            return
        if path.startswith(PUBLIC_PREFIXES) and method in SAFE_METHODS:
            await self.app(scope, receive, self._secure(send))
            return
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        csrf: str | None = None
        if bearer is not None:
            if not self.access.token_ok(bearer):
                await _plain(send, 403, "403: wrong access token\n", [])
                return
        else:
            cookies: SimpleCookie = SimpleCookie()
            try:
                cookies.load(headers.get("cookie", ""))
            except Exception:  # a malformed Cookie header is no session
                cookies = SimpleCookie()
            morsel = cookies.get(self.access.cookie_name)
            csrf = self.access.csrf_of(morsel.value) if morsel is not None else None
            if csrf is None:
                await _plain(send, 403, f"403: no session. {LOGIN_HINT}\n", [])
                return
            if method not in SAFE_METHODS:
                problem = self._csrf_problem(headers, csrf, host)
                if problem:
                    await _plain(send, 403, f"403: {problem}\n", [])
                    return
        scope.setdefault("state", {})["csrf"] = csrf or ""
        await self.app(scope, receive, self._secure(send))

    @staticmethod
    def _csrf_problem(headers: dict[str, str], csrf: str, host: str) -> str:
        if not hmac.compare_digest(headers.get(CSRF_HEADER, "").encode(), csrf.encode()):
            return "missing or wrong CSRF token (reload the page)"
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != host:
            return f"cross-origin request from {origin!r} refused"
        return ""

    @staticmethod
    def _secure(send: Send) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in SECURITY_HEADERS if k not in names
                ]
            await send(message)

        return wrapped
