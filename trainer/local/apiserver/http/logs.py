"""Container logs: fed by the local executor (it plays the kubelet), served by
``GET .../pods/{name}/log`` whole, as a tail, or followed until the pod ends.

As a kubelet keeps them: the log of a container's current run, and with ``previous=true`` the
log of its run before (the executor says which run a chunk belongs to with ``restartCount``;
a chunk of a later run starts a new log and keeps the last one as the previous). A container
that never restarted has no previous log: 400, with kube-apiserver's message.

Logs live in memory only (as a node's do between restarts of this server); a follower is
woken by :meth:`PodLogs.append` rather than polling, and stops when the server stops.

A deleted pod's logs go with it, as on a node, except those of a pod of a JobSet that still
exists: the Job controller deletes the pods of a Job that reached its backoff limit (and
JobSet those of the Jobs it recreates), and their logs are often the only record of why the
training failed. Those are kept, with the pod as it was last stored, until the JobSet is
deleted (with its TrainJob) or a new pod takes the name; ``GET .../pods/{name}/log`` with
``deletedPod=true`` (this server's extension, authorized as any ``pods/log`` read of the
namespace) serves them (docs/local-plane.md, "Logs of deleted pods").
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from trainer.jobset import contract as jsc
from trainer.local.apiserver import metadata
from trainer.local.apiserver.core.storage import Storage
from trainer.local.apiserver.errors import APIError, bad_request
from trainer.local.apiserver.resources import ResourceType
from trainer.local.apiserver.selectors import flag
from trainer.local.apiserver.store import Event, Store

Key = tuple[str, str, str]  # namespace, pod, container
PODS = ("", "pods")
JOBSETS = (jsc.GROUP, jsc.PLURAL)
JOBSET_NAME = jsc.LABEL_JOBSET_NAME
DELETED_POD = "deletedPod"
"""The query parameter that asks for a deleted pod's kept log."""


@dataclass
class KeptPod:
    """A deleted pod of a live JobSet: the pod as last stored and its containers' logs."""

    pod: dict[str, Any]
    jobset: str
    chunks: dict[str, list[str]] = field(default_factory=dict)
    previous: dict[str, list[str]] = field(default_factory=dict)


class PodLogs:
    """The log text of every container, in the chunks it arrived in."""

    def __init__(self, store: Store | None = None) -> None:
        self.chunks: dict[Key, list[str]] = {}
        self.previous: dict[Key, list[str]] = {}
        self.runs: dict[Key, int] = {}
        self.containers: dict[tuple[str, str], set[str]] = {}
        """The containers each pod has a log of (a pod's deletion finds them at once)."""
        self.kept: dict[tuple[str, str], KeptPod] = {}
        """Deleted pods whose logs are kept, by namespace and name."""
        self._waiters: dict[Key, asyncio.Event] = {}
        self.stopping = asyncio.Event()
        self.store = store
        if store is not None:
            store.subscribe(self.on_write)

    def close(self) -> None:
        """The server stops: followers end, and the store's events are no longer followed."""
        self.stopping.set()
        if self.store is not None:
            self.store.unsubscribe(self.on_write)

    def on_write(self, ev: Event) -> None:
        """Follow pod and JobSet deletions (a subscriber of the store): keep or drop the logs."""
        if ev.key == PODS and ev.type in ("ADDED", "DELETED"):
            name = str(ev.obj["metadata"]["name"])
            self.kept.pop((ev.namespace, name), None)  # a new pod of that name: its own logs
            if ev.type == "DELETED":
                self._pod_deleted(ev.namespace, name, ev.obj)
        elif ev.key == JOBSETS and ev.type == "DELETED":
            jobset = str(ev.obj["metadata"]["name"])
            for key in [k for k, v in self.kept.items() if k[0] == ev.namespace]:
                if self.kept[key].jobset == jobset:
                    del self.kept[key]

    def _pod_deleted(self, namespace: str, name: str, pod: dict[str, Any]) -> None:
        keys = [(namespace, name, c) for c in self.containers.pop((namespace, name), ())]
        chunks = {k[2]: self.chunks.pop(k) for k in keys if k in self.chunks}
        previous = {k[2]: self.previous.pop(k) for k in keys if k in self.previous}
        for k in keys:
            self.runs.pop(k, None)
            waiter = self._waiters.pop(k, None)
            if waiter is not None:
                waiter.set()  # a follower sees the pod gone and ends
        jobset = str(((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME) or "")
        if not jobset or self.store is None:
            return
        owner = self.store.get(JOBSETS, namespace, jobset)
        if owner is None or (owner.get("metadata") or {}).get("deletionTimestamp"):
            return  # deleted with its JobSet: nothing to keep them for
        self.kept[(namespace, name)] = KeptPod(pod, jobset, chunks, previous)

    def append(
        self, namespace: str, pod: str, container: str, text: str, run: int | None = None
    ) -> None:
        key = (namespace, pod, container)
        self.containers.setdefault((namespace, pod), set()).add(container)
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
        """``GET .../log`` of a stored pod (``container``, ``tailLines``, ``follow``), or
        with ``deletedPod=true`` of a deleted pod whose log is kept."""
        if flag(query.get(DELETED_POD)):
            return self._serve_kept(namespace, name, query)
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

    def _serve_kept(self, namespace: str, name: str, query: dict[str, str]) -> web.Response:
        kept = self.kept.get((namespace, name))
        if kept is None:
            raise APIError(404, "NotFound", f'no kept log of a deleted pod "{name}"')
        spec = kept.pod.get("spec") or {}
        containers = [
            str(c.get("name"))
            for group in ("initContainers", "containers")
            for c in spec.get(group) or []
        ]
        container = query.get("container") or (containers[-1] if len(containers) == 1 else "")
        if container not in containers:
            raise bad_request(
                f"a container name must be specified for pod {name}, choose one of: {containers}"
            )
        source = kept.previous if flag(query.get("previous")) else kept.chunks
        text = "".join(source.get(container, []))
        tail = metadata.int_param(query, "tailLines", options="PodLogOptions")
        if tail:
            text = "".join(text.splitlines(keepends=True)[-tail:])
        return web.Response(text=text, content_type="text/plain")
