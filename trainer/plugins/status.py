"""TrainJob status from its JobSet (the Status phase; docs/design.md, "One reconcile"): pure.

``Completed=True`` on the JobSet becomes ``Complete`` on the TrainJob and ``Failed=True``
stays ``Failed`` (reason, message and lastTransitionTime kept); ``replicatedJobsStatus``
becomes ``jobsStatus`` (restart counters are not copied). Everything else in the TrainJob's
status (its own conditions, ``trainerStatus``) is kept.
"""

from __future__ import annotations

from trainer.api import constants as c
from trainer.api.conditions import with_condition
from trainer.api.v1alpha1 import JobStatus, TrainJob, TrainJobStatus
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSet
from trainer.machinery.models.core import Condition

CONDITION_MAP = {
    jsc.COMPLETED: c.COND_COMPLETE,
    jsc.FAILED: c.COND_FAILED,
}


def status_from_jobset(trainjob: TrainJob, jobset: JobSet) -> TrainJobStatus:
    """The TrainJob's status with the JobSet's terminal conditions and job counts copied in."""
    status = (
        trainjob.status.model_copy(deep=True) if trainjob.status is not None else TrainJobStatus()
    )
    js_status = jobset.status
    if js_status is None:
        return status
    conditions = status.conditions
    for cond in js_status.conditions or []:
        target = CONDITION_MAP.get(cond.type)
        if target is None or cond.status != "True":
            continue
        copied = Condition(
            type=target,
            status=cond.status,
            reason=cond.reason,
            message=cond.message,
            last_transition_time=cond.last_transition_time,
        )
        conditions = with_condition(conditions, copied)
    if conditions is not None:
        status.conditions = conditions
    if js_status.replicated_jobs_status is not None:
        status.jobs_status = [
            JobStatus(
                name=r.name,
                ready=r.ready,
                succeeded=r.succeeded,
                failed=r.failed,
                active=r.active,
                suspended=r.suspended,
            )
            for r in js_status.replicated_jobs_status
        ]
    return status


class JobSetStatusPlugin:
    """The Status hook: TrainJob status from the JobSet."""

    name = "JobSetStatus"

    def status(self, trainjob: TrainJob, jobset: JobSet) -> TrainJobStatus | None:
        return status_from_jobset(trainjob, jobset)
