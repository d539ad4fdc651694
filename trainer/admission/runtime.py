"""Admission of TrainingRuntimes and ClusterTrainingRuntimes (upstream:
https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/webhooks/trainingruntime_webhook.go;
here also on update, which upstream skips for TrainingRuntimes: kubeflow/trainer#3686).

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

Warnings: a ClusterTrainingRuntime created with ``trainer.kubeflow.org/support: deprecated``
(as upstream, create only, cluster kind only); then the plugins' (the framework's
ValidateRuntime phase: beyond upstream, the data cache's successPolicy and MPI's
runLauncherAsNode jobs); then, beyond upstream, what JobSet's webhook would refuse in every
JobSet built from the template (:mod:`trainer.jobset.webhook`: rule names, job failure
reasons, ``groupName``, ``managedBy``).
"""

from __future__ import annotations

from trainer.admission.types import Verdict
from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.jobset import webhook as jobset_webhook
from trainer.jobset.types import ReplicatedJob
from trainer.machinery.errors import INVALID, FieldError
from trainer.plugins.registry import default_framework
from trainer.runtime.assemble import ancestor_of
from trainer.runtime.validation import runtime_jobs, runtime_name

AnyRuntime = TrainingRuntime | ClusterTrainingRuntime

PATH_REPLICATED_JOBS = "spec.template.spec.replicatedJobs"
MSG_REPLICAS = "always must be 1"
MSG_CONTAINER = "must contain the required container for the ancestor: {ancestor}"


def _labels(runtime: AnyRuntime) -> dict[str, str]:
    return (runtime.metadata.labels if runtime.metadata else None) or {}


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
        f'ClusterTrainingRuntime "{runtime_name(runtime)}" is deprecated and will be removed in a '
        "future release of Kubeflow Trainer. See runtime deprecation policy: "
        f"{c.RUNTIME_DEPRECATION_POLICY_URL}"
    )


def jobset_ttl_warning(runtime: AnyRuntime) -> list[str]:
    """Beyond upstream: a JobSet ``ttlSecondsAfterFinished`` in the template deletes the JobSet,
    which a TrainJob whose finish the controller has not seen yet builds again, restarting the
    training (kubeflow/trainer#3779); the runtime's ``runPolicy`` deletes the TrainJob instead
    (docs/lifecycle.md)."""
    spec = runtime.spec.template.spec if runtime.spec else None
    if spec is None or spec.ttl_seconds_after_finished is None:
        return []
    return [
        f"spec.template.spec.ttlSecondsAfterFinished: JobSet deletes each JobSet "
        f"{spec.ttl_seconds_after_finished}s after it finishes, and a TrainJob whose finish the "
        "controller has not seen by then gets a new JobSet, running the training again; set "
        "spec.runPolicy.ttlSecondsAfterFinished instead, which deletes the finished TrainJob "
        "and everything it owns"
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
    plugins = default_framework().validate_runtime(new, old)
    warnings += plugins.warnings
    warnings += jobset_webhook.template_warnings(new.spec.template.spec if new.spec else None)
    warnings += jobset_ttl_warning(new)
    return Verdict(warnings, validate_replicated_jobs(runtime_jobs(new)) + plugins.errors)
