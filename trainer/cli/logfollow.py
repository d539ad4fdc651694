"""Pod logs of TrainJobs on a cluster, for ``trainer run --kubeconfig`` (docs/local-plane.md
has the local plane's, which its kubelet hands over itself): each container's log is followed
through the API (``pods/{name}/log?follow=true``, as ``kubectl logs -f``) from the moment it
has started, its lines printed prefixed by the pod's name."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from trainer.jobset import contract as jc
from trainer.kube.podlogs import stream_log
from trainer.kube.rest import APIError, Kube

log = logging.getLogger(__name__)


class LogFollower:
    """A pod watch handler that follows the logs of the pods of ``jobs`` (namespace, TrainJob
    name: their JobSet has the same name); each container once, from its first start."""

    def __init__(
        self,
        kube: Kube,
        jobs: list[tuple[str, str]],
        emit: Callable[[str, str, str], None],
    ) -> None:
        self.kube, self.jobs, self.emit = kube, set(jobs), emit
        self._followed: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, _event: str, pod: dict[str, Any], _old: dict[str, Any] | None) -> None:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        owner = (meta.get("labels") or {}).get(jc.LABEL_JOBSET_NAME)
        if (namespace, owner) not in self.jobs:
            return
        status = pod.get("status") or {}
        statuses = [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]
        for cs in statuses:
            state = cs.get("state") or {}
            key = (str(meta.get("uid")), str(cs.get("name")))
            if key in self._followed or not ("running" in state or "terminated" in state):
                continue
            self._followed.add(key)
            task = asyncio.get_running_loop().create_task(
                self._follow(namespace, str(meta.get("name")), str(cs.get("name")))
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _follow(self, namespace: str, pod: str, container: str) -> None:
        pending = b""
        try:
            async with contextlib.aclosing(
                stream_log(self.kube, namespace, pod, container, follow=True)
            ) as chunks:
                async for chunk in chunks:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        self.emit(pod, container, line.decode(errors="replace"))
        except (APIError, OSError, TimeoutError) as exc:
            log.info("log of %s/%s [%s] not followed: %s", namespace, pod, container, exc)
        if pending:
            self.emit(pod, container, pending.decode(errors="replace"))

    async def close(self, grace: float = 2.0) -> None:
        """Let the streams of containers that ended deliver their last lines (for at most
        ``grace`` seconds), then stop following."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
