"""Who may use the dashboard: an ASGI middleware in front of every route (docs/dashboard.md,
"Security").

The dashboard acts with the user's own kubeconfig credentials, so reaching it must be as hard
as reading that kubeconfig. The rules:

1. **Host check** (DNS rebinding): a request whose ``Host`` header is not ``localhost``, an IP
   address, or a name given with ``--allow-host`` is refused (403) before anything else. A
   web page on ``evil.example`` whose name was re-pointed at 127.0.0.1 sends
   ``Host: evil.example`` and gets nothing.
2. **Access token**: a random token made at start is in the URL the command prints. A request
   carrying it as ``?token=`` starts a session and is redirected to the same page without the
   token. ``Authorization: Bearer <token>`` works for scripts. Anything else is refused (403)
   with a page saying where the URL is. Tokens and sessions are compared in constant time.
3. **A session is two secrets**: a cookie (``HttpOnly``, ``SameSite=Strict``) and a session
   key that only the page's script holds. Browsers send a cookie of 127.0.0.1 to *every* port
   of 127.0.0.1, so another user's web server on another loopback port receives the cookie:
   the cookie alone must not be enough. The key travels in the redirect's fragment
   (``#session-key=...``, never sent to any server), the page's script keeps it in its origin's
   ``localStorage`` (which another port, another origin, cannot read) and sends it in
   ``X-CSRF-Token`` with every request it makes. So: pages (HTML navigations) need the cookie
   and hold no data; everything under ``/api/`` (data, event streams, logs, actions) needs the
   cookie *and* the key. The key is the CSRF token too: a write also needs, when the browser
   sends ``Origin``, an origin on the same host and port.
4. **Sessions expire**: :data:`SESSION_LIFETIME_SECONDS` after they start, or
   :data:`SESSION_IDLE_SECONDS` after their last request ended while none is open (an open
   page's event stream keeps its session in use). A stream still open when its session's
   lifetime ends is ended then. At most :data:`MAX_SESSIONS` live at once, the oldest dropped.
5. Every answer gets a Content-Security-Policy allowing only the dashboard's own scripts,
   styles and connections (no inline script), ``X-Frame-Options: DENY``,
   ``Referrer-Policy: no-referrer`` and ``X-Content-Type-Options: nosniff``; refusals close the
   connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import secrets
import time
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
SESSION_LIFETIME_SECONDS = 12 * 3600
SESSION_IDLE_SECONDS = 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_HEADER = "x-csrf-token"
KEY_FRAGMENT = "session-key"
"""The redirect after login ends in ``#session-key=<key>``: the page's script takes it."""
API_PREFIX = "/api/"
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
class Session:
    key: str
    """The page's session key, which is also its CSRF token (rule 3)."""
    started: float
    last_used: float
    open_requests: int = 0

    def ends_at(self, lifetime: float, idle: float) -> float:
        end = self.started + lifetime
        if self.open_requests == 0:
            end = min(end, self.last_used + idle)
        return end


