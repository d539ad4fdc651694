"""Admission of TrainingRuntimes and ClusterTrainingRuntimes (spec 3.4, users.md #13).

Errors (upstream's, exact paths and messages), for each replicated job whose ancestor label is
a known step (``dataset-initializer``, ``model-initializer``, ``trainer``, and this project's
``cache-initializer``; other values are ignored):

- ``replicas`` must be 1: Invalid ``spec.template.spec.replicatedJobs[i].replicas``
  "always must be 1" (``replicas`` defaults to 1, so leaving it out is fine);
- the step's container must be among the regular containers (trainer -> ``node``, each
  initializer -> its own name): Invalid
  ``spec.template.spec.replicatedJobs[i].template.spec.template.spec.containers``
  "must contain the required container for the ancestor: <ancestor>".

Both kinds are validated on create AND update. Upstream skips update for the namespaced
TrainingRuntime (kubeflow/trainer#3686), so a runtime could be edited into a shape its own
create would refuse; here it cannot.

Warnings:

- a ClusterTrainingRuntime created with ``trainer.kubeflow.org/support: deprecated`` (as
  upstream, create only, cluster kind only);
- beyond upstream: a runtime with a ``cache-initializer`` job whose successPolicy would not
  let the JobSet complete when training does (the cache serves until it is removed, so a
  TrainJob on it would never complete);
- beyond upstream: ``mlPolicy.mpi.runLauncherAsNode`` without both a ``launcher`` and a
  ``node`` job (TrainJobs with ``numNodes >= 2`` on it are then refused, spec 2.7).
"""

from __future__ import annotations

from trainer.admission.types import Verdict
from trainer.api import constants as c
from trainer.api.errors import INVALID, FieldError
from trainer.api.jobset import JobSetSpec, ReplicatedJob
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.runtime.assemble import ancestor_of

AnyRuntime = TrainingRuntime | ClusterTrainingRuntime

PATH_REPLICATED_JOBS = "spec.template.spec.replicatedJobs"
MSG_REPLICAS = "always must be 1"
MSG_CONTAINER = "must contain the required container for the ancestor: {ancestor}"


def _name(runtime: AnyRuntime) -> str:
    return (runtime.metadata.name if runtime.metadata else None) or ""


def _labels(runtime: AnyRuntime) -> dict[str, str]:
    return (runtime.metadata.labels if runtime.metadata else None) or {}


def _jobset_spec(runtime: AnyRuntime) -> JobSetSpec | None:
    return runtime.spec.template.spec if runtime.spec is not None else None


def _jobs(runtime: AnyRuntime) -> list[ReplicatedJob]:
    spec = _jobset_spec(runtime)
    return list((spec.replicated_jobs if spec is not None else None) or [])


def _container_names(job: ReplicatedJob) -> list[str]:
    """Names of the regular containers of the job's pod template (init containers do not
    count, as upstream)."""
    job_spec = job.template.spec
    pod = job_spec.template.spec if job_spec is not None else None
    return [ctr.name for ctr in (pod.containers if pod is not None else None) or []]


def validate_replicated_jobs(jobs: list[ReplicatedJob]) -> list[FieldError]:
    """Spec 3.4: one replica and the mapped container for every job of a known step."""
    errors: list[FieldError] = []
    for i, job in enumerate(jobs):
        ancestor = ancestor_of(job)
        if ancestor not in c.ANCESTOR_CONTAINER:
            continue
        base = f"{PATH_REPLICATED_JOBS}[{i}]"
        if job.replicas != 1:
            errors.append(FieldError(f"{base}.replicas", INVALID, MSG_REPLICAS, job.replicas))
        names = _container_names(job)
        if c.ANCESTOR_CONTAINER[ancestor] not in names:
            errors.append(
                FieldError(
                    f"{base}.template.spec.template.spec.containers",
                    INVALID,
                    MSG_CONTAINER.format(ancestor=ancestor),
                    names,
                )
            )
    return errors


def deprecation_warning(runtime: AnyRuntime) -> str:
    return (
        f'ClusterTrainingRuntime "{_name(runtime)}" is deprecated and will be removed in a '
        "future release of Kubeflow Trainer. See runtime deprecation policy: "
        f"{c.RUNTIME_DEPRECATION_POLICY_URL}"
    )


def _completes_with_training(spec: JobSetSpec, jobs: list[ReplicatedJob]) -> bool:
    """Whether the JobSet completes once the trainer jobs succeed while the cache still runs.

    JobSet's success policy targets the listed jobs, or every job when the list is empty (and
    ``All`` over every job when there is no policy). ``All`` needs every target to succeed, so
    no cache-initializer job may be a target; ``Any`` needs one, so a trainer job must be one.
    """
    policy = spec.success_policy
    operator = policy.operator if policy is not None else "All"
    targets = set((policy.target_replicated_jobs if policy is not None else None) or [])
    if not targets:
        targets = {job.name for job in jobs}
    trainers = {job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_TRAINER}
    caches = {job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_CACHE_INITIALIZER}
    if not targets & trainers:
        return False
    return operator == "Any" or not targets & caches


def cache_warnings(runtime: AnyRuntime) -> list[str]:
    """Beyond upstream: a cache that never completes must not hold the TrainJob open."""
    spec = _jobset_spec(runtime)
    jobs = _jobs(runtime)
    caches = [job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_CACHE_INITIALIZER]
    if spec is None or not caches or _completes_with_training(spec, jobs):
        return []
    trainers = [job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_TRAINER]
    suggestion = trainers[0] if trainers else c.JOB_NODE
    return [
        f'{runtime.kind} "{_name(runtime)}" has the data cache job "{caches[0]}", but '
        "spec.template.spec.successPolicy does not target the trainer job alone: the cache "
        "keeps serving until the JobSet is finished, so a TrainJob on this runtime would never "
        "complete while the cache runs. Set successPolicy to "
        f"{{operator: All, targetReplicatedJobs: [{suggestion}]}}"
    ]


def mpi_warnings(runtime: AnyRuntime) -> list[str]:
    """Beyond upstream: runLauncherAsNode needs both a ``launcher`` and a ``node`` job for
    more than one node; say so when the runtime is written, not when a TrainJob is refused."""
    ml_policy = runtime.spec.ml_policy if runtime.spec is not None else None
    policy = ml_policy.mpi if ml_policy is not None else None
    if policy is None or not policy.run_launcher_as_node:
        return []
    names = {job.name for job in _jobs(runtime)}
    missing = [job for job in (c.JOB_LAUNCHER, c.JOB_NODE) if job not in names]
    if not missing:
        return []
    jobs = " and ".join(f'"{job}"' for job in missing)
    return [
        f'{runtime.kind} "{_name(runtime)}" sets spec.mlPolicy.mpi.runLauncherAsNode but has no '
        f"replicated job {jobs}: TrainJobs with spec.trainer.numNodes >= 2 on it will be "
        'rejected. Add both a "launcher" and a "node" job, or unset runLauncherAsNode'
    ]


def validate_runtime(new: AnyRuntime, old: AnyRuntime | None) -> Verdict:
    """Admission of a runtime of either kind; ``old`` is None on create."""
    warnings: list[str] = []
    if (
        old is None
        and isinstance(new, ClusterTrainingRuntime)
        and _labels(new).get(c.LABEL_SUPPORT) == c.SUPPORT_DEPRECATED
    ):
        warnings.append(deprecation_warning(new))
    warnings += cache_warnings(new)
    warnings += mpi_warnings(new)
    return Verdict(warnings, validate_replicated_jobs(_jobs(new)))
