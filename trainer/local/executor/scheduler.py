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

A change that can alter a decision (a pod to place, a pod bound, finished or gone, a node or a
JobSet changed) asks for a pass; changes that arrive while a pass runs are taken by the next
one. The pass's inputs are kept up to date by the watch handlers, for the pods not yet finished
only. Passes start once a node is known.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any

from trainer.kube.events import NORMAL, WARNING
from trainer.kube.informer import DELETED, Informer
from trainer.kube.resources import NODES, PODS
from trainer.kube.rest import APIError, Kube
from trainer.local.executor import scheduling as sch
from trainer.local.executor.api import recorder
from trainer.machinery.times import now

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"
UNSCHEDULABLE_BACKOFF = 1.0
UNSCHEDULABLE_BACKOFF_MAX = 10.0
"""kube-scheduler's pod back-off: initial 1 s, at most 10 s (podInitialBackoffSeconds,
podMaxBackoffSeconds)."""


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


WRITES_IN_FLIGHT = 64
"""A pass's writes (binds, statuses) sent at once: a pass that binds a thousand pods waits on
round trips, not on one after another."""


async def _each(calls: Iterable[Awaitable[Any]]) -> None:
    """Await ``calls``, ``WRITES_IN_FLIGHT`` at a time; the first error is raised once all
    have ended (the rest are not lost)."""
    pending = list(calls)
    errors: list[BaseException] = []
    for i in range(0, len(pending), WRITES_IN_FLIGHT):
        results = await asyncio.gather(*pending[i : i + WRITES_IN_FLIGHT], return_exceptions=True)
        errors.extend(r for r in results if isinstance(r, BaseException))
    if errors:
        raise errors[0]


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
        # What a pass decides on, kept up to date by the watch handlers so that a pass costs
        # the pods still alive, not every pod ever made (docs/simulation.md, "Cost"): the views
        # and objects of pods not yet finished, the uids of those waiting (unbound or gated),
        # each JobSet's gang and each node's view.
        self._views: dict[str, sch.PodView] = {}
        self._objects: dict[str, dict[str, Any]] = {}
        self._waiting: set[str] = set()
        self._gangs: dict[str, tuple[str, sch.Gang | None]] = {}
        """JobSet uid -> (resourceVersion, its gang or None)."""
        self._node_views: dict[str, tuple[str, sch.NodeView]] = {}
        self._said: dict[str, str] = {}
        self._said_at: dict[str, tuple[float, int]] = {}
        """Pod uid -> when its waiting message was last written, and how many times."""
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
            self.pods.add_handler(self._on_pod)
            for pod in self.pods.list():
                self._on_pod("ADDED", pod, None)
            if self.jobsets is not None:
                self.jobsets.add_handler(self._on_jobset)
                for js in self.jobsets.list():
                    self._on_jobset("ADDED", js, None)
            self.nodes.add_handler(self._on_node)
            for node in self.nodes.list():
                self._on_node("ADDED", node, None)
            self._wake.set()
            while True:
                await self._wake.wait()
                self._wake.clear()
                if not self._node_views:
                    continue  # the kubelet registers its node first
                try:
                    await self.pass_once()
                except (APIError, OSError, ValueError) as exc:
                    log.warning("scheduler: a pass failed (retried at the next change): %s", exc)
        finally:
            for task in self._tasks:
                task.cancel()
            await self.nodes.stop()

    # --- watch handlers: keep the pass's inputs ---------------------------------------------
    def _on_pod(self, kind: str, pod: dict[str, Any], _old: Any) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        before = self._views.get(uid)
        view = None if kind == DELETED else sch.pod_view(pod, all_or_nothing=self.all_or_nothing)
        if view is None or view.terminal:
            self._views.pop(uid, None)
            self._objects.pop(uid, None)
            self._waiting.discard(uid)
            self._said.pop(uid, None)
            self._said_at.pop(uid, None)
        else:
            self._views[uid], self._objects[uid] = view, pod
            if view.pending or (view.gated and not view.deleting):
                self._waiting.add(uid)
            else:
                self._waiting.discard(uid)
        # Only what changes a decision wakes a pass: a pod to place, room freed or taken.
        live = view is not None and not view.terminal
        if before is None and not live:
            return  # a finished pod, already let go
        if view is None or before is None or not live:
            self._wake.set()
            return
        if (before.node_name, before.pending, before.gated) != (
            view.node_name,
            view.pending,
            view.gated,
        ):
            self._wake.set()

    def _on_jobset(self, kind: str, js: dict[str, Any], _old: Any) -> None:
        meta = js.get("metadata") or {}
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        if kind == DELETED:
            self._gangs.pop(uid, None)
        elif self._gangs.get(uid, ("", None))[0] != rv:
            self._gangs[uid] = (rv, sch.jobset_gang(js))
        self._wake.set()

    def _on_node(self, kind: str, node: dict[str, Any], _old: Any) -> None:
        meta = node.get("metadata") or {}
        name, rv = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
        if kind == DELETED:
            self._node_views.pop(name, None)
        else:
            cached = self._node_views.get(name)
            view = sch.node_view(node)
            if cached is not None and cached[1] == view:
                return  # a heartbeat: nothing the scheduler decides on changed
            self._node_views[name] = (rv, view)
        self._wake.set()

    async def pass_once(self) -> sch.Decision:
        """One scheduling pass: bind what fits, report what waits."""
        self.passes += 1
        if not self._waiting:
            return sch.Decision()  # nothing waits: what is held may be dropped later
        gangs = {g.key: g for _, g in self._gangs.values() if g is not None}
        decision = sch.schedule(
            [v for _, v in self._node_views.values()],
            list(self._views.values()),
            gangs,
            self.admitted,
        )
        objects = self._objects
        await _each(self._bind(objects[view.uid], view, node) for view, node in decision.binds)
        await _each(self._gated(objects[view.uid], view) for view in decision.gated)
        clock = asyncio.get_running_loop().time()
        changed = [
            (uid, why)
            for uid, why in decision.waiting.items()
            if self._said.get(uid) != why.message
        ]
        due = [(uid, why) for uid, why in changed if self._retry_at(uid) <= clock]
        await _each(self._unschedulable(objects[uid], uid, why) for uid, why in due)
        if len(due) < len(changed):
            # The rest are said again once their back-off ends (if no change comes first).
            wait = min(self._retry_at(uid) for uid, _ in changed) - clock
            asyncio.get_running_loop().call_later(max(wait, 0.0), self._wake.set)
        return decision

    def _retry_at(self, uid: str) -> float:
        """When a waiting pod's changed message may be written again: as kube-scheduler
        retries an unschedulable pod, after a back-off of 1 s doubling to 10 s per attempt, so
        thousands of waiting pods are not rewritten at every pass while room changes."""
        said = self._said_at.get(uid)
        if said is None:
            return 0.0
        when, attempts = said
        backoff: float = min(
            UNSCHEDULABLE_BACKOFF * 2.0 ** (attempts - 1), UNSCHEDULABLE_BACKOFF_MAX
        )
        return when + backoff

    async def _bind(self, pod: dict[str, Any], view: sch.PodView, node: str) -> None:
        try:
            await self.kube.bind(view.namespace, view.name, node, uid=view.uid)
        except APIError as exc:
            if exc.is_conflict or exc.is_not_found:
                return  # bound, deleted or replaced meanwhile: the next pass sees it
            raise
        self._said.pop(view.uid, None)
        self._said_at.pop(view.uid, None)
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
        view = self._views[uid]
        if await self._patch_status(view, unschedulable_status(pod, why.message, now())):
            self._said[uid] = why.message
            attempts = self._said_at.get(uid, (0.0, 0))[1]
            self._said_at[uid] = (asyncio.get_running_loop().time(), attempts + 1)
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