@dataclass
class Access:
    """The token, the live sessions and the allowed host names.

    Sessions are kept by the SHA-256 of their cookie (so looking one up reveals nothing through
    timing about the ids that exist), each with its key; the oldest are dropped past
    :data:`MAX_SESSIONS` (every visit of the token URL makes one)."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    cookie_name: str = "trainer-dashboard"
    allowed_hosts: frozenset[str] = frozenset()
    lifetime: float = SESSION_LIFETIME_SECONDS
    idle: float = SESSION_IDLE_SECONDS
    clock: Callable[[], float] = time.monotonic
    sessions: dict[str, Session] = field(default_factory=dict)
    """SHA-256 of a session cookie -> the session, oldest first."""

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def new_session(self) -> str:
        """A new session; returns its cookie value (:meth:`csrf_of` gives its key)."""
        cookie = secrets.token_urlsafe(32)
        now = self.clock()
        self.sessions[_digest(cookie)] = Session(secrets.token_urlsafe(32), now, now)
        while len(self.sessions) > MAX_SESSIONS:
            del self.sessions[next(iter(self.sessions))]
        return cookie

    def session_of(self, cookie: str) -> Session | None:
        """The live session of a cookie value; None (and forgotten) once it has ended."""
        digest = _digest(cookie)
        session = self.sessions.get(digest)
        if session is not None and self.clock() >= session.ends_at(self.lifetime, self.idle):
            del self.sessions[digest]
            return None
        return session

    def csrf_of(self, cookie: str) -> str | None:
        """The key (CSRF token) of a live session."""
        session = self.session_of(cookie)
        return session.key if session is not None else None


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


async def _refuse(send: Send, text: str) -> None:
    """403, and the connection closes: a refused client holds no keep-alive socket."""
    await _plain(send, 403, f"403: {text}\n", [(b"connection", b"close")])


def _cookie(headers: dict[str, str], name: str) -> str | None:
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header is no session
        return None
    morsel = cookies.get(name)
    return morsel.value if morsel is not None else None


class AccessMiddleware:
    """Rules 1-5 of the module docstring around ``app``."""

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
            await _refuse(send, f"Host {host!r} is not allowed (see --allow-host)")
            return
        path: str = scope["path"]
        method: str = scope["method"]
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = next((v for k, v in query if k == "token"), None)
        if given is not None:
            await self._login(send, given, path, query)
            return
        if path.startswith(PUBLIC_PREFIXES) and method in SAFE_METHODS:
            await self.app(scope, receive, self._secure(send))
            return
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            if not self.access.token_ok(auth[7:].strip()):
                await _refuse(send, "wrong access token")
                return
            await self.app(scope, receive, self._secure(send))
            return
        cookie = _cookie(headers, self.access.cookie_name)
        session = self.access.session_of(cookie) if cookie is not None else None
        if session is None:
            await _refuse(send, f"no session, or it ended. {LOGIN_HINT}")
            return
        if path.startswith(API_PREFIX) or method not in SAFE_METHODS:
            problem = self._key_problem(headers, session.key, host, method)
            if problem:
                await _refuse(send, problem)
                return
        await self._in_session(session, scope, receive, send)

    async def _login(self, send: Send, given: str, path: str, query: list[tuple[str, str]]) -> None:
        if not self.access.token_ok(given):
            await _refuse(send, f"wrong access token. {LOGIN_HINT}")
            return
        cookie = self.access.new_session()
        key = self.access.csrf_of(cookie)
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        location = path + (f"?{rest}" if rest else "") + f"#{KEY_FRAGMENT}={key}"
        set_cookie = (
            f"{self.access.cookie_name}={cookie}; Path=/; Max-Age={int(self.access.lifetime)}; "
            "HttpOnly; SameSite=Strict"
        ).encode()
        await _plain(
            send,
            303,
            "see other\n",
            [(b"location", location.encode()), (b"set-cookie", set_cookie)],
        )

    @staticmethod
    def _key_problem(headers: dict[str, str], key: str, host: str, method: str) -> str:
        if not hmac.compare_digest(headers.get(CSRF_HEADER, "").encode(), key.encode()):
            return "missing or wrong CSRF token (the page's session key; reload the page)"
        origin = headers.get("origin")
        if method not in SAFE_METHODS and origin is not None and urlsplit(origin).netloc != host:
            return f"cross-origin request from {origin!r} refused"
        return ""

    async def _in_session(
        self, session: Session, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Serve one request of ``session``: it counts as in use meanwhile, and a response
        still streaming when the session's lifetime ends is ended then (rule 4)."""
        clock = self.access.clock
        ended = asyncio.Event()
        remaining = session.started + self.access.lifetime - clock()
        timer = asyncio.get_running_loop().call_later(max(0.0, remaining), ended.set)
        response = {"started": False, "complete": False}
        secure = self._secure(send)

        async def until_ended() -> Message:
            if ended.is_set():
                return {"type": "http.disconnect"}
            message = asyncio.ensure_future(receive())
            end = asyncio.ensure_future(ended.wait())
            done, _ = await asyncio.wait({message, end}, return_when=asyncio.FIRST_COMPLETED)
            if message in done:
                end.cancel()
                return message.result()
            message.cancel()
            return {"type": "http.disconnect"}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                response["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                response["complete"] = True
            await secure(message)

        session.open_requests += 1
        try:
            await self.app(scope, until_ended, tracked)
            if ended.is_set() and response["started"] and not response["complete"]:
                await tracked({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            timer.cancel()
            session.open_requests -= 1
            session.last_used = clock()

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
