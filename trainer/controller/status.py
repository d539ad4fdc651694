"""The TrainJob status the controller wants, derived purely from the TrainJob, its JobSet and
the current time (docs/design.md, "One reconcile"), plus what this project adds beyond upstream:

* ``BuildFailed``: a TrainJob whose objects cannot be built or applied says so in its status,
  with a machine-readable reason and a truncated message, and the condition turns False once
  the problem is fixed (upstream only emits an Event: trainer#3671);
* ``status.state`` (Pending, Running, Suspended, Complete, Failed): the real state from the
  conditions and ``jobsStatus`` (trainer#2713), shown as STATE by ``kubectl get trainjobs``
  also after a resume (trainer#3666). It is a field, not conditions, so clients that read the
  conditions (the Kubeflow SDK infers Running only when there are none) see upstream's set;
* a fixed condition order (terminal first, then BuildFailed and Suspended);
* ``status.startTime`` and ``status.completionTime`` (:mod:`trainer.controller.lifecycle`).

What the JobSet says (terminal conditions, ``jobsStatus``) comes from the plugins' Status
phase (:meth:`trainer.runtime.framework.Framework.status`); everything here is the
controller's own and holds for every plugin.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from trainer.api import constants as c
from trainer.api.conditions import find_condition, is_true, with_condition
from trainer.api.v1alpha1 import JobStatus, TrainJob, TrainJobStatus
from trainer.controller.failures import CAUSE_MARK
from trainer.controller.lifecycle import times
from trainer.jobset.types import JobSet
from trainer.machinery.messages import truncate
from trainer.machinery.models.core import Condition
from trainer.machinery.times import format_time
from trainer.plugins.registry import default_framework
from trainer.runtime.framework import Framework

ORDER = (
    c.COND_FAILED,
    c.COND_COMPLETE,
    c.COND_BUILD_FAILED,
    c.COND_SUSPENDED,
)
MAX_MESSAGE = 1024
OWN_REASONS = (c.REASON_DEADLINE_EXCEEDED, c.REASON_RUNTIME_NOT_SUPPORTED)
"""Failures the controller itself declares: their cause is their message."""


@dataclass(frozen=True)
class BuildFailure:
    """Why the TrainJob's objects could not be built or applied."""

    reason: str  # CamelCase, e.g. RuntimeNotFound, BuildError, ApplyFailed
    message: str


# Who serves the API groups a runtime's side objects need (docs/troubleshooting.md, section 1).
_PROVIDERS = {
    "scheduling.volcano.sh": "Volcano (podGroupPolicy.volcano)",
    "scheduling.x-k8s.io": "scheduler-plugins coscheduling (podGroupPolicy.coscheduling)",
}


def unserved_message(obj: dict[str, Any]) -> str:
    """What to say when the cluster does not serve the kind of an object we apply."""
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    provider = _PROVIDERS.get(group)
    hint = f"install {provider}, or use a runtime without it" if provider else "install its CRD"
    return (
        f"{api_version} {obj.get('kind')} is not served by this cluster (its CRD is not "
        f"installed): {hint}; the TrainJob is built once it is served"
    )


def _cond(type_: str, status: bool, reason: str, message: str, now: str) -> Condition:
    return Condition(
        type=type_,
        status="True" if status else "False",
        reason=reason,
        message=truncate(message, MAX_MESSAGE),
        last_transition_time=now,
    )


