"""v1's ``spec.runPolicy`` on a converted job: deadline, back-off, TTL, suspend, managedBy, and
``schedulingPolicy`` -> the runtime's ``podGroupPolicy``.

The same for every framework, so it is applied after the framework's builder, to its
:class:`~trainer.convert.v1job.Plan`. What has no v2 equivalent is a warning on the job saying
what the converted job does instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.api import constants as c
from trainer.convert.v1job import Obj, Plan, V1Job, require_int

MANAGED_BY_V1 = "kubeflow.org/training-operator"
VOLCANO = "volcano"


def apply_run_policy(
    job: V1Job, plan: Plan, trainjob_spec: Obj, jobset_spec: Obj, js_meta: Obj
) -> Obj:
    """Apply ``spec.runPolicy``; returns the runtime's podGroupPolicy (empty when none)."""
    rp = job.spec.get("runPolicy")
    policy: Mapping[str, Any] = rp if isinstance(rp, Mapping) else {}
    path = "spec.runPolicy"
    if job.spec.get("cleanPodPolicy") not in (None, "None"):  # MPIJob v1's spec-level field
        job.warn(
            "spec.cleanPodPolicy",
            f"{job.spec['cleanPodPolicy']!r} has no v2 equivalent; pods of the finished job stay "
            "until the TrainJob is deleted or the JobSet's ttlSecondsAfterFinished removes them",
        )
    clean = policy.get("cleanPodPolicy")
    if clean not in (None, "None"):
        job.warn(
            f"{path}.cleanPodPolicy",
            f"{clean!r} has no v2 equivalent; pods of the finished job stay until the TrainJob "
            "is deleted or the JobSet's ttlSecondsAfterFinished removes them",
        )
    deadline = policy.get("activeDeadlineSeconds")
    if deadline is not None:
        value = require_int(deadline, f"{path}.activeDeadlineSeconds")
        if value >= 1:
            trainjob_spec["activeDeadlineSeconds"] = value
        else:
            job.warn(f"{path}.activeDeadlineSeconds", f"{value} is not >= 1; no deadline is set")
    backoff = policy.get("backoffLimit")
    if backoff is not None:
        jobset_spec["failurePolicy"] = {"maxRestarts": require_int(backoff, f"{path}.backoffLimit")}
        for rjob in plan.jobs:
            rjob["template"]["spec"]["backoffLimit"] = 0
    ttl = policy.get("ttlSecondsAfterFinished")
    if ttl is not None:
        jobset_spec["ttlSecondsAfterFinished"] = require_int(ttl, f"{path}.ttlSecondsAfterFinished")
    if policy.get("suspend") is True:
        trainjob_spec["suspend"] = True
    managed = policy.get("managedBy")
    if managed == c.MANAGED_BY_MULTIKUEUE:
        trainjob_spec["managedBy"] = managed
    elif managed not in (None, MANAGED_BY_V1):
        job.warn(
            f"{path}.managedBy",
            f"{managed!r} is not a v2 manager; the TrainJob is managed by the Trainer controller",
        )
    return pod_group_policy(
        job, plan, policy.get("schedulingPolicy"), f"{path}.schedulingPolicy", js_meta
    )


def pod_specs(plan: Plan) -> list[Obj]:
    return [rjob["template"]["spec"]["template"].setdefault("spec", {}) for rjob in plan.jobs]


def pod_group_policy(job: V1Job, plan: Plan, sp: Any, path: str, js_meta: Obj) -> Obj:
    if not isinstance(sp, Mapping):
        return {}
    pods = pod_specs(plan)
    volcano = any(p.get("schedulerName") == VOLCANO for p in pods)
    out: Obj
    if volcano:
        out = {"volcano": {}}
        if sp.get("queue"):
            js_meta.setdefault("annotations", {})[c.ANNOTATION_VOLCANO_QUEUE] = sp["queue"]
        if sp.get("scheduleTimeoutSeconds") is not None:
            job.warn(
                f"{path}.scheduleTimeoutSeconds",
                "Volcano PodGroups have no schedule timeout; ignored",
            )
    else:
        timeout = sp.get("scheduleTimeoutSeconds")
        out = {"coscheduling": {}}
        if timeout is not None:
            out["coscheduling"]["scheduleTimeoutSeconds"] = require_int(
                timeout, f"{path}.scheduleTimeoutSeconds"
            )
        if sp.get("queue"):
            job.warn(
                f"{path}.queue",
                "coscheduling has no queues (no pod template uses schedulerName volcano); "
                "ignored. For Kueue, label the TrainJob with kueue.x-k8s.io/queue-name",
            )
    priority = sp.get("priorityClass")
    if priority:
        for pod in pods:
            pod.setdefault("priorityClassName", priority)
    total = sum(rjob["template"]["spec"]["parallelism"] for rjob in plan.jobs)
    min_available = sp.get("minAvailable")
    if min_available is not None and require_int(min_available, f"{path}.minAvailable") != total:
        job.warn(
            f"{path}.minAvailable",
            f"{min_available} differs from the job's {total} pods; the v2 PodGroup's minMember "
            f"is always every pod ({total})",
        )
    if sp.get("minResources"):
        job.warn(
            f"{path}.minResources",
            "ignored; the v2 PodGroup's minResources is the sum of the pods' requests",
        )
    return out
