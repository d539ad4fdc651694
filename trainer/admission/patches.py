"""Admission rules for ``spec.runtimePatches`` (upstream:
https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/webhooks/trainjob_webhook.go;
how Kueue uses them: docs/kueue.md).

Content rules, on create and update:

- ``manager`` must be a domain-prefixed path (Kubernetes ``IsDomainPrefixedPath``:
  ``<DNS-1123 subdomain>/<non-empty HTTP path>``), e.g. ``kueue.x-k8s.io/manager``;
- a patch may only name replicated jobs that exist in the runtime's JobSet template (a patch
  never adds a job through admission), and in them only containers / init containers that
  exist there;
- a patch may not set ``env`` on the containers ``node``, ``dataset-initializer`` or
  ``model-initializer`` (the TrainJob's ``trainer`` and ``initializer`` fields own their env);
  init containers of those names are not covered, as upstream.

Mutability, on update: any change to the patches (ignoring the webhook-stamped ``time``) needs
the TrainJob suspended before or after the update, and no active Job in the existing JobSet.

Paths: upstream reports the content errors at ``spec.runtimePatches`` (manager errors at
``spec.runtimePatches.manager``, without an index) with the whole list as the value. We keep
upstream's messages but report the precise field, e.g.
``spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[1].name``, with the
offending value, so a user (or Kueue's logs) can tell which patch and which entry is wrong.
"""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import ContainerPatch, ReplicatedJobPatch, RuntimePatch, TrainJob
from trainer.jobset.types import JobSet, ReplicatedJob
from trainer.machinery.errors import FORBIDDEN, INVALID, FieldError, join_path
from trainer.machinery.names import domain_prefixed_path_errors
from trainer.machinery.nulls import drop_nulls
from trainer.runtime.info import Runtime

PATH = "spec.runtimePatches"

MSG_UNKNOWN_JOB = "must not have replicated job that doesn't exist in the runtime job template"
MSG_NO_ENV = (
    f"must not have envs for the {c.CONTAINER_DATASET_INITIALIZER}, "
    f"{c.CONTAINER_MODEL_INITIALIZER}, {c.CONTAINER_NODE} containers"
)
MSG_SUSPEND_REQUIRED = (
    "RuntimePatches can only be modified when the TrainJob is suspended before or after the update"
)
NO_ENV_CONTAINERS = frozenset(
    {c.CONTAINER_DATASET_INITIALIZER, c.CONTAINER_MODEL_INITIALIZER, c.CONTAINER_NODE}
)


def msg_unknown_container(job: str) -> str:
    return f"must not have container that doesn't exist in the runtime job {job}"


def msg_unknown_init_container(job: str) -> str:
    return f"must not have initContainer that doesn't exist in the runtime job {job}"


def msg_job_active(job: str) -> str:
    return (
        f"RuntimePatches cannot be modified when the JobSet's ReplicatedJob {job} is still active"
    )


def _runtime_jobs(runtime: Runtime) -> dict[str, ReplicatedJob]:
    """The runtime's own replicated jobs by name (before any patch)."""
    spec = runtime.spec.template.spec if runtime.spec is not None else None
    return {job.name: job for job in (spec.replicated_jobs if spec else None) or []}


def _container_names(job: ReplicatedJob) -> tuple[set[str], set[str]]:
    """(regular, init) container names of a runtime job's pod template."""
    job_spec = job.template.spec
    pod = job_spec.template.spec if job_spec is not None else None
    if pod is None:
        return set(), set()
    return (
        {ctr.name for ctr in pod.containers or []},
        {ctr.name for ctr in pod.init_containers or []},
    )


def _patch_jobs(patch: RuntimePatch) -> list[ReplicatedJobPatch]:
    rt = patch.training_runtime_spec
    spec = rt.template.spec if rt is not None and rt.template is not None else None
    return (spec.replicated_jobs if spec is not None else None) or []


def _pod_patch_containers(
    job: ReplicatedJobPatch,
) -> tuple[list[ContainerPatch], list[ContainerPatch]]:
    tmpl = job.template
    job_spec = tmpl.spec if tmpl is not None else None
    pod_tmpl = job_spec.template if job_spec is not None else None
    pod = pod_tmpl.spec if pod_tmpl is not None else None
    if pod is None:
        return [], []
    return pod.containers or [], pod.init_containers or []


