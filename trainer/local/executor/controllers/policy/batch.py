"""Reading batch/v1 Jobs and their pods as the executor's Job and JobSet controllers do: the
labels and annotation the Job controller sets on an Indexed Job's pods, a pod's index, phase
and readiness, and a Job's conditions. Pure: no client, no I/O."""

from __future__ import annotations

from typing import Any

INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
COMPLETE = "Complete"
FAILED = "Failed"


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
    """Whether the Job has condition ``type_`` with status True."""
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def job_finished(job: dict[str, Any]) -> bool:
    return job_condition(job, COMPLETE) or job_condition(job, FAILED)


def job_ready(job: dict[str, Any]) -> bool:
    """JobSet's rule for a Ready Job: ready plus succeeded pods reach
    ``min(parallelism, completions)``."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    need = min(
        int(spec.get("parallelism") or 1),
        int(spec.get("completions") or spec.get("parallelism") or 1),
    )
    return int(status.get("ready") or 0) + int(status.get("succeeded") or 0) >= need
