"""The executor: watch caches, the JobSet and Job controllers and the kubelet, driven by one
work loop (a change to a Pod re-reconciles its Job, a change to a Job its JobSet)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.local.executor.cache import Cache
from trainer.local.executor.client import ClientError, LocalClient
from trainer.local.executor.job import JobController
from trainer.local.executor.jobset import JobSetController

log = logging.getLogger(__name__)

JOBSETS = ("jobset.x-k8s.io/v1alpha2", "jobsets")


def _owner(obj: dict[str, Any], kind: str) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return str(ref.get("name"))
    return None


class Executor:
    def __init__(
        self,
        url: str,
        *,
        workdir: Path,
        state_dir: Path,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        on_log: Callable[[str, str, str], None] | None = None,
        kubelet: bool = True,
        ready_timeout: float | None = None,
        plane_ports: tuple[int, ...] = (),
        allow_exposed_ports: bool = False,
    ) -> None:
        self.client = LocalClient(url, token, ssl_context=ssl_context)
        self.jobsets = Cache(self.client, *JOBSETS)
        self.jobs = Cache(self.client, "batch/v1", "jobs")
        self.pods = Cache(self.client, "v1", "pods")
        self.services = Cache(self.client, "v1", "services")
        self.jobset_controller = JobSetController(
            self.client,
            self.jobsets,
            self.jobs,
            self.services,
            pods=self.pods,
            ready_timeout=ready_timeout,
            requeue=self._requeue_jobset,
        )
        self.job_controller = JobController(self.client, self.jobs, self.pods)
        self.workdir, self.state_dir, self.on_log = workdir, state_dir, on_log
        self.run_kubelet = kubelet
        self.plane_ports, self.allow_exposed_ports = plane_ports, allow_exposed_ports
        self._dirty_jobsets: set[tuple[str, str]] = set()
        self._dirty_jobs: set[tuple[str, str]] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._ttl: set[str] = set()
        self.kubelet: Any = None

    def _requeue_jobset(self, ns: str, name: str, delay: float) -> None:
        """Reconcile a JobSet again after ``delay`` seconds (a deadline, not an API event)."""
        # The dirty set is looked up when the timer fires: the loop swaps it for a new one.
        asyncio.get_running_loop().call_later(
            delay, lambda: self._mark(self._dirty_jobsets, ns, name)
        )

    def _mark(self, which: set[tuple[str, str]], ns: str, name: str) -> None:
        which.add((ns, name))
        self._wake.set()

    def _wire(self) -> None:
        def on_jobset(_event: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            self._mark(self._dirty_jobsets, meta.get("namespace", ""), meta.get("name", ""))
            self._maybe_ttl(obj)

        def on_job(_event: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            self._mark(self._dirty_jobs, meta.get("namespace", ""), meta.get("name", ""))
            owner = _owner(obj, "JobSet")
            if owner:
                self._mark(self._dirty_jobsets, meta.get("namespace", ""), owner)

        def on_pod(_event: str, obj: dict[str, Any]) -> None:
            owner = _owner(obj, "Job")
            if owner:
                self._mark(
                    self._dirty_jobs, (obj.get("metadata") or {}).get("namespace", ""), owner
                )

        self.jobsets.handlers.append(on_jobset)
        self.jobs.handlers.append(on_job)
        self.pods.handlers.append(on_pod)

    def _maybe_ttl(self, js: dict[str, Any]) -> None:
        ttl = (js.get("spec") or {}).get("ttlSecondsAfterFinished")
        meta = js.get("metadata") or {}
        if (
            ttl is None
            or not (js.get("status") or {}).get("terminalState")
            or meta.get("uid") in self._ttl
        ):
            return
        self._ttl.add(meta["uid"])

        async def expire() -> None:
            await asyncio.sleep(float(ttl))
            try:
                await self.client.delete(
                    *JOBSETS, meta["namespace"], meta["name"], propagation="Foreground"
                )
            except ClientError as exc:
                log.warning("TTL deletion of JobSet %s failed: %s", meta["name"], exc)

        self._tasks.append(asyncio.create_task(expire()))

    async def start(self) -> None:
        self._wire()
        for cache in (self.jobsets, self.jobs, self.pods, self.services):
            cache.start()
        await asyncio.gather(
            *(c.synced.wait() for c in (self.jobsets, self.jobs, self.pods, self.services))
        )
        self._tasks.append(asyncio.create_task(self._loop(), name="executor-loop"))
        if self.run_kubelet:
            from trainer.local.executor.kubelet import Kubelet  # noqa: PLC0415 - optional part

            self.kubelet = Kubelet(
                self.client,
                workdir=self.workdir,
                state_dir=self.state_dir,
                on_log=self.on_log,
                plane_ports=self.plane_ports,
                allow_exposed_ports=self.allow_exposed_ports,
            )
            self._tasks.append(asyncio.create_task(self.kubelet.run(), name="kubelet"))

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            jobs, self._dirty_jobs = self._dirty_jobs, set()
            for ns, name in sorted(jobs):
                try:
                    await self.job_controller.reconcile(ns, name)
                except Exception:
                    log.exception("Job %s/%s", ns, name)
            jobsets, self._dirty_jobsets = self._dirty_jobsets, set()
            for ns, name in sorted(jobsets):
                try:
                    await self.jobset_controller.reconcile(ns, name)
                except Exception:
                    log.exception("JobSet %s/%s", ns, name)

    async def stop(self) -> None:
        if self.kubelet is not None:
            await self.kubelet.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for cache in (self.jobsets, self.jobs, self.pods, self.services):
            await cache.stop()
        await self.client.close()
