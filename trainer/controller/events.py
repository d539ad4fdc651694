"""Kubernetes Events about TrainJobs (core/v1), messages kept under 1 KiB."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from trainer.api import constants as c
from trainer.kube import resources as r
from trainer.kube.rest import APIError, Kube
from trainer.machinery.messages import truncate

log = logging.getLogger(__name__)

REPORTING_COMPONENT = "trainer-trainjob-controller"
MAX_MESSAGE = 1000

NORMAL = "Normal"
WARNING = "Warning"


class EventRecorder:
    """Records Events; failures to record are logged, never raised (events are best effort)."""

    def __init__(self, kube: Kube, now: Callable[[], str]) -> None:
        self.kube = kube
        self.now = now

    async def record(
        self, trainjob: dict[str, Any], type_: str, reason: str, action: str, message: str
    ) -> None:
        meta = trainjob.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        stamp = self.now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'trainjob')}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": c.API_VERSION,
                "kind": c.KIND_TRAINJOB,
                "name": meta.get("name", ""),
                "namespace": namespace,
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "type": type_,
            "reason": reason,
            "action": action,
            "message": truncate(message, MAX_MESSAGE),
            "source": {"component": REPORTING_COMPONENT},
            "reportingComponent": REPORTING_COMPONENT,
            "reportingInstance": REPORTING_COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.kube.create(event, gvr=r.EVENTS)
        except APIError as exc:
            log.warning(
                "could not record event %s on %s/%s: %s", reason, namespace, meta.get("name"), exc
            )
