"""The local plane's scheduler: binds pending pods to nodes as kube-scheduler does, and says
why the others wait (docs/local-plane.md, "Scheduling").

The decisions are :func:`~trainer.local.executor.scheduling.schedule`'s, a pure function of the
nodes, the pods and the JobSets; this module feeds it from watch caches
(:class:`~trainer.kube.informer.Informer`: Nodes of its own, the executor's Pods and JobSets)
and writes what it decides through the plane's client, as kube-scheduler would:

- a pod that fits is bound (``pods/{name}/binding``: the API server sets ``spec.nodeName`` and
  ``PodScheduled=True``) and gets a ``Scheduled`` Event;
- a pod that does not is reported ``PodScheduled=False``, reason ``Unschedulable``, with
  kube-scheduler's message, and a ``FailedScheduling`` Warning, each time the message changes;
- a pod with ``spec.schedulingGates`` is reported ``PodScheduled=False``, reason
  ``SchedulingGated``.

Any change of a pod, a node or a JobSet asks for a pass; changes that arrive while a pass runs
are taken by the next one. Passes start once a node is known.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from trainer.kube.events import NORMAL, WARNING
from trainer.kube.informer import Informer
from trainer.kube.resources import NODES, PODS
from trainer.kube.rest import APIError, Kube
from trainer.local.executor import scheduling as sch
from trainer.local.executor.api import recorder
from trainer.machinery.times import now

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"


def unschedulable_status(pod: Mapping[str, Any], message: str, stamp: str) -> dict[str, Any]:
    """The status kube-scheduler writes for a pod no node takes: Pending,
    ``PodScheduled=False`` (reason ``Unschedulable``) with ``message``; other conditions
    kept."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    previous: dict[str, Any] = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    since = (
        previous.get("lastTransitionTime")
        if previous.get("status") == "False" and previous.get("lastTransitionTime")
        else stamp
    )
    return {
        "phase": "Pending",
        "conditions": [
            *[c for c in conditions if c.get("type") != "PodScheduled"],
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": UNSCHEDULABLE,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": since,
            },
        ],
    }


