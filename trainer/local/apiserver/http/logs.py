"""Container logs: fed by the local executor (it plays the kubelet), served by
``GET .../pods/{name}/log`` whole, as a tail, or followed until the pod ends.

As a kubelet keeps them: the log of a container's current run, and with ``previous=true`` the
log of its run before (the executor says which run a chunk belongs to with ``restartCount``;
a chunk of a later run starts a new log and keeps the last one as the previous). A container
that never restarted has no previous log: 400, with kube-apiserver's message.

Logs live in memory only (as a node's do between restarts of this server); a follower is
woken by :meth:`PodLogs.append` rather than polling, and stops when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from trainer.local.apiserver import metadata
from trainer.local.apiserver.core.storage import Storage
from trainer.local.apiserver.errors import bad_request
from trainer.local.apiserver.resources import ResourceType
from trainer.local.apiserver.selectors import flag

Key = tuple[str, str, str]  # namespace, pod, container


class PodLogs:
    """The log text of every container, in the chunks it arrived in."""

    def __init__(self) -> None:
        self.chunks: dict[Key, list[str]] = {}
        self.previous: dict[Key, list[str]] = {}
        self.runs: dict[Key, int] = {}
        self._waiters: dict[Key, asyncio.Event] = {}
        self.stopping = asyncio.Event()

    def append(
        self, namespace: str, pod: str, container: str, text: str, run: int | None = None
    ) -> None:
        key = (namespace, pod, container)
        if run is not None:
            if key in self.runs and run > self.runs[key]:
                self.previous[key] = self.chunks.pop(key, [])
            self.runs[key] = max(run, self.runs.get(key, run))
        self.chunks.setdefault(key, []).append(text)
        waiter = self._waiters.pop(key, None)
        if waiter is not None:
            waiter.set()

    async def serve(
        self,
        storage: Storage,
        request: web.Request,
        rt: ResourceType,
        namespace: str,
        name: str,
        query: dict[str, str],
    ) -> web.StreamResponse:
        """``GET .../log`` of a stored pod (``container``, ``tailLines``, ``follow``)."""
        pod = storage.get_or_404(rt, namespace, name)
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container:
            raise bad_request(
                f"a container name must be specified for pod {name}, choose one of: {containers}"
            )
        key = (namespace, name, container)
        if flag(query.get("previous")):
            if key not in self.previous:
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            return web.Response(text="".join(self.previous[key]), content_type="text/plain")
        if not flag(query.get("follow")):
            text = "".join(self.chunks.get(key, []))
            tail = metadata.int_param(query, "tailLines", options="PodLogOptions")
            if tail:
                text = "".join(text.splitlines(keepends=True)[-tail:])
            return web.Response(text=text, content_type="text/plain")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        sent = 0
        while not self.stopping.is_set():
            chunks = self.chunks.get(key, [])
            for chunk in chunks[sent:]:
                await resp.write(chunk.encode())
            sent = len(chunks)
            current = storage.store.get(rt.key, namespace, name)
            phase = ((current or {}).get("status") or {}).get("phase")
            if current is None or phase in ("Succeeded", "Failed"):
                break
            waiter = self._waiters.setdefault(key, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), timeout=1.0)
        await resp.write_eof()
        return resp
