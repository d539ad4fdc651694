"""Posting core/v1 Events, best effort, as client-go's event recorder does: a failed post is
logged and never fails the work that caused it, and a message is cut to fit an Event's note
(under 1 KiB, :func:`trainer.machinery.messages.truncate`).

One recorder serves every component that reports (the TrainJob controller, and the local
plane's JobSet controller, Job controller, kubelet and scheduler): each names itself
(``component``, and ``host`` for a node-local one such as a kubelet)."""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer.kube import resources as r
from trainer.kube.rest import APIError, Kube
from trainer.machinery.messages import truncate
from trainer.machinery.times import now as utc_now

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
MAX_MESSAGE = 1000
"""An Event's note must stay under 1 KiB."""


EVENTS_IN_FLIGHT = 8
"""Event posts in flight at once per process: a burst of Events waits its turn instead of taking
the client's connections from the work that caused them (hack/bench/simulate.py: thousands of
pods bound at once)."""
EVENTS_QUEUED = 10_000
"""Events emitted and not yet posted, per process, beyond which more are dropped (logged), as
client-go's broadcaster drops them when its queue is full: Events are best effort, and a
backlog must not grow without bound while the API server is saturated. Deep enough to absorb
the bursts of a cluster-scale run (hack/bench/simulate.py: with 1,000 the run was slower, the
Events posted during the work rather than after it)."""


@dataclass
class _Posting:
    slots: asyncio.Semaphore
    pending: int = 0
    dropped: int = 0


_loop_posting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Posting] = (
    weakref.WeakKeyDictionary()
)


def _posting_state() -> _Posting:
    loop = asyncio.get_running_loop()
    state = _loop_posting.get(loop)
    if state is None:
        state = _loop_posting[loop] = _Posting(asyncio.Semaphore(EVENTS_IN_FLIGHT))
    return state


def new_event(
    obj: dict[str, Any],
    type_: str,
    reason: str,
    message: str,
    *,
    component: str,
    stamp: str,
    host: str = "",
    action: str = "",
) -> dict[str, Any]:
    """The Event about ``obj`` (its ``involvedObject`` taken from the object's own apiVersion,
    kind and metadata), named ``<object>.<random>`` as client-go names them."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    source: dict[str, str] = {"component": component}
    if host:
        source["host"] = host
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name or str(obj.get('kind') or 'object').lower()}.{uuid.uuid4().hex[:16]}",
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": name,
            "namespace": namespace,
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "type": type_,
        "reason": reason,
        "message": truncate(message, MAX_MESSAGE),
        "source": source,
        "reportingComponent": component,
        "reportingInstance": f"{component}-{host}" if host else component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    if action:
        event["action"] = action
    return event


class Recorder:
    """Posts Events about objects for one ``component`` (on ``host``, when node-local)."""

    def __init__(
        self,
        kube: Kube,
        component: str,
        *,
        host: str = "",
        now: Callable[[], str] = utc_now,
    ) -> None:
        self.kube = kube
        self.component = component
        self.host = host
        self.now = now
        self._posting: set[asyncio.Task[None]] = set()

    def emit(
        self, obj: dict[str, Any], type_: str, reason: str, message: str, *, action: str = ""
    ) -> None:
        """:meth:`record` without waiting for it: the Event is posted in the background, as
        client-go's broadcaster posts them, so the work that reports it does not wait a round
        trip per Event. The stamp is taken now. Past ``EVENTS_QUEUED`` waiting, it is dropped."""
        state = _posting_state()
        if state.pending >= EVENTS_QUEUED:
            state.dropped += 1
            if state.dropped == 1 or state.dropped % EVENTS_QUEUED == 0:
                log.warning(
                    "Event dropped (%d so far): %d Events are waiting to be posted (the API server"
                    " is slow)",
                    state.dropped,
                    state.pending,
                )
            return
        state.pending += 1
        stamp = self.now()
        task = asyncio.get_running_loop().create_task(
            self._post(obj, type_, reason, message, action=action, stamp=stamp)
        )
        self._posting.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            state.pending -= 1
            self._posting.discard(finished)

        task.add_done_callback(done)

    async def record(
        self, obj: dict[str, Any], type_: str, reason: str, message: str, *, action: str = ""
    ) -> None:
        await self._post(obj, type_, reason, message, action=action, stamp=self.now())

    async def _post(
        self,
        obj: dict[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        action: str,
        stamp: str,
    ) -> None:
        event = new_event(
            obj,
            type_,
            reason,
            message,
            component=self.component,
            stamp=stamp,
            host=self.host,
            action=action,
        )
        try:
            async with _posting_state().slots:
                await self.kube.create(event, gvr=r.EVENTS)
        except (APIError, OSError, ValueError) as exc:  # best effort: never fail the work
            if isinstance(exc, APIError) and exc.is_namespace_terminating:
                return  # the namespace goes with its events; nothing worth a warning
            meta = obj.get("metadata") or {}
            log.warning(
                "could not record event %s on %s/%s: %s",
                reason,
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )
