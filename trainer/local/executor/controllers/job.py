"""The batch/v1 Job controller of the local executor: Indexed completion, parallelism and
completions, backoffLimit, suspend, and Job status as the Kubernetes Job controller writes it.
"""

from __future__ import annotations

import copy
import logging
import secrets
from typing import Any

from trainer.kube.events import NORMAL, WARNING
from trainer.kube.informer import Informer
from trainer.kube.resources import JOBS, PODS
from trainer.kube.rest import APIError, Kube
from trainer.local.executor.api import create_pods, recorder
from trainer.local.executor.controllers.policy.batch import (
    CONTROLLER_UID,
    INDEX,
    JOB_NAME,
    job_finished,
    pod_index,
    pod_phase,
    pod_ready,
)
from trainer.machinery.owners import controller_reference
from trainer.machinery.times import now

log = logging.getLogger(__name__)

SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"


class JobController:
    """Reconciles one Job at a time (the executor's work queue calls :meth:`reconcile`); an
    error it raises is retried with back-off."""

    def __init__(self, kube: Kube, jobs: Informer, pods: Informer) -> None:
        self.events = recorder(kube, "job-controller")
        self.kube = kube
        self.jobs = jobs
        self.pods = pods

    def new_pod(self, job: dict[str, Any], index: int) -> dict[str, Any]:
        meta = job["metadata"]
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        pod_meta = template.get("metadata") or {}
        labels = dict(pod_meta.get("labels") or {})
        annotations = dict(pod_meta.get("annotations") or {})
        labels.update({JOB_NAME: meta["name"], CONTROLLER_UID: meta["uid"], INDEX: str(index)})
        annotations[INDEX] = str(index)
        spec = template.get("spec") or {}
        # The Job controller's rule (batch/v1, not JobSet's): an Indexed Job's pod is
        # ``<job>-<index>`` as hostname, and that plus a random suffix as name.
        hostname = spec["hostname"] = f"{meta['name']}-{index}"
        # The Job controller gives every container of an Indexed Job its index.
        index_env = {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}},
        }
        for group in ("initContainers", "containers"):
            for ctr in spec.get(group) or []:
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in ctr.get("env") or []):
                    ctr["env"] = [*(ctr.get("env") or []), index_env]
        suffix = "".join(secrets.choice(SUFFIX_CHARS) for _ in range(5))
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{hostname}-{suffix}",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    controller_reference(
                        meta["name"], meta["uid"], api_version="batch/v1", kind="Job"
                    )
                ],
            },
            "spec": spec,
        }

    async def reconcile(self, namespace: str, name: str) -> None:
        job = self.jobs.get(namespace, name)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            return
        if job_finished(job):
            # A finished Job's status is final, as the Job controller leaves it: its counts
            # must not drop when the pods it deleted (or anyone else deletes) are gone.
            for pod in self.pods.by_owner_uid(job["metadata"]["uid"]):
                if pod_phase(pod) not in ("Succeeded", "Failed") and not (
                    (pod.get("metadata") or {}).get("deletionTimestamp")
                ):
                    await self._delete_pod(job, pod)
            return
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        pods = self.pods.by_owner_uid(job["metadata"]["uid"])
        completions = int(spec.get("completions") or spec.get("parallelism") or 1)
        parallelism = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
        backoff_limit = int(spec.get("backoffLimit", 6))
        suspended = bool(spec.get("suspend"))
        # Pods being deleted are not active (the kubelet is stopping them).
        live = [
            p
            for p in pods
            if pod_phase(p) not in ("Succeeded", "Failed")
            and not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        succeeded_idx = sorted({pod_index(p) for p in pods if pod_phase(p) == "Succeeded"})
        failed = sum(1 for p in pods if pod_phase(p) == "Failed")

        if suspended:
            for pod in live:
                await self._delete_pod(job, pod)
            live = []
        elif past_backoff_limit(job, pods, failed, backoff_limit):
            for pod in live:
                await self._delete_pod(job, pod)
            # The Job controller counts the active pods it deletes on failure as failed: with
            # restartPolicy OnFailure those are the pods whose restarts reached the limit.
            failed += len(live)
            live = []
            self.events.emit(
                job, WARNING, "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            )
            status["conditions"] = [
                *(status.get("conditions") or []),
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": now(),
                },
            ]
        elif len(succeeded_idx) >= completions:
            status["conditions"] = [
                *(status.get("conditions") or []),
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "",
                    "message": "",
                    "lastTransitionTime": now(),
                },
            ]
            status["completionTime"] = now()
            self.events.emit(job, NORMAL, "Completed", "Job completed")
        else:
            running_idx = {pod_index(p) for p in live}
            # Failed pods of an index are replaced (restartPolicy Never); the kubelet restarts
            # containers in place for OnFailure / Always. The missing pods are created at once,
            # as the Job controller does (it sends its creates in parallel batches).
            missing = [
                index
                for index in range(completions)
                if index not in running_idx and index not in succeeded_idx
            ][: max(parallelism - len(running_idx), 0)]
            live += await create_pods(
                self.kube, self.pods, self.events, job, [self.new_pod(job, i) for i in missing]
            )

        status.update(
            {
                "active": len(live),
                "ready": sum(1 for p in live if pod_ready(p)),
                "succeeded": len(succeeded_idx),
                "failed": failed,
            }
        )
        if succeeded_idx:
            status["completedIndexes"] = ",".join(str(i) for i in succeeded_idx)
        status.setdefault("startTime", now())
        if suspended:
            status["active"] = 0
        if status != (job.get("status") or {}):
            try:
                written = await self.kube.patch_status(JOBS, namespace, name, {"status": status})
            except APIError as exc:
                if not exc.is_not_found:
                    raise
            else:
                self.jobs.record_write(written, notify=True)

    async def _delete_pod(self, job: dict[str, Any], pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        await self.kube.delete(PODS, meta["namespace"], meta["name"])
        self.events.emit(job, NORMAL, "SuccessfulDelete", f"Deleted pod: {meta['name']}")


def past_backoff_limit(
    job: dict[str, Any], pods: list[dict[str, Any]], failed: int, backoff_limit: int
) -> bool:
    """Whether the Job has failed for its ``backoffLimit``, as the Job controller decides it
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-backoff-failure-policy):
    more failed pods than the limit; or, with ``restartPolicy: OnFailure``, the container
    restarts (init containers too) of its pods still Pending or Running reaching the limit
    (any restart when the limit is 0)."""
    if failed > backoff_limit:
        return True
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    if template.get("restartPolicy") != "OnFailure":
        return False
    restarts = sum(
        int(cs.get("restartCount") or 0)
        for p in pods
        if pod_phase(p) in ("Pending", "Running")
        for group in ("initContainerStatuses", "containerStatuses")
        for cs in (p.get("status") or {}).get(group) or []
    )
    return restarts > 0 if backoff_limit == 0 else restarts >= backoff_limit
