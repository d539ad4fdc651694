"""Call an ASGI app in-process, without a network: the tests' transport (kept out of the shipped
package: nothing in the product calls an app this way).

:func:`asgi_request` speaks just enough ASGI 3 HTTP to drive the webhook app: the body is sent
in chunks of ``chunk_size`` bytes, ``http.disconnect`` is only reported once the response is
complete, and the response is collected whole. An exception the app lets escape propagates to
the caller, which is how the tests notice one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]


@dataclass
class ASGIResponse:
    """A collected HTTP response."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def json(self) -> Any:
        return json.loads(self.body)


async def asgi_request(
    app: ASGIApp,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    headers: Sequence[tuple[str, str]] | None = None,
    content_length: bool = True,
    chunk_size: int = 64 * 1024,
) -> ASGIResponse:
    """Send one request to ``app`` and return its response. ``content_length=False`` leaves the
    Content-Length header out (a streamed body)."""
    raw_headers = [(b"host", b"webhook.test")]
    if body or method == "POST":
        raw_headers.append((b"content-type", b"application/json"))
    if content_length:
        raw_headers.append((b"content-length", str(len(body)).encode()))
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in headers or ()]
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 443),
        "state": {},
    }
    chunks = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)] or [b""]
    sent = 0
    done = asyncio.Event()
    response = ASGIResponse(status=0)
    parts: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if sent < len(chunks):
            sent += 1
            return {
                "type": "http.request",
                "body": chunks[sent - 1],
                "more_body": sent < len(chunks),
            }
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            response.status = int(message["status"])
            response.headers = [
                (k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])
            ]
        elif message["type"] == "http.response.body":
            parts.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    response.body = b"".join(parts)
    return response
