"""The TrainJob validator (validating webhook), create and update. Upstream:
https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/webhooks/trainjob_webhook.go

In order, collecting every error:

1. ``spec.runtimeRef`` must name a TrainingRuntime or ClusterTrainingRuntime of group
   ``trainer.kubeflow.org`` ("unsupported runtime: <Kind>.<group>"); else stop.
2. The runtime must exist (``view.runtime``; the *live* runtime, as upstream); else stop.
3. A ClusterTrainingRuntime labelled ``trainer.kubeflow.org/support: deprecated`` warns.
4. The JobSet plugin's initializer rules: a TrainJob with a dataset (model) initializer needs
   a ``dataset-initializer`` (``model-initializer``) job with a container of that name that
   mounts the ``initializer`` volume. With this project's data cache (a ``cache://`` dataset on
   a runtime with a ``cache-initializer`` step) the dataset checks are replaced by cache
   checks: job ``cache-initializer``, its container ``cache-initializer``, one replica.
5. runtimePatches content rules, and on update the mutability rule (:mod:`.patches`).
   Patches that do not merge into a valid JobSet spec are reported at
   ``spec.runtimePatches`` (unless a patch rule already explains it), and the rules that
   need the merged TrainJob (4, 6, 7) are skipped.
6. The plugins' rules: the framework's Validate phase (each plugin's ``reserved_envs`` and
   ``validate``, :mod:`trainer.runtime.framework`), on the Info before any plugin ran.
7. Beyond upstream, on create: the generated-name budget of the rendered JobSet
   (:mod:`.names`); a build failure there is reported at ``spec.runtimeRef`` unless an
   identical error was already reported.
"""

from __future__ import annotations

from trainer.admission import names, patches
from trainer.admission.types import ClusterView, Verdict
from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, RuntimeRef, TrainJob
from trainer.jobset.types import ReplicatedJob
from trainer.machinery.errors import INVALID, REQUIRED, FieldError, Rendered
from trainer.machinery.gofmt import go_struct
from trainer.plugins.registry import default_framework
from trainer.runtime.assemble import PatchMergeError, dataset_goes_to_cache, new_info
from trainer.runtime.framework import Framework
from trainer.runtime.info import BuildError, Info, Runtime
from trainer.runtime.validation import not_found

RUNTIME_REF_PATH = "spec.runtimeRef"

SUPPORTED_KINDS = (c.KIND_TRAINING_RUNTIME, c.KIND_CLUSTER_TRAINING_RUNTIME)


def runtime_key(ref: RuntimeRef) -> str:
    """The registry key ``<Kind>.<apiGroup>``, e.g.
    ``ClusterTrainingRuntime.trainer.kubeflow.org``."""
    return f"{ref.kind}.{ref.api_group}"


def deprecation_warning(name: str) -> str:
    return (
        f'Referenced ClusterTrainingRuntime "{name}" is deprecated and will be removed in a '
        "future release of Kubeflow Trainer. See runtime deprecation policy: "
        f"{c.RUNTIME_DEPRECATION_POLICY_URL}"
    )


def _not_found_message(ref: RuntimeRef, view: ClusterView) -> str:
    default = not_found(ref.kind, ref.name)
    what = (
        "clusterTrainingRuntime"
        if ref.kind == c.KIND_CLUSTER_TRAINING_RUNTIME
        else ("trainingRuntime")
    )
    return (
        f"{view.runtime_error or default}: specified {what} must be created before the "
        "TrainJob is created"
    )


def _is_deprecated(runtime: Runtime) -> bool:
    labels = (runtime.metadata.labels if runtime.metadata else None) or {}
    return labels.get(c.LABEL_SUPPORT) == c.SUPPORT_DEPRECATED


def _jobs_named(info: Info, name: str) -> list[ReplicatedJob]:
    return [job for job in info.spec.replicated_jobs or [] if job.name == name]


def _struct_value(ref: RuntimeRef) -> Rendered:
    """The runtimeRef as upstream's webhook prints it in an error: the struct's JSON."""
    return Rendered(go_struct(ref.to_wire()))


def _initializer_errors(info: Info, job_name: str, config: str, ref: object) -> list[FieldError]:
    """Upstream's three checks for one initializer (job, container, ``initializer`` mount).
    As upstream, the container may be a regular or an init container (names are unique)."""

    def invalid(message: str) -> FieldError:
        return FieldError(RUNTIME_REF_PATH, INVALID, message, ref)

    jobs = _jobs_named(info, job_name)
    if not jobs:
        return [
            invalid(f"must have {job_name} job when trainJob is configured with input {config}")
        ]
    ps = info.pod_set(job_name)
    ctr = ps.any_container(job_name) if ps is not None else None
    if ctr is None:
        return [invalid(f"must have container with name - {job_name} in the {job_name} job")]
    if not any(m.name == c.VOLUME_INITIALIZER for m in ctr.volume_mounts or []):
        return [
            invalid(
                f"must have volumeMount with name - {c.VOLUME_INITIALIZER} in container "
                f"{job_name} of the {job_name} job"
            )
        ]
    return []


