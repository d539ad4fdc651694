"""Watch streams: from a resourceVersion with replay, initial events, bookmarks, timeouts and
selector-aware ADDED/DELETED transitions."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from trainer.local.apiserver.errors import APIError, bad_request
from trainer.local.apiserver.selectors import matcher
from trainer.local.apiserver.store import Event

if TYPE_CHECKING:
    from trainer.local.apiserver.server import APIServer, Route

BOOKMARK_INTERVAL = 1.0
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


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
    server: APIServer, request: web.Request, route: Route, query: dict[str, str]
) -> web.StreamResponse:
    rt = route.rt
    namespace = route.namespace or None
    selector = query.get("fieldSelector")
    if route.name:  # a watch of one object by name (legacy /watch/.../<name> paths)
        by_name = f"metadata.name={route.name}"
        selector = f"{selector},{by_name}" if selector else by_name
    match = matcher(query.get("labelSelector"), selector)
    rv_param = query.get("resourceVersion", "")
    send_initial = query.get("sendInitialEvents") in ("true", "1")
    bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
    timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
    if send_initial and query.get("resourceVersionMatch") not in (None, "", "NotOlderThan"):
        raise bad_request("sendInitialEvents requires resourceVersionMatch=NotOlderThan")

    # Register first, then read the current state / history without awaiting in between, so
    # no event is lost or duplicated.
    watcher = server.store.watch(rt.key, namespace, None)
    try:
        initial: list[tuple[str, dict[str, Any]]] = []
        replay: list[Event] = []
        if send_initial or rv_param in ("", "0"):
            for obj in server.store.items(rt.key, namespace):
                if match is None or match(obj):
                    initial.append(("ADDED", obj))
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
        for ev_type, obj in initial:
            await resp.write(_line(ev_type, server._out(rt, obj)))
        if send_initial:
            await resp.write(_bookmark(rt, str(start_rv), initial_end=True))
        for ev in replay:
            replay_type = _transition(ev, match)
            if replay_type is not None:
                await resp.write(ev.encoded(replay_type, rt.api_version))
                last_rv = ev.rv
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
                    await resp.write(_bookmark(rt, str(max(last_rv, server.store.rv))))
                continue
            if item is None:
                break
            if item.rv <= start_rv:
                continue
            live_type = _transition(item, match)
            if live_type is not None:
                await resp.write(item.encoded(live_type, rt.api_version))
            last_rv = item.rv
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        server.store.unwatch(watcher)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await resp.write_eof()
    return resp


def _line(ev_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": ev_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _bookmark(rt: Any, rv: str, *, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return _line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta})


async def _error_stream(request: web.Request, err: APIError) -> web.StreamResponse:
    """A watch that cannot start from its resourceVersion: 200 with one ERROR event (410)."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(_line("ERROR", err.status()))
    await resp.write_eof()
    return resp
