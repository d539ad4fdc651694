"""Reading an AdmissionReview request body within a size limit, and answering honestly beyond it.

The limit (:data:`DEFAULT_MAX_BODY_BYTES`, 8 MiB) is sized from what an API server can send:
kube-apiserver accepts request bodies up to 3 MiB (its ``MaxRequestBodyBytes``), and the review
of an UPDATE carries the object *and* the old object, each up to that size, plus a small
envelope (kinds, resource, userInfo, options): just over 6 MiB at most. 8 MiB leaves room for
the re-encoding differences between what the client sent and what the API server serialises.

Beyond the limit the body is not kept in memory. :func:`read_body` raises :class:`TooLarge`
with the first :data:`HEAD_BYTES` of it and reads (and discards) the rest, up to
:data:`DRAIN_BYTES` within :data:`DRAIN_SECONDS`, so the connection stays usable and the
client reads our answer instead of a reset. :func:`find_uid` then looks for ``request.uid``
in that head (the API server writes it first: ``apiVersion``, ``kind``, then ``request``
starting with ``uid``). Found, the webhook answers an AdmissionReview that *denies* with code
413, which the API server passes on to its client as a 413 with our message; not found, only a
plain HTTP 413 is possible (which an API server reports as a failed webhook call, subject to
``failurePolicy``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

#: Twice kube-apiserver's 3 MiB request limit (object + oldObject), plus room: module docstring.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: How much of a body over the limit is kept to find its ``request.uid``.
HEAD_BYTES = 64 * 1024
#: How much of a body over the limit is read and discarded before giving up on the connection,
#: and for how long: beyond either, the answer goes out at once and the connection is closed.
DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_SECONDS = 2.0
MIB = 1024 * 1024


class HTTPProblem(Exception):
    """A request that cannot be answered with an AdmissionReview (no uid to answer to)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass
class TooLarge(Exception):
    """A body over ``limit`` bytes: its first bytes, its size when known, and whether all of it
    was read (``drained``: the connection can carry another request)."""

    limit: int
    head: bytes
    size: int | None
    drained: bool

    def size_text(self) -> str:
        if self.size is not None:
            return f"{self.size} bytes ({self.size / MIB:.1f} MiB)"
        return f"more than {self.limit} bytes"

    def message(self, kind: str) -> str:
        """What the user reads (through the API server) when the review is denied."""
        return (
            f"the {kind} is too large for the admission webhook: the AdmissionReview the API "
            f"server sent is {self.size_text()}, over the webhook's limit of {self.limit} bytes "
            f"({self.limit / MIB:.0f} MiB; an update carries the object and the old object); "
            "make the object smaller, e.g. move large env values, commands or files into a "
            "ConfigMap or Secret and reference it"
        )

    def problem(self) -> HTTPProblem:
        return HTTPProblem(
            413,
            "RequestEntityTooLarge",
            f"request body of {self.size_text()} is larger than the limit of {self.limit} bytes",
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body; :class:`TooLarge` for one over ``limit`` bytes (judged from
    Content-Length when given, else while streaming), :class:`HTTPProblem` for a bad
    Content-Length or a client that went away."""
    declared = request.headers.get("content-length")
    size: int | None = None
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise HTTPProblem(400, "BadRequest", "Content-Length is not a number") from None
    chunks: list[bytes] = []
    total = 0
    stream = request.stream()
    try:
        if size is None or size <= limit:
            async for chunk in stream:
                total += len(chunk)
                if total > limit:
                    chunks.append(chunk)
                    break
                chunks.append(chunk)
            else:
                return b"".join(chunks)
    except ClientDisconnect:
        raise HTTPProblem(400, "BadRequest", "the client disconnected mid-request") from None
    await _drain(stream, limit, b"".join(chunks)[:HEAD_BYTES], size, total)
    raise AssertionError("unreachable: _drain raises")


async def _drain(
    stream: AsyncIterator[bytes], limit: int, head: bytes, size: int | None, total: int
) -> None:
    """Read and drop the rest of a body over the limit, keeping its head; raise
    :class:`TooLarge` (``drained`` when all of it was read within the bounds)."""
    beyond = size is not None and size > DRAIN_BYTES
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for chunk in stream:
                total += len(chunk)
                if len(head) < HEAD_BYTES:
                    head += chunk[: HEAD_BYTES - len(head)]
                # Past the drain bound, or declared so: keep the head, leave the rest unread.
                if total > DRAIN_BYTES or (beyond and len(head) >= HEAD_BYTES):
                    raise TooLarge(limit, head, size, drained=False)
    except ClientDisconnect:
        raise HTTPProblem(400, "BadRequest", "the client disconnected mid-request") from None
    except TimeoutError:
        # The client is slow to send what we will not use: answer now, and close.
        raise TooLarge(limit, head, size, drained=False) from None
    raise TooLarge(limit, head, size if size is not None else total, drained=True)


def find_uid(head: bytes) -> str | None:
    """``request.uid`` of the AdmissionReview whose first bytes are ``head``, when it can be
    read from them: the top-level members and those of ``request`` are walked in order, and
    each value before the uid must be complete within ``head``. None otherwise."""
    text = head.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    try:
        return _walk_object(text, 0, decoder, depth=0)
    except (ValueError, IndexError, RecursionError):
        return None


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _walk_object(text: str, i: int, decoder: json.JSONDecoder, depth: int) -> str | None:
    """Walk the object at ``text[i]``: at depth 0 look for ``request``, at depth 1 for
    ``uid``. Raises ValueError (or IndexError) where ``text`` ends or is not JSON."""
    i = _skip_space(text, i)
    if text[i] != "{":
        raise ValueError("not an object")
    i += 1
    while True:
        i = _skip_space(text, i)
        if text[i] == "}":
            return None
        key: Any
        key, i = decoder.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError("not a key")
        i = _skip_space(text, i)
        if text[i] != ":":
            raise ValueError("no colon")
        i = _skip_space(text, i + 1)
        if depth == 0 and key == "request":
            return _walk_object(text, i, decoder, depth=1)
        value, i = decoder.raw_decode(text, i)
        if depth == 1 and key == "uid":
            return value if isinstance(value, str) and value else None
        i = _skip_space(text, i)
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            raise ValueError("no comma")
