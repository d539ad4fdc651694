"""The JobSet controller of the local executor: Jobs per replicated job and replica with
JobSet's names, labels and annotations, the headless Service, dependsOn, success and failure
policies with restarts, suspend and resume, TTL, and the status JobSet writes (conditions and
replicatedJobsStatus counted over Jobs). Upstream's:
https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/controllers/jobset_controller.go

Beyond upstream, local runs only: with ``ready_timeout`` (``trainer run --ready-timeout``), a
replicated job that has waited that long for a ``dependsOn`` with status Ready on a job whose
pods run sshd (an MPI launcher waiting for its nodes) fails the JobSet with reason
:data:`REASON_READY_TIMEOUT` and a message naming each pod not Ready and the probe holding it
(:mod:`~trainer.local.executor.waiting`). The wait is timed from when this controller first saw
it; other waits (a data cache loading, an initializer to Complete) are never timed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from trainer.local.executor.cache import Cache
from trainer.local.executor.client import ClientError, LocalClient
from trainer.local.executor.events import NORMAL, WARNING, Recorder
from trainer.local.executor.job import job_condition, job_finished
from trainer.local.executor.podfields import LOCAL_PORTS
from trainer.local.executor.ports import PortAllocator
from trainer.local.executor.ssh import LOCAL_SSH, is_sshd, ssh_hosts
from trainer.local.executor.waiting import not_ready
from trainer.machinery.times import now

log = logging.getLogger(__name__)

P = "jobset.sigs.k8s.io/"
JOBSET_NAME = P + "jobset-name"
MANAGED_BY_JOBSET = "jobset.sigs.k8s.io/jobset-controller"
TRAINER_PORT = 29500
FIELD_MANAGER = "jobset-controller"
REASON_READY_TIMEOUT = "DependsOnReadyTimeout"


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def set_condition(
    status: dict[str, Any], type_: str, value: bool, reason: str, message: str
) -> None:
    """JobSet's rule: a condition is appended only when True; False only updates an entry."""
    conds = list(status.get("conditions") or [])
    for i, cond in enumerate(conds):
        if cond.get("type") == type_:
            if cond.get("status") != ("True" if value else "False"):
                conds[i] = {
                    **cond,
                    "status": "True" if value else "False",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now(),
                }
            status["conditions"] = conds
            return
    if value:
        conds.append(
            {
                "type": type_,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": now(),
            }
        )
        status["conditions"] = conds


def declared_ports(js: dict[str, Any]) -> list[int]:
    """The ports a JobSet's pods listen on, each mapped to a host port of its own: 29500
    (torchrun's, which the controller may add later) and every containerPort its pod templates
    declare (the data cache's 50051, say), so two JobSets never collide on one."""
    ports = {TRAINER_PORT}
    for rjob in (js.get("spec") or {}).get("replicatedJobs") or []:
        pod_spec = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
            "spec"
        ) or {}
        for ctr in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
            for port in ctr.get("ports") or []:
                number = port.get("containerPort")
                if isinstance(number, int) and 0 < number < 65536:
                    ports.add(number)
    return sorted(ports)


