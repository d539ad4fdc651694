"""The local plane's scheduler: binds pending pods to nodes as kube-scheduler does, and says
why the others wait (docs/local-plane.md, "Scheduling").

The decisions are :func:`~trainer.local.executor.scheduler.policy.scheduling.schedule`'s, a pure
function of the nodes, the pods and the JobSets; this module feeds it from watch caches
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

A unit (a gang, or a pod scheduled alone) that a pass could not place backs off as
kube-scheduler's pods do: it is tried again only 1 s after its first failed attempt, then 2, 4,
8 and at most 10 s after each next one (``podInitialBackoffSeconds``,
``podMaxBackoffSeconds``), and a change that arrives meanwhile wakes a pass when the back-off
ends. A pass therefore costs the units it tries, not every pod that waits: with tens of
thousands of pods waiting (docs/simulation.md) each pass tried them all. An admitted gang's pods
never back off: its room is held for them.
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
from trainer.local.executor.api import recorder
from trainer.local.executor.scheduler.policy import scheduling as sch
from trainer.machinery.backoff import doubling
from trainer.machinery.times import now

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"
UNSCHEDULABLE_BACKOFF = 1.0
UNSCHEDULABLE_BACKOFF_MAX = 10.0
"""kube-scheduler's pod back-off: initial 1 s, at most 10 s (podInitialBackoffSeconds,
podMaxBackoffSeconds)."""


def backoff_seconds(attempts: int) -> float:
    """How long a unit waits after its ``attempts``-th failed attempt: 1 s doubling, at most
    10 s."""
    return doubling(attempts, UNSCHEDULABLE_BACKOFF, UNSCHEDULABLE_BACKOFF_MAX)


def unit_of(view: sch.PodView) -> str:
    """What is placed at once: the pod's gang, or the pod alone."""
    return view.gang or f"pod:{view.uid}"


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
        self._bound: dict[str, sch.PodView] = {}
        """Pod uid -> the view of a pod bound and not finished: the room taken."""
        self._waiting: dict[str, str] = {}
        """Pod uid -> its unit, for the pods waiting (unbound or gated)."""
        self._units: dict[str, set[str]] = {}
        """Unit -> the uids of its waiting pods."""
        self._backoff: dict[str, tuple[float, int]] = {}
        """Unit -> when it was last tried and failed, and how many times it failed."""
        self._gangs: dict[str, tuple[str, sch.Gang | None]] = {}
        """JobSet uid -> (resourceVersion, its gang or None)."""
        self._succeeded: dict[str, set[str]] = {}
        """Gang of a running JobSet -> the uids of its pods that succeeded."""
        self._node_views: dict[str, tuple[str, sch.NodeView]] = {}
        self._said: dict[str, str] = {}
        """Pod uid -> the last message written (a pass writes only what changed)."""
        self._timer: asyncio.TimerHandle | None = None

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
            if self._timer is not None:
                self._timer.cancel()
            await self.nodes.stop()

    # --- watch handlers: keep the pass's inputs ---------------------------------------------
    def _on_pod(self, kind: str, pod: dict[str, Any], _old: Any) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        before = self._views.get(uid)
        view = None if kind == DELETED else sch.pod_view(pod, all_or_nothing=self.all_or_nothing)
        self._count_success(kind, pod, uid, view)
        if view is None or view.terminal:
            self._views.pop(uid, None)
            self._objects.pop(uid, None)
            self._bound.pop(uid, None)
            self._stop_waiting(uid)
            self._said.pop(uid, None)
        else:
            self._views[uid], self._objects[uid] = view, pod
            if view.node_name:
                self._bound[uid] = view
            else:
                self._bound.pop(uid, None)
            if view.pending or (view.gated and not view.deleting):
                unit = unit_of(view)
                if self._waiting.get(uid) != unit:
                    self._stop_waiting(uid)
                    self._waiting[uid] = unit
                    self._units.setdefault(unit, set()).add(uid)
                if before is not None and before.gated != view.gated:
                    self._backoff.pop(unit, None)  # ungated: tried at once, as kube-scheduler
            else:
                self._stop_waiting(uid)
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

    def _count_success(
        self, kind: str, pod: dict[str, Any], uid: str, view: sch.PodView | None
    ) -> None:
        """Keep the succeeded pods of each running gang: once all it will run have succeeded,
        its room is let go before its Job and JobSet say so (as Kueue reclaims the quota of
        a workload's succeeded pods), not held while their controllers catch up."""
        gang = (
            view.gang if view is not None else sch.gang_key(pod, all_or_nothing=self.all_or_nothing)
        )
        done = self._succeeded.get(gang) if gang else None
        if done is None:
            return
        if view is not None and (pod.get("status") or {}).get("phase") == "Succeeded":
            done.add(uid)
        elif kind == DELETED:
            done.discard(uid)

    def _finished(self, gang: sch.Gang) -> bool:
        """Whether every pod ``gang`` runs has succeeded."""
        want = gang.succeeded_when_done
        return bool(want) and len(self._succeeded.get(gang.key, ())) >= want

    def _stop_waiting(self, uid: str) -> None:
        unit = self._waiting.pop(uid, None)
        if unit is None:
            return
        members = self._units.get(unit)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._units[unit]
                self._backoff.pop(unit, None)

    def _on_jobset(self, kind: str, js: dict[str, Any], _old: Any) -> None:
        meta = js.get("metadata") or {}
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        if kind == DELETED:
            self._gangs.pop(uid, None)
        elif self._gangs.get(uid, ("", None))[0] != rv:
            self._gangs[uid] = (rv, sch.jobset_gang(js))
        gang = self._gangs.get(uid, ("", None))[1]
        key = sch.jobset_gang_key(js)
        if gang is None:
            self._succeeded.pop(key, None)
        elif key not in self._succeeded:
            self._succeeded[key] = set()
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
        """One scheduling pass: bind what fits of the units not backing off, report what
        waits."""
        self.passes += 1
        if not self._units:
            return sch.Decision()  # nothing waits: what is held may be dropped later
        loop = asyncio.get_running_loop()
        clock = loop.time()
        tried: list[sch.PodView] = []
        later: float | None = None
        for unit, uids in self._units.items():
            retry = self._retry_at(unit)
            if retry > clock and unit not in self.admitted:
                later = retry if later is None else min(later, retry)
                continue
            tried.extend(self._views[uid] for uid in uids)
        if later is not None:
            self._wake_at(later)  # a change came during their back-off: try them when it ends
        if not tried:
            return sch.Decision()
        gangs = {
            g.key: g for _, g in self._gangs.values() if g is not None and not self._finished(g)
        }
        decision = sch.schedule(
            [v for _, v in self._node_views.values()],
            [*self._bound.values(), *tried],
            gangs,
            self.admitted,
        )
        failed = {self._waiting[uid] for uid in decision.waiting if uid in self._waiting}
        for unit in failed - self.admitted.keys():
            self._backoff[unit] = (clock, self._backoff.get(unit, (0.0, 0))[1] + 1)
        objects, views = self._objects, self._views
        binds = [self._bind(objects[view.uid], view, node) for view, node in decision.binds]
        gated = [self._gated(objects[view.uid], view) for view in decision.gated]
        said = [
            self._unschedulable(objects[uid], views[uid], why)
            for uid, why in decision.waiting.items()
            if self._said.get(uid) != why.message
        ]
        await _each([*binds, *gated, *said])  # binds first: they start work
        return decision

    def _retry_at(self, unit: str) -> float:
        """When a unit that could not be placed is tried again: as kube-scheduler retries an
        unschedulable pod, after a back-off of 1 s doubling to 10 s per failed attempt."""
        failed = self._backoff.get(unit)
        if failed is None:
            return 0.0
        when, attempts = failed
        return when + backoff_seconds(attempts)

    def _wake_at(self, when: float) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None and not self._timer.cancelled():
            if self._timer.when() <= when and self._timer.when() > loop.time():
                return
            self._timer.cancel()
        self._timer = loop.call_at(when, self._wake.set)

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

    async def _unschedulable(
        self, pod: dict[str, Any], view: sch.PodView, why: sch.Waiting
    ) -> None:
        uid = view.uid
        current = scheduled_condition(pod)
        if self._said.get(uid) == why.message or (
            current.get("reason") == UNSCHEDULABLE and current.get("message") == why.message
        ):
            self._said[uid] = why.message
            return
        meta = pod.get("metadata") or {}
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
        self.events.emit(pod, type_, reason, message)