def desired_status(
    trainjob: TrainJob,
    jobset: JobSet | None,
    now: dt.datetime,
    *,
    build_failure: BuildFailure | None = None,
    deadline_exceeded: bool = False,
    runtime_missing: str | None = None,
    framework: Framework | None = None,
    failure_cause: str | None = None,
) -> TrainJobStatus:
    """The status to write (the caller compares it with the current one). ``framework``: the
    plugins whose Status phase reads the JobSet (default: every registered plugin).
    ``failure_cause``: the first failed container, appended to the message of a ``Failed``
    condition that JobSet's failure brought (its reason stays JobSet's)."""
    stamp = format_time(now)
    status = trainjob.status.model_copy(deep=True) if trainjob.status else TrainJobStatus()
    conds = status.conditions

    suspended = bool(trainjob.spec and trainjob.spec.suspend)
    if suspended:
        conds = with_condition(
            conds, _cond(c.COND_SUSPENDED, True, c.REASON_SUSPENDED, c.MSG_SUSPENDED, stamp)
        )
    elif is_true(conds, c.COND_SUSPENDED):
        conds = with_condition(
            conds, _cond(c.COND_SUSPENDED, False, c.REASON_RESUMED, c.MSG_RESUMED, stamp)
        )

    if jobset is not None:
        if conds is not None:
            status.conditions = conds
        framework = framework or default_framework()
        from_plugins = framework.status(trainjob.model_copy(update={"status": status}), jobset)
        if from_plugins is not None:
            status = from_plugins
            conds = status.conditions
        conds = _with_cause(conds, trainjob, failure_cause)

    if runtime_missing is not None:
        conds = with_condition(
            conds,
            _cond(c.COND_FAILED, True, c.REASON_RUNTIME_NOT_SUPPORTED, runtime_missing, stamp),
        )
    if deadline_exceeded:
        conds = with_condition(
            conds,
            _cond(c.COND_FAILED, True, c.REASON_DEADLINE_EXCEEDED, c.MSG_DEADLINE_EXCEEDED, stamp),
        )

    if build_failure is not None:
        conds = with_condition(
            conds,
            _cond(c.COND_BUILD_FAILED, True, build_failure.reason, build_failure.message, stamp),
        )
    elif is_true(conds, c.COND_BUILD_FAILED):
        conds = with_condition(
            conds,
            _cond(
                c.COND_BUILD_FAILED,
                False,
                "ResourcesCreated",
                "The TrainJob's resources were built and applied",
                stamp,
            ),
        )

    start, completion = times(
        conds,
        trainjob.metadata.creation_timestamp if trainjob.metadata else None,
        suspended,
        status.start_time,
        status.completion_time,
    )
    # Assigned only when they change: a field set to None would be sent as null.
    if start != status.start_time:
        status.start_time = start
    if completion != status.completion_time:
        status.completion_time = completion
    previous = trainjob.status.state if trainjob.status else None
    status.state = current_state(conds, status.jobs_status or [], suspended, previous)
    if conds:
        status.conditions = sorted(
            conds, key=lambda x: ORDER.index(x.type) if x.type in ORDER else len(ORDER)
        )
    return status


def _with_cause(
    conds: list[Condition] | None, trainjob: TrainJob, cause: str | None
) -> list[Condition] | None:
    """A terminal ``Failed`` stays as first written, but gets the cause once it is known: the
    JobSet's watch may deliver its failure before the pod watch delivers the pod's. The cause
    goes after JobSet's message, so tools matching that message still find it."""
    before = trainjob.status.conditions if trainjob.status else None
    failed = find_condition(before, c.COND_FAILED)
    if failed is None or failed.status != "True":
        failed = find_condition(conds, c.COND_FAILED)
        if failed is None or failed.status != "True":
            return conds
    if cause and CAUSE_MARK not in (failed.message or "") and failed.reason not in OWN_REASONS:
        failed = failed.model_copy(update={"message": f"{failed.message}; {cause}"})
    return with_condition(conds, failed)


def current_state(
    conds: list[Condition] | None, jobs: list[JobStatus], suspended: bool, previous: str | None
) -> str:
    """Pending, Running, Suspended, Complete or Failed, from the conditions and jobsStatus.

    Running once any replicated job has ready or finished pods, and it stays Running until
    the TrainJob finishes or is suspended (pods between finishing and their Job completing
    are not "pending" again)."""
    if is_true(conds, c.COND_FAILED):
        return "Failed"
    if is_true(conds, c.COND_COMPLETE):
        return "Complete"
    if suspended:
        return "Suspended"
    if any(j.ready > 0 or j.succeeded > 0 for j in jobs) or previous == "Running":
        return "Running"
    return "Pending"
