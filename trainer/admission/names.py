"""Beyond upstream: the name budget of the JobSet a TrainJob will get (kubeflow/trainer#2735;
the rule is JobSet's: trainer.jobset.budget).

Upstream admits any RFC-1035 TrainJob name of up to 63 characters, and the TrainJob then fails
inside JobSet's webhook when a generated Job or Pod name is longer than 63
(``<name>-dataset-initializer-0-0-abcde`` caps the name at 33). Here the TrainJob is rendered
exactly as the controller would (pure: the MPI key generator returns a fixed dummy pair and
the data cache's credential generator a fixed string, no randomness in admission) and every
generated name is checked with :mod:`trainer.jobset.budget`. The names that are too long
make an Invalid error at ``metadata.name`` (one error: the longest offending name, how many
more there are, and the longest TrainJob name this runtime allows with these settings).
"""

from __future__ import annotations

from typing import Any

from trainer.api.v1alpha1 import TrainJob
from trainer.jobset import budget
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSetSpec
from trainer.machinery.errors import INVALID, FieldError
from trainer.machinery.quantity import QuantityError
from trainer.plugins.registry import default_framework, render
from trainer.runtime.info import BuildContext, BuildError, Info, Observed, Runtime, SSHKeyPair
from trainer.runtime.snapshot import snapshot_name

NAME_PATH = "metadata.name"
RUNTIME_REF_PATH = "spec.runtimeRef"

_DUMMY_KEYS = SSHKeyPair(private_pem=b"admission", public_authorized_key=b"admission")


def _dummy_keygen() -> SSHKeyPair:
    return _DUMMY_KEYS


def _dummy_credential() -> str:
    return "admission"


ADMISSION_CONTEXT = BuildContext(ssh_keygen=_dummy_keygen, credential_gen=_dummy_credential)
"""The build context of an admission render: no randomness, default configuration."""

NAME_CHECK_CONTEXT = BuildContext(
    ssh_keygen=_dummy_keygen, credential_gen=_dummy_credential, objects=False
)
"""The same, for a render whose objects are not looked at (only the JobSet spec is)."""

_KIND_TEXT = {
    "Job": "Job name",
    "Pod": "Pod name",
    "hostname": "pod hostname",
    "subdomain": "subdomain (headless Service name)",
    "PersistentVolumeClaim": "PersistentVolumeClaim name",
    "Volume": "pod volume name",
}


def rendered_jobset_spec(trainjob: TrainJob, runtime: Runtime) -> JobSetSpec | None:
    """The spec of the JobSet the controller would create for ``trainjob`` (None if the build
    makes no JobSet). Raises :class:`BuildError` when the TrainJob cannot be built."""
    name = (trainjob.metadata.name if trainjob.metadata else None) or ""
    # An observed (empty) snapshot ConfigMap makes render skip dumping the runtime to YAML:
    # admission only needs the JobSet.
    observed = Observed(config_maps={snapshot_name(name): {}})
    objects = render(trainjob, runtime, observed=observed, ctx=ADMISSION_CONTEXT)
    for obj in objects:
        if obj.get("kind") == jsc.KIND:
            spec: dict[str, Any] = obj.get("spec") or {}
            return JobSetSpec.from_wire(spec)
    return None


def _fixed_subdomain(spec: JobSetSpec) -> str | None:
    return (spec.network.subdomain if spec.network else None) or None


def name_errors(trainjob_name: str, spec: JobSetSpec) -> list[FieldError]:
    """At most one error at ``metadata.name``: the longest generated name over 63 characters,
    how many others are too long, and the longest TrainJob name the runtime allows.

    A too-long ``network.subdomain`` set by the runtime does not depend on the TrainJob name,
    so it is reported at ``spec.runtimeRef`` instead.
    """
    generated = budget.generated_names(trainjob_name, spec)
    errors: list[FieldError] = []
    grown = []
    for gen in budget.too_long(trainjob_name, spec, generated):
        if gen.kind == "subdomain" and _fixed_subdomain(spec):
            errors.append(
                FieldError(
                    RUNTIME_REF_PATH,
                    INVALID,
                    f'the runtime\'s JobSet network.subdomain "{gen.name}" is {len(gen.name)} '
                    f"characters, more than the {budget.MAX_NAME} a DNS-1035 label allows",
                    gen.name,
                )
            )
        else:
            grown.append(gen)
    if grown:
        limit = budget.max_name_length(trainjob_name, spec, generated)
        gen = grown[0]
        what = _KIND_TEXT.get(gen.kind, f"{gen.kind} name")
        where = f' for replicated job "{gen.replicated_job}"' if gen.replicated_job else ""
        suffix = (
            f' ("{budget.POD_SUFFIX[1:]}" stands for the random suffix the Job controller adds)'
            if gen.kind == "Pod"
            else ""
        )
        others = (
            f" ({len(grown) - 1} other generated name{'s are' if len(grown) > 2 else ' is'} "
            "too long as well)"
            if len(grown) > 1
            else ""
        )
        errors.insert(
            0,
            FieldError(
                NAME_PATH,
                INVALID,
                f'the JobSet would generate the {what} "{gen.name}"{where}, {len(gen.name)} '
                f"characters long{suffix}, but JobSet allows at most {budget.MAX_NAME}{others}; "
                f"the longest TrainJob name this runtime allows with these settings is {limit} "
                "characters",
                trainjob_name,
            ),
        )
    return errors


def _runtime_ref(trainjob: TrainJob) -> dict[str, Any] | None:
    return trainjob.spec.runtime_ref.to_wire() if trainjob.spec else None


def validate_names(
    trainjob: TrainJob, runtime: Runtime, info: Info | None = None
) -> list[FieldError]:
    """Render ``trainjob`` on ``runtime`` and check the generated names (module docstring).

    ``info``, when given, is the TrainJob already merged onto the runtime (its plugins not yet
    run); it is built on in place, which saves merging again. A build failure is reported as
    an Invalid error at ``spec.runtimeRef`` with the build's message: it is what the
    controller would hit when creating the JobSet.
    """
    name = (trainjob.metadata.name if trainjob.metadata else None) or ""
    if not name:
        return []  # generateName: the API server names the object before admission runs
    try:
        if info is not None:
            default_framework().run(info, NAME_CHECK_CONTEXT)
            spec: JobSetSpec | None = info.spec
        else:
            spec = rendered_jobset_spec(trainjob, runtime)
    except BuildError as exc:
        return [FieldError(RUNTIME_REF_PATH, INVALID, str(exc), _runtime_ref(trainjob))]
    except QuantityError as exc:
        return [
            FieldError(
                RUNTIME_REF_PATH,
                INVALID,
                f"invalid resource quantity: {exc}",
                _runtime_ref(trainjob),
            )
        ]
    if spec is None:
        return []
    return name_errors(name, spec)
