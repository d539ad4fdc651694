"""Events posted in the background (``Recorder.emit``): the caller does not wait, at most
``EVENTS_IN_FLIGHT`` posts are in flight at once, none is lost up to ``EVENTS_QUEUED`` waiting
(beyond, they are dropped and the drop logged, as client-go's broadcaster does), and a failed
post is logged, never raised."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trainer.kube.events import EVENTS_IN_FLIGHT, EVENTS_QUEUED, NORMAL, Recorder
from trainer.kube.rest import APIError


class SlowKube:
    def __init__(self, fail: bool = False) -> None:
        self.release = asyncio.Event()
        self.in_flight = 0
        self.most = 0
        self.posted: list[dict[str, Any]] = []
        self.fail = fail

    async def create(self, obj: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.release.wait()
            if self.fail:
                raise APIError(500, "InternalError", "down")
            self.posted.append(obj)
            return obj
        finally:
            self.in_flight -= 1


def pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "ns"}}


async def test_emitted_events_are_bounded_in_flight_and_all_posted() -> None:
    kube = SlowKube()
    recorder = Recorder(kube, "kubelet")  # type: ignore[arg-type]
    for i in range(3 * EVENTS_IN_FLIGHT):
        recorder.emit(pod(i), NORMAL, "Started", f"started {i}")  # returns at once
    while kube.in_flight < EVENTS_IN_FLIGHT:
        await asyncio.sleep(0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert kube.in_flight == EVENTS_IN_FLIGHT and not kube.posted
    kube.release.set()
    while recorder._posting:
        await asyncio.sleep(0)
    assert kube.most == EVENTS_IN_FLIGHT
    messages = sorted(e["message"] for e in kube.posted)
    assert messages == sorted(f"started {i}" for i in range(3 * EVENTS_IN_FLIGHT))


async def test_a_failed_post_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    kube = SlowKube(fail=True)
    kube.release.set()
    recorder = Recorder(kube, "scheduler")  # type: ignore[arg-type]
    recorder.emit(pod(1), NORMAL, "Scheduled", "assigned")
    while recorder._posting:
        await asyncio.sleep(0)
    assert "could not record event Scheduled on ns/p1" in caplog.text


async def test_past_the_queue_events_are_dropped_and_the_drop_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = SlowKube()
    recorder = Recorder(kube, "kubelet")  # type: ignore[arg-type]
    for i in range(EVENTS_QUEUED + 5):
        recorder.emit(pod(i), NORMAL, "Started", f"started {i}")
    expected = f"Event dropped (1 so far): {EVENTS_QUEUED} Events are waiting to be posted"
    assert expected in caplog.text
    kube.release.set()
    while recorder._posting:
        await asyncio.sleep(0)
    assert len(kube.posted) == EVENTS_QUEUED
    recorder.emit(pod(0), NORMAL, "Started", "after the backlog")  # room again
    while recorder._posting:
        await asyncio.sleep(0)
    assert kube.posted[-1]["message"] == "after the backlog"