def _cache_errors(info: Info, ref: object) -> list[FieldError]:
    """This project's cache checks, replacing the dataset-initializer ones for a ``cache://``
    dataset: job ``cache-initializer`` with (regular) container ``cache-initializer`` (where
    STORAGE_URI and the dataset env go) and one replica (one cache per TrainJob)."""
    job_name = c.JOB_CACHE_INITIALIZER
    container = c.CONTAINER_CACHE_INITIALIZER

    def invalid(message: str) -> FieldError:
        return FieldError(RUNTIME_REF_PATH, INVALID, message, ref)

    jobs = _jobs_named(info, job_name)
    if not jobs:
        return [
            invalid(
                f"must have {job_name} job when trainJob is configured with a cache:// input "
                "datasetConfig"
            )
        ]
    errors: list[FieldError] = []
    ps = info.pod_set(job_name)
    if ps is None or ps.container(container) is None:
        errors.append(invalid(f"must have container with name - {container} in the {job_name} job"))
    if jobs[0].replicas != 1:
        errors.append(
            invalid(
                f"must have replicas 1 in the {job_name} job when trainJob is configured with a "
                f"cache:// input datasetConfig, got {jobs[0].replicas}"
            )
        )
    return errors


def validate_initializers(info: Info) -> list[FieldError]:
    """The JobSet plugin's initializer rules (step 4 of the module docstring)."""
    spec = info.trainjob.spec
    init = spec.initializer if spec is not None else None
    if spec is None or init is None:
        return []
    ref = _struct_value(spec.runtime_ref)
    errors: list[FieldError] = []
    if init.dataset is not None:
        if dataset_goes_to_cache(info):
            errors += _cache_errors(info, ref)
        else:
            errors += _initializer_errors(info, c.JOB_DATASET_INITIALIZER, "datasetConfig", ref)
    if init.model is not None:
        errors += _initializer_errors(info, c.JOB_MODEL_INITIALIZER, "modelConfig", ref)
    return errors


def validate_trainjob(
    new: TrainJob, old: TrainJob | None, view: ClusterView, *, framework: Framework | None = None
) -> Verdict:
    """Admission of a TrainJob: create when ``old`` is None, update otherwise (module
    docstring). Pure: everything it knows of the cluster is in ``view``. ``framework``: the
    plugins whose rules apply (default: every registered plugin)."""
    if new.spec is None:
        return Verdict(errors=[FieldError("spec", REQUIRED, "spec.runtimeRef is required")])
    ref = new.spec.runtime_ref
    if ref.api_group != c.GROUP or ref.kind not in SUPPORTED_KINDS:
        # Upstream answers with this error alone, no field path or value (side by side,
        # docs/side-by-side.md): an error printed as its type.
        message = f"unsupported runtime: {runtime_key(ref)}"
        return Verdict(errors=[FieldError("", message)])
    runtime = view.runtime
    if runtime is None:
        # Upstream reports a missing ClusterTrainingRuntime at ``spec.RuntimeRef`` (a typo in
        # its field path); we use ``spec.runtimeRef`` for both kinds.
        message = _not_found_message(ref, view)
        return Verdict(errors=[FieldError(RUNTIME_REF_PATH, INVALID, message, _struct_value(ref))])

    warnings: list[str] = []
    errors: list[FieldError] = []
    if isinstance(runtime, ClusterTrainingRuntime) and _is_deprecated(runtime):
        name = (runtime.metadata.name if runtime.metadata else None) or ref.name
        warnings.append(deprecation_warning(name))

    patch_errors = patches.validate_patch_content(new, runtime)
    info: Info | None = None
    try:
        info = new_info(new, runtime)
    except PatchMergeError as exc:
        # When the patch rules already explain why the merge fails, that is enough.
        if not patch_errors:
            errors.append(FieldError(patches.PATH, INVALID, str(exc)))
    except BuildError as exc:
        errors.append(FieldError(RUNTIME_REF_PATH, INVALID, str(exc), _struct_value(ref)))
    if info is not None:
        errors += validate_initializers(info)

    errors += patch_errors
    if old is not None:
        errors += patches.validate_patch_update(new, old, view.jobset)

    if info is not None:
        try:
            policy = (framework or default_framework()).validate(info, old, view)
        except BuildError as exc:
            errors.append(FieldError(RUNTIME_REF_PATH, INVALID, str(exc), _struct_value(ref)))
        else:
            warnings += policy.warnings
            errors += policy.errors

    if old is None and info is not None:
        # The name budget matters when the JobSet is first created; on update the name is
        # immutable and the JobSet (if any) exists already, so metadata-only updates (labels,
        # finalizers) and Kueue's suspend/resume are never blocked by it. (Without an Info the
        # TrainJob cannot be rendered; the error above says why.)
        seen = {(e.path, e.message) for e in errors}
        # The Validate phase only read the Info: the name check builds on it in place.
        for error in names.validate_names(new, runtime, info):
            if (error.path, error.message) not in seen:
                seen.add((error.path, error.message))
                errors.append(error)
    return Verdict(warnings, errors)
