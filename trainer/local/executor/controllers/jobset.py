"""The JobSet controller of the local executor: the I/O around its policy.

:meth:`JobSetController.reconcile` reads one JobSet and the Jobs it owns from the executor's
watch caches, asks :func:`~trainer.local.executor.controllers.policy.jobset.plan` (pure: the policy,
the Jobs and the status JobSet writes) what to do, and does it through the API: deletes, the
headless Service, Job creates, suspend patches, Events, the status. What the core cannot know
lives here: the host ports each JobSet's pods get (:mod:`~trainer.local.executor.sandbox.ports`,
kept in the Jobs' pod annotations so a restarted executor finds them again) and when a timed ready
wait was first seen. A failed write raises: the executor's work queue retries the JobSet with
back-off; a deadline comes back as ``Result(requeue_after=...)``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from trainer.jobset import contract as jc
from trainer.kube.events import Recorder
from trainer.kube.informer import Informer
from trainer.kube.resources import JOBS, JOBSETS, SERVICES
from trainer.kube.rest import APIError, Kube
from trainer.local.executor.api import recorder
from trainer.local.executor.controllers.policy import jobset as core
from trainer.local.executor.policy.podfields import LOCAL_PORTS
from trainer.local.executor.policy.sshports import LOCAL_SSH, ssh_hosts
from trainer.local.executor.sandbox.ports import PortAllocator
from trainer.machinery.times import now
from trainer.machinery.workqueue import Result

log = logging.getLogger(__name__)

FOREGROUND = "Foreground"


def _pod_annotations(job: dict[str, Any]) -> dict[str, Any]:
    template = (job.get("spec") or {}).get("template") or {}
    return dict((template.get("metadata") or {}).get("annotations") or {})


class JobSetController:
    """Reconciles one JobSet at a time (the executor's work queue calls :meth:`reconcile`)."""

    def __init__(
        self,
        kube: Kube,
        jobsets: Informer,
        jobs: Informer,
        services: Informer,
        *,
        pods: Informer | None = None,
        ready_timeout: float | None = None,
    ) -> None:
        self.kube = kube
        self.jobsets = jobsets
        self.jobs = jobs
        self.services = services
        self.pods = pods
        self.ready_timeout = ready_timeout
        self.ready_waits: dict[str, dict[str, float]] = {}  # uid -> {rjob: first seen}
        self.ports: dict[str, dict[str, int]] = {}  # JobSet uid -> {"29500": local port}
        self.ssh: dict[str, str] = {}  # JobSet uid -> LOCAL_SSH annotation ("" when no sshd)
        self.allocator = PortAllocator()
        self.events: Recorder = recorder(kube, jc.CONTROLLER_NAME)

    # --- host ports -----------------------------------------------------------------------------
    def _existing(self, uid: str, annotation: str) -> str:
        """``annotation`` of the pod template of a Job the JobSet already has ("" if none)."""
        for job in self.jobs.by_owner_uid(uid):
            value = _pod_annotations(job).get(annotation)
            if value:
                return str(value)
        return ""

    def port_map(self, js: dict[str, Any]) -> dict[str, int]:
        """Container port -> host port of the JobSet's pods (found in its Jobs, or allocated)."""
        uid = js["metadata"]["uid"]
        if uid not in self.ports:
            existing = self._existing(uid, LOCAL_PORTS)
            if existing:
                found = {str(k): int(v) for k, v in json.loads(existing).items()}
                for port in found.values():
                    self.allocator.hold(port, uid)
                self.ports[uid] = found
            else:
                self.ports[uid] = {
                    str(port): self.allocator.allocate(uid) for port in core.declared_ports(js)
                }
        return self.ports[uid]

    def ssh_map(self, js: dict[str, Any]) -> str:
        """The :data:`LOCAL_SSH` annotation of the JobSet's pods: a host port per pod hostname
        when a replicated job runs sshd (trainer.local.executor.sandbox.ssh), else ``""``."""
        uid = js["metadata"]["uid"]
        if uid not in self.ssh:
            existing = self._existing(uid, LOCAL_SSH)
            found = ssh_hosts(js)
            if existing:
                for port in (json.loads(existing).get("hosts") or {}).values():
                    self.allocator.hold(int(port), uid)
                self.ssh[uid] = existing
            elif found is not None:
                port, hosts = found
                ports = {host: self.allocator.allocate(uid) for host in hosts}
                self.ssh[uid] = json.dumps({"port": port, "hosts": ports}, sort_keys=True)
            else:
                self.ssh[uid] = ""
        return self.ssh[uid]

    def pod_annotations(self, js: dict[str, Any]) -> dict[str, str]:
        annotations = {LOCAL_PORTS: json.dumps(self.port_map(js))}
        if ssh := self.ssh_map(js):
            annotations[LOCAL_SSH] = ssh
        return annotations

    def release_ports(self) -> None:
        """Give back the ports of JobSets that are gone or being deleted."""
        live = {
            js["metadata"]["uid"]
            for js in self.jobsets.list()
            if not js["metadata"].get("deletionTimestamp")
        }
        for uid in [u for u in self.ports if u not in live]:
            del self.ports[uid]
            self.ssh.pop(uid, None)
            self.allocator.release(uid)
        for uid in [u for u in self.ready_waits if u not in live]:
            del self.ready_waits[uid]

    # --- reconcile --------------------------------------------------------------------------
    async def reconcile(self, namespace: str, name: str) -> Result | None:
        js = self.jobsets.get(namespace, name)
        if js is None or js["metadata"].get("deletionTimestamp"):
            self.release_ports()
            return None
        if not core.is_managed(js):
            return None
        uid = js["metadata"]["uid"]
        waits = self.ready_waits.get(uid, {})
        timeout = self.ready_timeout
        # The pods are read only where a timed wait may have expired (to name them).
        may_expire = timeout is not None and (bool(waits) or timeout <= 0)
        seen = core.Observed(
            jobset=js,
            jobs=self.jobs.by_owner_uid(uid),
            stamp=now(),
            clock=time.monotonic(),
            service_exists=self.services.get(namespace, core.subdomain(js)) is not None,
            pods=self.pods.list(namespace) if may_expire and self.pods is not None else [],
            ready_timeout=timeout,
            ready_waits=waits,
        )
        plan = core.plan(seen)
        if plan.ready_waits:
            self.ready_waits[uid] = plan.ready_waits
        else:
            self.ready_waits.pop(uid, None)
        await self._apply(js, plan)
        if plan.requeue_after is not None:
            return Result(requeue_after=plan.requeue_after)
        return None

    async def _apply(self, js: dict[str, Any], plan: core.Plan) -> None:
        namespace, name = js["metadata"]["namespace"], js["metadata"]["name"]
        for job_name in plan.delete_jobs:
            await self.kube.delete(JOBS, namespace, job_name, FOREGROUND)
        if plan.service is not None:
            try:
                await self.kube.create(plan.service, gvr=SERVICES)
            except APIError as exc:
                if not exc.is_already_exists:
                    raise
        if plan.create_jobs:
            annotations = self.pod_annotations(js)
            for which in plan.create_jobs:
                try:
                    created = await self.kube.create(core.new_job(js, which, annotations), gvr=JOBS)
                except APIError as exc:
                    if not exc.is_already_exists:
                        raise
                else:
                    self.jobs.record_write(created, notify=True)
        for job_name, patch in plan.suspend_patches.items():
            patched = await self.kube.patch(JOBS, namespace, job_name, patch)
            self.jobs.record_write(patched, notify=True)
        for type_, reason, message in plan.events:
            self.events.emit(js, type_, reason, message)
        if plan.status is None:
            return
        if plan.status.get("restarts", 0) != (js.get("status") or {}).get("restarts", 0):
            log.info("JobSet %s restarting (attempt %d)", name, plan.status["restarts"])
        try:
            written = await self.kube.patch_status(
                JOBSETS, namespace, name, {"status": plan.status}
            )
        except APIError as exc:
            if not exc.is_not_found:
                raise
        else:
            self.jobsets.record_write(written, notify=True)
