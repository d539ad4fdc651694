"""Live updates: server-sent event streams fed by the watch caches, and pod logs.

``GET /api/stream`` (the TrainJobs list) first sends ``snapshot`` (every row), then ``row``
for each TrainJob that changed and ``gone`` for each that was deleted. ``GET
/api/stream/{ns}/{name}`` (one TrainJob) sends ``detail`` at once and whenever the TrainJob, its
JobSet, Jobs, pods or their Events change, and ``gone`` when it is deleted. ``GET
/api/stream/nodes`` (the Nodes page) sends ``nodes`` (the whole view) at once, then
``update`` with the rows that changed when what it shows changes (a Node, or a pod of any
namespace that is bound, finishes or waits; ``nodes`` again if the columns change). After its
first message each stream sends ``status`` (what ``/api/info`` says of the cache: ``waiting``
while the Trainer CRDs are not all served, the resources not shown), and again whenever it
changes, so an open page leaves the waiting state when the CRDs are installed. Changes are
batched for :data:`BATCH_SECONDS` so a burst is one message; a comment line every
:data:`KEEPALIVE_SECONDS` keeps proxies from closing an idle stream. Streams end at shutdown.

``GET /api/logs/{ns}/{pod}?container=C&previous=1&follow=1`` streams a container's log from
the API server (``pods/log``) as text. Only pods of the watched TrainJobs can be read, and only
their declared containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from trainer.dashboard.context import DashboardContext
from trainer.dashboard.policy import nodes
from trainer.dashboard.views import ctx_of
from trainer.dashboard.watch.cache import ClusterCache, Key, Subscription
from trainer.kube.podlogs import stream_log
from trainer.kube.rest import APIError

BATCH_SECONDS = 0.2
KEEPALIVE_SECONDS = 15.0
LOG_TAIL_BYTES = 4 * 1024 * 1024
"""At most this much of a log is sent when the page opens it (then it follows)."""
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class _Status:
    """The cache's :meth:`~ClusterCache.status` as one stream last sent it."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.sent: dict[str, Any] | None = None

    def changed(self) -> bytes:
        """A ``status`` event when the status is not what was sent last (always the first
        time), else nothing."""
        now = self.cache.status()
        if now == self.sent:
            return b""
        self.sent = now
        return sse("status", now)


async def _changes(ctx: DashboardContext, sub: Subscription) -> AsyncIterator[set[Key] | None]:
    """The TrainJobs that changed, batched; None for a keep-alive; ends at shutdown."""
    closing = asyncio.ensure_future(ctx.closing.wait())
    try:
        while not ctx.closing.is_set():
            nxt = asyncio.ensure_future(sub.next())
            done, _ = await asyncio.wait(
                {nxt, closing}, timeout=KEEPALIVE_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
            if nxt not in done:
                nxt.cancel()
                if closing in done:
                    return
                yield None
                continue
            dirty, _ = nxt.result()
            await asyncio.sleep(BATCH_SECONDS)  # let a burst of changes become one update
            more, _ = sub.take()
            yield dirty | more
    finally:
        closing.cancel()


async def list_stream(request: Request) -> Response:
    ctx = ctx_of(request)

    async def body() -> AsyncIterator[bytes]:
        status = _Status(ctx.cache)
        with ctx.cache.subscribe() as sub:
            yield sse("snapshot", ctx.cache.rows())
            yield status.changed()
            async for dirty in _changes(ctx, sub):
                if dirty is None:
                    yield b": keep-alive\n\n"
                    continue
                if update := status.changed():
                    yield update
                for key in sorted(dirty):
                    row = ctx.cache.row(key)
                    if row is None:
                        yield sse("gone", {"namespace": key[0], "name": key[1]})
                    else:
                        yield sse("row", row)

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


async def detail_stream(request: Request) -> Response:
    ctx = ctx_of(request)
    key = (request.path_params["namespace"], request.path_params["name"])

    async def body() -> AsyncIterator[bytes]:
        status = _Status(ctx.cache)
        with ctx.cache.subscribe() as sub:
            detail = ctx.cache.detail(*key)
            yield sse("detail", detail) if detail is not None else sse("gone", {})
            yield status.changed()
            async for dirty in _changes(ctx, sub):
                if dirty is None:
                    yield b": keep-alive\n\n"
                    continue
                if update := status.changed():
                    yield update
                if key in dirty:
                    detail = ctx.cache.detail(*key)
                    yield sse("detail", detail) if detail is not None else sse("gone", {})

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


async def nodes_stream(request: Request) -> Response:
    ctx = ctx_of(request)

    async def body() -> AsyncIterator[bytes]:
        status = _Status(ctx.cache)
        with ctx.cache.subscribe(nodes=True) as sub:
            shown = ctx.cache.nodes_view()
            yield sse("nodes", shown)
            yield status.changed()
            async for dirty in _changes(ctx, sub):
                if dirty is None:
                    yield b": keep-alive\n\n"
                    continue
                if update := status.changed():
                    yield update
                # Most pod changes (a container starts, a probe passes) change nothing here;
                # otherwise only the rows that changed are sent.
                current = ctx.cache.nodes_view()
                change = nodes.update(shown, current)
                shown = current
                if change is not None:
                    yield sse(*change)

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "") in ("1", "true")


async def pod_log(request: Request) -> Response:
    ctx = ctx_of(request)
    namespace, name = request.path_params["namespace"], request.path_params["pod"]
    pod = ctx.cache.pod(namespace, name)
    # A pod its Job controller deleted: the log the local plane kept of it (a cluster keeps
    # none and answers 404), read with the same credentials as any log.
    deleted = pod is None and (pod := ctx.cache.deleted_pod(namespace, name)) is not None
    if pod is None:
        return JSONResponse(
            {"error": f"pod {namespace}/{name} is not a pod of a watched TrainJob"},
            status_code=404,
        )
    spec = pod.get("spec") or {}
    names = [str(c.get("name")) for c in (spec.get("initContainers") or [])] + [
        str(c.get("name")) for c in (spec.get("containers") or [])
    ]
    container = request.query_params.get("container") or (names[-1] if names else "")
    if container not in names:
        return JSONResponse(
            {"error": f"container: {container!r} is not one of {', '.join(names)}"},
            status_code=400,
        )
    follow, previous = _flag(request, "follow"), _flag(request, "previous")
    chunks = stream_log(
        ctx.cache.kube,
        namespace,
        name,
        container,
        follow=follow and not previous and not deleted,
        previous=previous,
        limit_bytes=None if follow else LOG_TAIL_BYTES,
        deleted_pod=deleted,
    )
    try:
        first = await anext(chunks, b"")
    except APIError as err:
        await chunks.aclose()
        return JSONResponse(
            {"error": err.message or str(err)}, status_code=err.status if err.status else 502
        )

    async def body() -> AsyncIterator[bytes]:
        async with contextlib.aclosing(chunks):
            if first:
                yield first
            closing = asyncio.ensure_future(ctx.closing.wait())
            try:
                while True:
                    nxt = asyncio.ensure_future(anext(chunks, b""))
                    done, _ = await asyncio.wait(
                        {nxt, closing}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if nxt not in done:
                        nxt.cancel()
                        return
                    try:
                        chunk = nxt.result()
                    except APIError as err:
                        yield f"\n[log stream ended: {err.message}]\n".encode()
                        return
                    if not chunk:
                        return
                    yield chunk
            finally:
                closing.cancel()

    return StreamingResponse(body(), media_type="text/plain; charset=utf-8", headers=SSE_HEADERS)