def scheduling_gated_status(pod: Mapping[str, Any], *, now: str) -> dict[str, Any] | None:
    """The status a scheduler reports for a pod held by ``spec.schedulingGates``: Pending with
    ``PodScheduled=False`` (reason ``SchedulingGated``); None when it already says so."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    if any(c.get("reason") == "SchedulingGated" for c in conditions):
        return None
    return {
        "phase": "Pending",
        "conditions": [
            *[c for c in conditions if c.get("type") != "PodScheduled"],
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": sch.SCHEDULING_GATED,
                "lastTransitionTime": now,
            },
        ],
    }


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return {}


class Scheduler:
    """Binds the pods of ``pods`` (a shared watch cache of every pod) to the nodes it watches.

    ``jobsets`` (the executor's watch cache) gives each gang its demand (without it, as on a
    plane with no JobSet API, no pod is a gang); ``all_or_nothing`` makes every JobSet a gang
    (the local plane's default; PodGroups are gangs either way)."""

    def __init__(
        self,
        kube: Kube,
        pods: Informer,
        jobsets: Informer | None = None,
        *,
        all_or_nothing: bool = True,
    ) -> None:
        self.kube = kube
        self.pods = pods
        self.jobsets = jobsets
        self.nodes = Informer(kube, NODES)
        self.all_or_nothing = all_or_nothing and jobsets is not None
        self.admitted: dict[str, dict[str, sch.Resources]] = {}
        """Gang -> node -> the room held for it (see :func:`~.scheduling.schedule`)."""
        self.events = recorder(kube, "default-scheduler")
        self.passes = 0
        self._wake = asyncio.Event()
        self._views: dict[str, tuple[str, sch.PodView]] = {}
        self._said: dict[str, str] = {}
        """Pod uid -> the last message written (a pass writes only what changed)."""
        self._tasks: set[asyncio.Task[Any]] = set()

    def wake(self, *_args: Any) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Schedule until cancelled."""
        await self.nodes.start()
        try:
            watched = [i for i in (self.pods, self.jobsets, self.nodes) if i is not None]
            await asyncio.gather(*(i.wait_synced() for i in watched))
            for informer in watched:
                informer.add_handler(self.wake)
            self._wake.set()
            while True:
                await self._wake.wait()
                self._wake.clear()
                if not len(self.nodes):
                    continue  # the kubelet registers its node first
                try:
                    await self.pass_once()
                except (APIError, OSError, ValueError) as exc:
                    log.warning("scheduler: a pass failed (retried at the next change): %s", exc)
        finally:
            for task in self._tasks:
                task.cancel()
            await self.nodes.stop()

    def _view(self, pod: dict[str, Any]) -> sch.PodView:
        meta = pod.get("metadata") or {}
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        cached = self._views.get(uid)
        if cached is not None and cached[0] == rv:
            return cached[1]
        view = sch.pod_view(pod, all_or_nothing=self.all_or_nothing)
        self._views[uid] = (rv, view)
        return view

    async def pass_once(self) -> sch.Decision:
        """One scheduling pass: bind what fits, report what waits."""
        self.passes += 1
        pods = self.pods.list()
        live = {str((p.get("metadata") or {}).get("uid") or "") for p in pods}
        for uid in [u for u in self._views if u not in live]:
            del self._views[uid]
            self._said.pop(uid, None)
        views = [self._view(p) for p in pods]
        if not any(v.pending or (v.gated and not v.deleting) for v in views):
            return sch.Decision()  # nothing waits: what is held may be dropped later
        by_uid = {str((p.get("metadata") or {}).get("uid") or ""): p for p in pods}
        gangs: dict[str, sch.Gang] = {}
        for js in self.jobsets.list() if self.jobsets is not None else ():
            gang = sch.jobset_gang(js)
            if gang is not None:
                gangs[gang.key] = gang
        decision = sch.schedule(
            [sch.node_view(n) for n in self.nodes.list()],
            views,
            gangs,
            self.admitted,
        )
        for view, node in decision.binds:
            await self._bind(by_uid[view.uid], view, node)
        for view in decision.gated:
            await self._gated(by_uid[view.uid], view)
        for uid, why in decision.waiting.items():
            await self._unschedulable(by_uid[uid], uid, why)
        return decision

    async def _bind(self, pod: dict[str, Any], view: sch.PodView, node: str) -> None:
        try:
            await self.kube.bind(view.namespace, view.name, node, uid=view.uid)
        except APIError as exc:
            if exc.is_conflict or exc.is_not_found:
                return  # bound, deleted or replaced meanwhile: the next pass sees it
            raise
        self._said.pop(view.uid, None)
        self._record(pod, NORMAL, "Scheduled", f"Successfully assigned {view.key} to {node}")

    async def _gated(self, pod: dict[str, Any], view: sch.PodView) -> None:
        status = scheduling_gated_status(pod, now=now())
        if status is None:
            return
        await self._patch_status(view, status)

    async def _unschedulable(self, pod: dict[str, Any], uid: str, why: sch.Waiting) -> None:
        current = scheduled_condition(pod)
        if self._said.get(uid) == why.message or (
            current.get("reason") == UNSCHEDULABLE and current.get("message") == why.message
        ):
            self._said[uid] = why.message
            return
        meta = pod.get("metadata") or {}
        view = self._view(pod)
        if await self._patch_status(view, unschedulable_status(pod, why.message, now())):
            self._said[uid] = why.message
            self._record(pod, WARNING, "FailedScheduling", why.message)
            log.info("pod %s/%s waits: %s", meta.get("namespace"), meta.get("name"), why.message)

    async def _patch_status(self, view: sch.PodView, status: dict[str, Any]) -> bool:
        try:
            await self.kube.patch_status(PODS, view.namespace, view.name, {"status": status})
        except APIError as exc:
            if exc.is_not_found or exc.is_conflict:
                return False
            raise
        return True

    def _record(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        task = asyncio.get_running_loop().create_task(
            self.events.record(pod, type_, reason, message)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
