"""Events the local control plane's stand-ins post, as their counterparts on a cluster do, so
``kubectl describe`` and ``kubectl get events`` tell the story of a local run: the JobSet
controller (suspend, resume, finish), the Job controller (pods created and deleted, completion,
backoff limit) and the kubelet with its one-node scheduler (assignment, container start, stop,
restart back-off, a command that cannot run here).

Posting is best effort, as client-go's recorder: a failed post is logged and never fails the
work that caused it. Messages are cut under 1 KiB."""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any

from trainer.local.executor.client import LocalClient
from trainer.machinery.times import now

log = logging.getLogger(__name__)

NORMAL, WARNING = "Normal", "Warning"
MAX_MESSAGE = 1000
HOST = "local"

_serial = itertools.count(1)


def _truncate(message: str) -> str:
    data = message.encode()
    if len(data) <= MAX_MESSAGE:
        return message
    return data[: MAX_MESSAGE - 3].decode(errors="ignore") + "..."


class Recorder:
    """Posts core/v1 Events about objects for one ``component``."""

    def __init__(self, client: LocalClient, component: str) -> None:
        self.client = client
        self.component = component

    async def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        stamp = now()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{name}.{os.getpid():x}{next(_serial):08x}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": _truncate(message),
            "source": {"component": self.component, "host": HOST},
            "reportingComponent": self.component,
            "reportingInstance": f"{self.component}-{HOST}",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.client.create(event, "events")
        except Exception as exc:  # best effort: never fail the work being reported
            log.debug("event %s for %s/%s not recorded: %s", reason, namespace, name, exc)
