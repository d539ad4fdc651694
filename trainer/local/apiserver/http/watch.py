"""Watch streams: from a resourceVersion with replay, initial events, bookmarks, timeouts and
selector-aware ADDED/DELETED transitions."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from trainer.local.apiserver import metadata
from trainer.local.apiserver.errors import APIError, bad_request
from trainer.local.apiserver.http import partial, table
from trainer.local.apiserver.resources import served
from trainer.local.apiserver.selectors import flag, matcher
from trainer.local.apiserver.store import Event

if TYPE_CHECKING:
    from trainer.local.apiserver.core.storage import Storage
    from trainer.local.apiserver.http.routing import Route

BOOKMARK_INTERVAL = 1.0
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
FLUSH_BYTES = 64 * 1024  # initial events, a replay or a burst are sent in writes this large


def _transition(ev: Event, match: Any) -> str | None:
    """The event type a selector-filtered watcher sees, or None to skip the event."""
    if match is None:
        return ev.type
    if ev.type == "ADDED":
        return "ADDED" if match(ev.obj) else None
    if ev.type == "DELETED":
        return "DELETED" if match(ev.obj) or (ev.old is not None and match(ev.old)) else None
    now = match(ev.obj)
    before = ev.old is not None and match(ev.old)
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None


async def serve_watch(
    server: Storage, request: web.Request, route: Route, query: dict[str, str]
) -> web.StreamResponse:
    rt = route.rt
    namespace = route.namespace or None
    selector = query.get("fieldSelector")
    if route.name:  # a watch of one object by name (legacy /watch/.../<name> paths)
        by_name = f"metadata.name={route.name}"
        selector = f"{selector},{by_name}" if selector else by_name
    match = matcher(query.get("labelSelector"), selector)
    rv_param = query.get("resourceVersion", "")
    send_initial = flag(query.get("sendInitialEvents"))
    bookmarks = flag(query.get("allowWatchBookmarks"))
    timeout = metadata.int_param(query, "timeoutSeconds")
    # kubectl get -w asks for Tables (Accept: application/json;as=Table;...): then every event's
    # object is a one-row Table, rendered like the list kubectl printed first.
    as_table = table.wants_table(request.headers.get("Accept", ""))
    include_object = table.check_include_object(query.get("includeObject", ""))
    as_meta = partial.wanted(request.headers.get("Accept", ""))

    def encode(ev_type: str, obj: dict[str, Any], ev: Event | None = None) -> bytes:
        if as_meta and ev_type != "ERROR":
            return _line(ev_type, partial.partial(obj))
        if as_table:
            return table.watch_line(server, rt, ev_type, obj, include_object=include_object)
        if ev is not None:
            return ev.encoded(ev_type, rt.api_version)
        return _line(ev_type, served(rt, obj))

    if send_initial and query.get("resourceVersionMatch") not in (None, "", "NotOlderThan"):
        raise bad_request("sendInitialEvents requires resourceVersionMatch=NotOlderThan")

    # Register first, then read the current state / history without awaiting in between, so
    # no event is lost or duplicated.
    watcher = server.store.watch(rt.key, namespace, None)
    try:
        initial: list[tuple[str, dict[str, Any]]] = []
        replay: list[Event] = []
        if send_initial or rv_param in ("", "0"):
            initial = [("ADDED", obj) for obj in server.store.select(rt.key, namespace, match)]
        else:
            try:
                since = int(rv_param)
            except ValueError:
                raise bad_request(f"invalid resourceVersion: {rv_param!r}") from None
            replay = server.store.events_since(since, rt.key, namespace)
        start_rv = server.store.rv
    except APIError as err:
        server.store.unwatch(watcher)
        if err.code == 410:
            return await _error_stream(request, err)
        raise
    except BaseException:
        server.store.unwatch(watcher)
        raise

    resp = web.StreamResponse(
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    )
    await resp.prepare(request)
    last_rv = start_rv
    deadline = asyncio.get_running_loop().time() + timeout if timeout else None
    try:
        out = _Lines(resp)
        for ev_type, obj in initial:
            await out.add(encode(ev_type, obj))
        if send_initial:
            await out.add(_bookmark(rt, str(start_rv), initial_end=True, as_meta=as_meta))
        for ev in replay:
            replay_type = _transition(ev, match)
            if replay_type is not None:
                await out.add(encode(replay_type, ev.obj, ev))
                last_rv = ev.rv
        await out.flush()
        while True:
            wait = BOOKMARK_INTERVAL if bookmarks else None
            if deadline is not None:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                wait = remaining if wait is None else min(wait, remaining)
            try:
                item = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
            except TimeoutError:
                if bookmarks:
                    rv = str(max(last_rv, server.store.rv))
                    await resp.write(_bookmark(rt, rv, as_meta=as_meta))
                continue
            # Everything already queued goes out together (in writes of up to FLUSH_BYTES): a
            # burst costs a few sends rather than one per event; the lines are the same.
            batch = [item]
            while item is not None and not watcher.queue.empty():
                item = watcher.queue.get_nowait()
                batch.append(item)
            for queued in batch:
                if queued is None:
                    break
                if queued.rv <= start_rv:
                    continue
                live_type = _transition(queued, match)
                if live_type is not None:
                    await out.add(encode(live_type, queued.obj, queued))
                last_rv = queued.rv
            await out.flush()
            if item is None:
                break
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        server.store.unwatch(watcher)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await resp.write_eof()
    return resp


class _Lines:
    """Watch lines buffered into writes of about ``FLUSH_BYTES``: ``add`` writes once that
    much is pending, ``flush`` writes the rest (nothing is held back past a ``flush``)."""

    def __init__(self, resp: web.StreamResponse) -> None:
        self.resp = resp
        self.lines: list[bytes] = []
        self.size = 0

    async def add(self, line: bytes) -> None:
        self.lines.append(line)
        self.size += len(line)
        if self.size >= FLUSH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        if self.lines:
            data = b"".join(self.lines)
            self.lines.clear()
            self.size = 0
            await self.resp.write(data)


def _line(ev_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": ev_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _bookmark(rt: Any, rv: str, *, initial_end: bool = False, as_meta: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    if as_meta:
        return _line("BOOKMARK", partial.partial({"metadata": meta}))
    return _line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})


async def _error_stream(request: web.Request, err: APIError) -> web.StreamResponse:
    """A watch that cannot start from its resourceVersion: 200 with one ERROR event (410)."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(_line("ERROR", err.status()))
    await resp.write_eof()
    return resp