class JobSetController:
    def __init__(
        self,
        client: LocalClient,
        jobsets: Cache,
        jobs: Cache,
        services: Cache,
        *,
        pods: Cache | None = None,
        ready_timeout: float | None = None,
        requeue: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.pods = pods
        self.ready_timeout = ready_timeout
        self.requeue = requeue
        self._ready_waits: dict[tuple[str, str], float] = {}  # (uid, rjob) -> first seen
        self.client = client
        self.jobsets = jobsets
        self.jobs = jobs
        self.services = services
        self.ports: dict[str, dict[str, int]] = {}  # JobSet uid -> {"29500": local port}
        self.ssh: dict[str, str] = {}  # JobSet uid -> LOCAL_SSH annotation ("" when no sshd)
        self.allocator = PortAllocator()
        self.events = Recorder(client, "jobset-controller")

    # --- naming and labels --------------------------------------------------------------------
    def job_labels(
        self, js: dict[str, Any], rjob: dict[str, Any], index: int, global_index: int
    ) -> dict[str, str]:
        meta = js["metadata"]
        status = js.get("status") or {}
        rjobs = (js.get("spec") or {}).get("replicatedJobs") or []
        group = rjob.get("groupName") or "default"
        group_jobs = [r for r in rjobs if (r.get("groupName") or "default") == group]
        job_name = f"{meta['name']}-{rjob['name']}-{index}"
        group_index = (
            sum(r.get("replicas", 1) for r in group_jobs[: group_jobs.index(rjob)]) + index
        )
        return {
            JOBSET_NAME: meta["name"],
            P + "jobset-uid": meta["uid"],
            P + "replicatedjob-name": rjob["name"],
            P + "restart-attempt": str(status.get("restarts", 0)),
            P + "replicatedjob-replicas": str(rjob.get("replicas", 1)),
            P + "global-replicas": str(sum(r.get("replicas", 1) for r in rjobs)),
            P + "job-index": str(index),
            P + "job-global-index": str(global_index),
            P + "job-key": hashlib.sha1(f"{meta['namespace']}/{job_name}".encode()).hexdigest(),
            P + "group-name": group,
            P + "group-replicas": str(sum(r.get("replicas", 1) for r in group_jobs)),
            P + "job-group-index": str(group_index),
        }

    def port_map(self, js: dict[str, Any]) -> dict[str, int]:
        uid = js["metadata"]["uid"]
        if uid not in self.ports:
            existing = next(
                (
                    json.loads(a[LOCAL_PORTS])
                    for j in self.jobs.owned_by(uid)
                    if (
                        a := (
                            (j["spec"]["template"].get("metadata") or {}).get("annotations") or {}
                        )
                    ).get(LOCAL_PORTS)
                ),
                None,
            )
            if existing:
                for port in existing.values():
                    self.allocator.hold(int(port), uid)
            self.ports[uid] = existing or {
                str(port): self.allocator.allocate(uid) for port in declared_ports(js)
            }
        return self.ports[uid]

    def ssh_map(self, js: dict[str, Any]) -> str:
        """The :data:`LOCAL_SSH` annotation of the JobSet's pods: a host port per pod hostname
        when a replicated job runs sshd (trainer.local.executor.ssh), else ``""``."""
        uid = js["metadata"]["uid"]
        if uid not in self.ssh:
            existing = next(
                (
                    str(a[LOCAL_SSH])
                    for j in self.jobs.owned_by(uid)
                    if (
                        a := (
                            (j["spec"]["template"].get("metadata") or {}).get("annotations") or {}
                        )
                    ).get(LOCAL_SSH)
                ),
                "",
            )
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

    def release_ports(self) -> None:
        """Give back the ports of JobSets that are gone or being deleted."""
        live = {
            js["metadata"]["uid"]
            for js in self.jobsets.all()
            if not js["metadata"].get("deletionTimestamp")
        }
        for uid in [u for u in self.ports if u not in live]:
            del self.ports[uid]
            self.ssh.pop(uid, None)
            self.allocator.release(uid)

    def new_job(
        self, js: dict[str, Any], rjob: dict[str, Any], index: int, global_index: int
    ) -> dict[str, Any]:
        meta = js["metadata"]
        spec = js.get("spec") or {}
        template = copy.deepcopy(rjob.get("template") or {})
        labels = self.job_labels(js, rjob, index, global_index)
        job_meta = template.get("metadata") or {}
        job_spec = template.get("spec") or {}
        pod = job_spec.setdefault("template", {})
        pod_meta = pod.setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        pod_meta["annotations"] = {
            **(pod_meta.get("annotations") or {}),
            **labels,
            LOCAL_PORTS: json.dumps(self.port_map(js)),
        }
        if ssh := self.ssh_map(js):
            pod_meta["annotations"][LOCAL_SSH] = ssh
        pod_spec = pod.setdefault("spec", {})
        network = spec.get("network") or {}
        if network.get("enableDNSHostnames", True):
            pod_spec["subdomain"] = network.get("subdomain") or meta["name"]
        pod_spec.setdefault("restartPolicy", "OnFailure")
        job_spec.setdefault("completionMode", "Indexed")
        job_spec["suspend"] = bool(spec.get("suspend"))
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{meta['name']}-{rjob['name']}-{index}",
                "namespace": meta["namespace"],
                "labels": {**(job_meta.get("labels") or {}), **labels},
                "annotations": {**(job_meta.get("annotations") or {}), **labels},
                "ownerReferences": [
                    {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": job_spec,
        }

    # --- reconcile -------------------------------------------------------------------------
    async def reconcile(self, namespace: str, name: str) -> None:
        js = self.jobsets.get(namespace, name)
        if js is None or js["metadata"].get("deletionTimestamp"):
            self.release_ports()
            return
        spec = js.get("spec") or {}
        if spec.get("managedBy") not in (None, "", MANAGED_BY_JOBSET):
            return
        status = copy.deepcopy(js.get("status") or {})
        status.setdefault("restarts", 0)
        uid = js["metadata"]["uid"]
        owned = {j["metadata"]["name"]: j for j in self.jobs.owned_by(uid)}
        attempt = str(status.get("restarts", 0))
        current = {
            n: j
            for n, j in owned.items()
            if (j["metadata"].get("labels") or {}).get(P + "restart-attempt") == attempt
        }
        for stale_name in owned:
            if stale_name not in current:
                await self.client.delete(
                    "batch/v1", "jobs", namespace, stale_name, propagation="Foreground"
                )
        suspended = bool(spec.get("suspend"))
        terminal = status.get("terminalState")
        rjobs = spec.get("replicatedJobs") or []

        if not terminal:
            # Policies first: a JobSet that fails or completes now creates no more Jobs.
            await self._policies(js, status, rjobs, current)
            terminal = status.get("terminalState")
        if not terminal and not suspended:
            expired = self._ready_wait_expired(js, rjobs, current)
            if expired:
                await self._finish(js, status, "Failed", REASON_READY_TIMEOUT, expired)
                terminal = status.get("terminalState")
        if not terminal and status.get("restarts", 0) == (js.get("status") or {}).get(
            "restarts", 0
        ):
            await self._ensure_service(js)
            await self._ensure_jobs(js, rjobs, current, suspended)
        self._count(status, rjobs, current, name)
        was = condition(js.get("status") or {}, "Suspended")
        was_suspended = was is not None and was.get("status") == "True"
        if suspended:
            set_condition(status, "Suspended", True, "SuspendedJobs", "jobset is suspended")
            if not was_suspended:
                await self.events.record(js, NORMAL, "SuspendedJobs", "jobset is suspended")
        elif condition(status, "Suspended"):
            set_condition(status, "Suspended", False, "ResumeJobs", "jobset is resumed")
            if was_suspended:
                await self.events.record(js, NORMAL, "ResumeJobs", "jobset is resumed")
        if status != (js.get("status") or {}):
            try:
                await self.client.patch(
                    "jobset.x-k8s.io/v1alpha2",
                    "jobsets",
                    namespace,
                    name,
                    {"status": status},
                    sub="status",
                )
            except ClientError as exc:
                if exc.status != 404:
                    raise

    async def _ensure_service(self, js: dict[str, Any]) -> None:
        meta = js["metadata"]
        network = (js.get("spec") or {}).get("network") or {}
        subdomain = network.get("subdomain") or meta["name"]
        if self.services.get(meta["namespace"], subdomain) is not None:
            return
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": subdomain,
                "namespace": meta["namespace"],
                "labels": {JOBSET_NAME: meta["name"]},
                "ownerReferences": [
                    {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "clusterIP": "None",
                "selector": {JOBSET_NAME: meta["name"]},
                "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
            },
        }
        try:
            await self.client.create(service, "services")
        except ClientError as exc:
            if exc.status != 409:
                raise

    def _dependencies_met(
        self,
        rjob: dict[str, Any],
        rjobs: list[dict[str, Any]],
        current: dict[str, dict[str, Any]],
        name: str,
    ) -> bool:
        for dep in rjob.get("dependsOn") or []:
            other = next((r for r in rjobs if r["name"] == dep["name"]), None)
            if other is None:
                return False
            jobs = [
                current.get(f"{name}-{other['name']}-{i}") for i in range(other.get("replicas", 1))
            ]
            if any(j is None for j in jobs):
                return False
            if dep.get("status") == "Complete":
                if not all(job_condition(j, "Complete") for j in jobs if j):
                    return False
            elif not all(self._job_ready(j) or job_finished(j) for j in jobs if j):
                return False
        return True

    def _ready_wait_expired(
        self, js: dict[str, Any], rjobs: list[dict[str, Any]], current: dict[str, dict[str, Any]]
    ) -> str:
        """The failure message when a replicated job waited longer than ``ready_timeout`` for a
        dependsOn on Ready, else ``""`` (and a requeue for when it would expire)."""
        if self.ready_timeout is None:
            return ""
        uid, name = js["metadata"]["uid"], js["metadata"]["name"]
        for rjob in rjobs:
            deps = [
                d
                for d in rjob.get("dependsOn") or []
                if d.get("status") != "Complete" and self._runs_sshd(rjobs, str(d.get("name")))
            ]
            key = (uid, str(rjob["name"]))
            if not deps or self._dependencies_met(rjob, rjobs, current, name):
                self._ready_waits.pop(key, None)
                continue
            started = self._ready_waits.setdefault(key, time.monotonic())
            left = started + self.ready_timeout - time.monotonic()
            if left > 0:
                if self.requeue is not None:
                    self.requeue(js["metadata"]["namespace"], name, left + 0.05)
                continue
            waits = ", ".join(str(d.get("name")) for d in deps)
            pods = not_ready(self.pods.all(js["metadata"]["namespace"]), name) if self.pods else []
            detail = "; ".join(pods) if pods else "no pod of it is Ready yet"
            return (
                f"replicated job {rjob['name']} waited more than {self.ready_timeout:g}s for "
                f"{waits} to be Ready (trainer run --ready-timeout): {detail}"
            )
        return ""

    @staticmethod
    def _runs_sshd(rjobs: list[dict[str, Any]], name: str) -> bool:
        """Whether replicated job ``name`` runs sshd (an MPI node)."""
        rjob = next((r for r in rjobs if r.get("name") == name), {})
        pod_spec = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
            "spec"
        ) or {}
        return any(is_sshd(c) for c in pod_spec.get("containers") or [])

    @staticmethod
    def _job_ready(job: dict[str, Any]) -> bool:
        spec = job.get("spec") or {}
        status = job.get("status") or {}
        need = min(
            int(spec.get("parallelism") or 1),
            int(spec.get("completions") or spec.get("parallelism") or 1),
        )
        return int(status.get("ready") or 0) + int(status.get("succeeded") or 0) >= need

    async def _ensure_jobs(
        self,
        js: dict[str, Any],
        rjobs: list[dict[str, Any]],
        current: dict[str, dict[str, Any]],
        suspended: bool,
    ) -> None:
        name = js["metadata"]["name"]
        global_index = 0
        for rjob in rjobs:
            replicas = rjob.get("replicas", 1)
            startable = suspended or self._dependencies_met(rjob, rjobs, current, name)
            for index in range(replicas):
                job_name = f"{name}-{rjob['name']}-{index}"
                job = current.get(job_name)
                if job is None and startable:
                    try:
                        created = await self.client.create(
                            self.new_job(js, rjob, index, global_index), "jobs"
                        )
                        current[job_name] = created
                    except ClientError as exc:
                        if exc.status != 409:
                            log.warning("creating Job %s failed: %s", job_name, exc)
                elif job is not None and not job_finished(job):
                    await self._sync_suspend(js, rjob, job, suspended)
                global_index += 1

    async def _sync_suspend(
        self, js: dict[str, Any], rjob: dict[str, Any], job: dict[str, Any], suspended: bool
    ) -> None:
        if bool((job.get("spec") or {}).get("suspend")) == suspended:
            return
        patch: dict[str, Any] = {"spec": {"suspend": suspended}}
        if not suspended:
            # Resume merges the pod template's mutable fields into the Job, as JobSet does.
            tmpl = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
            pod_meta = tmpl.get("metadata") or {}
            pod_spec = tmpl.get("spec") or {}
            patch["spec"]["template"] = {
                "metadata": {k: pod_meta[k] for k in ("labels", "annotations") if k in pod_meta},
                "spec": {
                    k: pod_spec[k]
                    for k in ("nodeSelector", "tolerations", "schedulingGates")
                    if k in pod_spec
                },
            }
        meta = job["metadata"]
        await self.client.patch("batch/v1", "jobs", meta["namespace"], meta["name"], patch)

    def _count(
        self,
        status: dict[str, Any],
        rjobs: list[dict[str, Any]],
        current: dict[str, dict[str, Any]],
        name: str,
    ) -> None:
        counts = []
        for rjob in rjobs:
            jobs = [
                j
                for i in range(rjob.get("replicas", 1))
                if (j := current.get(f"{name}-{rjob['name']}-{i}"))
            ]
            unfinished = [j for j in jobs if not job_finished(j)]
            counts.append(
                {
                    "name": rjob["name"],
                    "ready": sum(1 for j in unfinished if self._job_ready(j)),
                    "succeeded": sum(1 for j in jobs if job_condition(j, "Complete")),
                    "failed": sum(1 for j in jobs if job_condition(j, "Failed")),
                    "active": sum(
                        1 for j in unfinished if int((j.get("status") or {}).get("active") or 0) > 0
                    ),
                    "suspended": sum(1 for j in unfinished if (j.get("spec") or {}).get("suspend")),
                }
            )
        # JobSet writes the list sorted by name, descending.
        status["replicatedJobsStatus"] = sorted(counts, key=lambda c: c["name"], reverse=True)

    async def _policies(
        self,
        js: dict[str, Any],
        status: dict[str, Any],
        rjobs: list[dict[str, Any]],
        current: dict[str, dict[str, Any]],
    ) -> None:
        spec = js.get("spec") or {}
        name = js["metadata"]["name"]
        failed = [j for j in current.values() if job_condition(j, "Failed")]
        if failed:
            first = sorted(failed, key=lambda j: j["metadata"]["name"])[0]["metadata"]["name"]
            policy = spec.get("failurePolicy")
            if policy is None:
                await self._finish(
                    js,
                    status,
                    "Failed",
                    "FailedJobs",
                    f"jobset failed due to one or more job failures (first failed job: {first})",
                )
                return
            max_restarts = int(policy.get("maxRestarts") or 0)
            if (
                int(status.get("restartsCountTowardsMax", status.get("restarts", 0)))
                >= max_restarts
            ):
                await self._finish(
                    js,
                    status,
                    "Failed",
                    "ReachedMaxRestarts",
                    "jobset failed due to reaching max number of restarts "
                    f"(first failed job: {first})",
                )
                return
            status["restarts"] = int(status.get("restarts", 0)) + 1
            status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax", 0)) + 1
            log.info("JobSet %s restarting (attempt %d)", name, status["restarts"])
            return
        success = spec.get("successPolicy") or {"operator": "All"}
        targets = success.get("targetReplicatedJobs") or [r["name"] for r in rjobs]
        target_jobs = [
            current.get(f"{name}-{r['name']}-{i}")
            for r in rjobs
            if r["name"] in targets
            for i in range(r.get("replicas", 1))
        ]
        done = [j is not None and job_condition(j, "Complete") for j in target_jobs]
        if target_jobs and (all(done) if success.get("operator", "All") == "All" else any(done)):
            await self._finish(
                js, status, "Completed", "AllJobsCompleted", "jobset completed successfully"
            )

    async def _finish(
        self, js: dict[str, Any], status: dict[str, Any], type_: str, reason: str, message: str
    ) -> None:
        set_condition(status, type_, True, reason, message)
        status["terminalState"] = type_
        await self.events.record(js, NORMAL if type_ == "Completed" else WARNING, reason, message)
        for job in self.jobs.owned_by(js["metadata"]["uid"]):
            if not job_finished(job):
                meta = job["metadata"]
                await self.client.delete(
                    "batch/v1", "jobs", meta["namespace"], meta["name"], propagation="Foreground"
                )
