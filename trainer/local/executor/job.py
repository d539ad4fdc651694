"""The batch/v1 Job controller of the local executor: Indexed completion, parallelism and
completions, backoffLimit, suspend, and Job status as the Kubernetes Job controller writes it.
"""

from __future__ import annotations

import copy
import logging
import secrets
from typing import Any

from trainer.local.executor.cache import Cache
from trainer.local.executor.client import ClientError, LocalClient
from trainer.local.executor.events import NORMAL, WARNING, Recorder
from trainer.machinery.times import now

log = logging.getLogger(__name__)

INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def pod_index(pod: dict[str, Any]) -> int:
    return int(((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX, "0"))


def pod_phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_ready(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def job_condition(job: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def job_finished(job: dict[str, Any]) -> bool:
    return job_condition(job, "Complete") or job_condition(job, "Failed")


class JobController:
    def __init__(self, client: LocalClient, jobs: Cache, pods: Cache) -> None:
        self.events = Recorder(client, "job-controller")
        self.client = client
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
        spec["hostname"] = f"{meta['name']}-{index}"
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
                "name": f"{meta['name']}-{index}-{suffix}",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }

    async def reconcile(self, namespace: str, name: str) -> None:
        job = self.jobs.get(namespace, name)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            return
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        pods = self.pods.owned_by(job["metadata"]["uid"])
        completions = int(spec.get("completions") or spec.get("parallelism") or 1)
        parallelism = int(spec["parallelism"]) if spec.get("parallelism") is not None else 1
        backoff_limit = int(spec.get("backoffLimit", 6))
        suspended = bool(spec.get("suspend"))
        live = [p for p in pods if pod_phase(p) not in ("Succeeded", "Failed")]
        succeeded_idx = sorted({pod_index(p) for p in pods if pod_phase(p) == "Succeeded"})
        # Like the Job controller: failed pods, plus container restarts of pods restarted in
        # place (restartPolicy OnFailure), count toward backoffLimit.
        failed = sum(1 for p in pods if pod_phase(p) == "Failed")
        restarts = sum(
            int(cs.get("restartCount") or 0)
            for p in pods
            for cs in (p.get("status") or {}).get("containerStatuses") or []
        )
        finished = job_finished(job)

        if suspended or finished:
            for pod in live:
                await self._delete_pod(job, pod)
            live = []
        elif failed + restarts > backoff_limit:
            for pod in live:
                await self._delete_pod(job, pod)
            live = []
            await self.events.record(
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
            finished = True
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
            finished = True
            await self.events.record(job, NORMAL, "Completed", "Job completed")
        else:
            running_idx = {pod_index(p) for p in live}
            # Failed pods of an index are replaced (restartPolicy Never); the kubelet restarts
            # containers in place for OnFailure / Always.
            for index in range(completions):
                if len(running_idx) >= parallelism:
                    break
                if index in running_idx or index in succeeded_idx:
                    continue
                try:
                    created = await self.client.create(self.new_pod(job, index), "pods")
                except ClientError as exc:
                    log.warning("creating a pod of Job %s/%s failed: %s", namespace, name, exc)
                    break
                live.append(created)
                running_idx.add(index)
                await self.events.record(
                    job, NORMAL, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"
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
        if not finished and suspended:
            status["active"] = 0
        if status != (job.get("status") or {}):
            try:
                await self.client.patch(
                    "batch/v1", "jobs", namespace, name, {"status": status}, sub="status"
                )
            except ClientError as exc:
                if exc.status != 404:
                    raise

    async def _delete_pod(self, job: dict[str, Any], pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        await self.client.delete("v1", "pods", meta["namespace"], meta["name"])
        await self.events.record(job, NORMAL, "SuccessfulDelete", f"Deleted pod: {meta['name']}")