def validate_patch_content(trainjob: TrainJob, runtime: Runtime) -> list[FieldError]:
    """The content rules (module docstring) for every patch of ``trainjob`` against the
    runtime's own JobSet template. Every error is reported; a patch naming an unknown job gets
    one error for the job, not one more per container of it."""
    patches = (trainjob.spec.runtime_patches if trainjob.spec else None) or []
    jobs = _runtime_jobs(runtime)
    errors: list[FieldError] = []
    for i, patch in enumerate(patches):
        base = join_path(PATH, i)
        errors += domain_prefixed_path_errors(join_path(base, "manager"), patch.manager)
        jobs_path = f"{base}.trainingRuntimeSpec.template.spec.replicatedJobs"
        for j, pjob in enumerate(_patch_jobs(patch)):
            job_path = join_path(jobs_path, j)
            runtime_job = jobs.get(pjob.name)
            if runtime_job is None:
                errors.append(
                    FieldError(join_path(job_path, "name"), INVALID, MSG_UNKNOWN_JOB, pjob.name)
                )
                continue
            regular, init = _container_names(runtime_job)
            containers, init_containers = _pod_patch_containers(pjob)
            pod_path = f"{job_path}.template.spec.template.spec"
            for k, ctr in enumerate(containers):
                ctr_path = join_path(f"{pod_path}.containers", k)
                if ctr.name not in regular:
                    errors.append(
                        FieldError(
                            join_path(ctr_path, "name"),
                            INVALID,
                            msg_unknown_container(pjob.name),
                            ctr.name,
                        )
                    )
                elif ctr.env and ctr.name in NO_ENV_CONTAINERS:
                    errors.append(
                        FieldError(join_path(ctr_path, "env"), INVALID, MSG_NO_ENV, ctr.name)
                    )
            for k, ctr in enumerate(init_containers):
                if ctr.name not in init:
                    errors.append(
                        FieldError(
                            join_path(join_path(f"{pod_path}.initContainers", k), "name"),
                            INVALID,
                            msg_unknown_init_container(pjob.name),
                            ctr.name,
                        )
                    )
    return errors


def patch_content(patch: RuntimePatch) -> dict[str, Any]:
    """A patch as wire data without its ``time`` (and without explicit nulls): two patches
    with equal content are the same change, whenever they were stamped."""
    data = drop_nulls(patch.to_wire())
    data.pop("time", None)
    return dict(data)


def patches_content(trainjob: TrainJob | None) -> list[dict[str, Any]]:
    """Every patch's content, in list order (order matters: later patches win the merge).
    An absent list and an empty one are the same."""
    patches = (trainjob.spec.runtime_patches if trainjob and trainjob.spec else None) or []
    return [patch_content(p) for p in patches]


def patches_changed(new: TrainJob, old: TrainJob) -> bool:
    """True when the runtimePatches differ other than in their ``time`` stamps."""
    return patches_content(new) != patches_content(old)


def _suspended(trainjob: TrainJob) -> bool:
    return bool(trainjob.spec and trainjob.spec.suspend)


def first_active_job(jobset: JobSet | None) -> str | None:
    """The first replicated job (in the JobSet's status order) with active Jobs."""
    status = jobset.status if jobset is not None else None
    for rjob in (status.replicated_jobs_status if status else None) or []:
        if rjob.active > 0:
            return rjob.name
    return None


def validate_patch_update(new: TrainJob, old: TrainJob, jobset: JobSet | None) -> list[FieldError]:
    """The mutability rule: a changed patch list needs ``suspend: true`` on the old
    or the new object (so Kueue can patch and unsuspend, or restore and suspend, in one update)
    and, if that holds, an existing JobSet with no active replicated job."""
    if not patches_changed(new, old):
        return []
    if not _suspended(old) and not _suspended(new):
        return [FieldError(PATH, FORBIDDEN, MSG_SUSPEND_REQUIRED)]
    active = first_active_job(jobset)
    if active is not None:
        return [FieldError(PATH, FORBIDDEN, msg_job_active(active))]
    return []
