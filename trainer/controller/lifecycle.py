"""A TrainJob's lifecycle clocks, pure (docs/lifecycle.md): the active deadline, the start and
completion times, and the time to live after it finished.

The deadline and the TTL come from the TrainJob, else from its runtime's ``runPolicy`` (beyond
upstream v2.3, in the shape upstream plans: https://github.com/kubeflow/trainer/issues/4052).
Every value here is recomputed from the objects on each reconcile, never kept in memory, so a
controller restart or a new leader forgets no deadline and no TTL: the reconcile that follows
the first list finds what expired meanwhile and requeues the rest.

* ``status.startTime``: a Job's ``startTime`` (Kubernetes' Job controller): when the TrainJob
  was created unsuspended or last resumed; unset until it first runs unsuspended; it stays as
  it was while suspended and after it finished. The active deadline counts from it.
* ``status.completionTime``: when the TrainJob finished, Complete or Failed (unlike a Job's,
  which only a success sets: a TTL has to count from a failure too): its terminal condition's
  ``lastTransitionTime``. The TTL counts from it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from trainer.api import constants as c
from trainer.api.conditions import find_condition
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.machinery.models.core import Condition
from trainer.machinery.times import format_time, parse_time

Runtime = TrainingRuntime | ClusterTrainingRuntime


@dataclass(frozen=True)
class RunPolicyValues:
    """The deadline and TTL in force for one TrainJob (None: none)."""

    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None


def run_policy(trainjob: TrainJob, runtime: Runtime | None) -> RunPolicyValues:
    """The TrainJob's own ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished``, each
    falling back to its runtime's ``runPolicy`` (the runtime as snapshotted for this TrainJob,
    so a later change of the runtime does not move a running TrainJob's clocks)."""
    spec = trainjob.spec
    policy = runtime.spec.run_policy if runtime is not None and runtime.spec else None
    deadline = spec.active_deadline_seconds if spec is not None else None
    ttl = spec.ttl_seconds_after_finished if spec is not None else None
    if deadline is None and policy is not None:
        deadline = policy.active_deadline_seconds
    if ttl is None and policy is not None:
        ttl = policy.ttl_seconds_after_finished
    return RunPolicyValues(deadline, ttl)


def finished_condition(conds: list[Condition] | None) -> Condition | None:
    """The true Complete or Failed condition (Failed first: both cannot be, but be sure)."""
    for type_ in (c.COND_FAILED, c.COND_COMPLETE):
        cond = find_condition(conds, type_)
        if cond is not None and cond.status == "True":
            return cond
    return None


def is_finished(trainjob: TrainJob) -> bool:
    return finished_condition(trainjob.status.conditions if trainjob.status else None) is not None


def clock_start(conds: list[Condition] | None, created: str | None) -> dt.datetime | None:
    """When the run started: the last resume (``Suspended`` turned False), else creation."""
    resumed = find_condition(conds, c.COND_SUSPENDED)
    if resumed is not None and resumed.status == "False":
        return parse_time(resumed.last_transition_time)
    return parse_time(created)


def deadline_remaining(trainjob: TrainJob, deadline: int | None, now: dt.datetime) -> float | None:
    """Seconds until the active deadline passes (<= 0: passed); None when it does not apply
    (no deadline, finished or suspended)."""
    spec = trainjob.spec
    if spec is None or not deadline or spec.suspend or is_finished(trainjob):
        return None
    conds = trainjob.status.conditions if trainjob.status else None
    start = clock_start(conds, trainjob.metadata.creation_timestamp if trainjob.metadata else None)
    if start is None:
        return None
    return (start - now).total_seconds() + deadline


def times(
    conds: list[Condition] | None,
    created: str | None,
    suspended: bool,
    start_time: str | None,
    completion_time: str | None,
) -> tuple[str | None, str | None]:
    """``(startTime, completionTime)`` for a status with conditions ``conds``, given the
    values it had. Pure: the same objects give the same times on every replica."""
    finished = finished_condition(conds)
    if finished is not None:
        completion_time = completion_time or finished.last_transition_time
        if start_time is None and not suspended:
            start = clock_start(conds, created)
            start_time = format_time(start) if start is not None else None
        return start_time, completion_time
    if not suspended:
        start = clock_start(conds, created)
        if start is not None:
            start_time = format_time(start)
    return start_time, None


def ttl_remaining(trainjob: TrainJob, ttl: int | None, now: dt.datetime) -> float | None:
    """Seconds until a finished TrainJob's TTL expires (<= 0: delete it now); None when no
    TTL applies (none set, or not finished)."""
    if ttl is None or trainjob.status is None:
        return None
    finished = finished_condition(trainjob.status.conditions)
    if finished is None:
        return None
    at = parse_time(trainjob.status.completion_time) or parse_time(finished.last_transition_time)
    if at is None:  # a condition without a time: count from now
        return float(ttl)
    return (at - now).total_seconds() + ttl
