"""Kubernetes Events about TrainJobs (core/v1), posted best effort through
:mod:`trainer.kube.events` (messages kept under 1 KiB)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainer.api import constants as c
from trainer.kube.events import MAX_MESSAGE, NORMAL, WARNING, Recorder
from trainer.kube.rest import Kube

__all__ = ["MAX_MESSAGE", "NORMAL", "REPORTING_COMPONENT", "WARNING", "EventRecorder"]

REPORTING_COMPONENT = "trainer-trainjob-controller"


class EventRecorder:
    """Records Events about TrainJobs; failures to record are logged, never raised."""

    def __init__(self, kube: Kube, now: Callable[[], str]) -> None:
        self.kube = kube
        self.now = now
        self._recorder = Recorder(kube, REPORTING_COMPONENT, now=now)

    async def record(
        self, trainjob: dict[str, Any], type_: str, reason: str, action: str, message: str
    ) -> None:
        # The TrainJob's own apiVersion and kind, whatever the cached copy carries.
        about = {**trainjob, "apiVersion": c.API_VERSION, "kind": c.KIND_TRAINJOB}
        await self._recorder.record(about, type_, reason, message, action=action)
