"""What the Validate phase decides, and what it may read of the cluster.

:class:`Verdict` is the answer of every validator (plugins and admission alike): warnings
(admitted anyway) and field errors (denied), all of them, never only the first.
:class:`ClusterView` is the cluster state a TrainJob's admission depends on, read by the
caller and passed in, so validation stays pure.

Several ML plugins reserve env names (the ones they inject): :func:`reserved_envs_error`
reports all of them as ONE error at ``spec.trainer.env`` in upstream's message format, so a
TrainJob on a Torch runtime with a data cache gets one error, not one per plugin.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trainer.api import constants as c
from trainer.api.v1alpha1 import Trainer
from trainer.jobset.types import JobSet, JobSetSpec, ReplicatedJob
from trainer.machinery.errors import INVALID, FieldError, Rendered
from trainer.machinery.gofmt import go_struct
from trainer.runtime.info import Info, Runtime

PATH_TRAINER_ENV = "spec.trainer.env"


@dataclass(frozen=True)
class Verdict:
    """Warnings (admitted anyway) and field errors (denied); every error, not just the first."""

    warnings: list[str] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.errors

    def __add__(self, other: Verdict) -> Verdict:
        return Verdict([*self.warnings, *other.warnings], [*self.errors, *other.errors])


@dataclass(frozen=True)
class ClusterView:
    """The cluster state a TrainJob's admission depends on, read by the caller.

    ``runtime`` is the *live* runtime the TrainJob references (None when it does not exist;
    ``runtime_error`` then carries the lookup's message, e.g.
    ``TrainingRuntime.trainer.kubeflow.org "x" not found``). ``jobset`` is the TrainJob's
    existing JobSet (updates only). ``priority_classes`` are the PriorityClass names that exist
    (None: unknown, the check is skipped).
    """

    runtime: Runtime | None = None
    runtime_error: str | None = None
    jobset: JobSet | None = None
    priority_classes: frozenset[str] | None = None


def runtime_name(runtime: Runtime) -> str:
    return (runtime.metadata.name if runtime.metadata else None) or ""


def runtime_jobset_spec(runtime: Runtime) -> JobSetSpec | None:
    """The JobSet spec of the runtime's template."""
    return runtime.spec.template.spec if runtime.spec is not None else None


def runtime_jobs(runtime: Runtime) -> list[ReplicatedJob]:
    """The replicated jobs of the runtime's template."""
    spec = runtime_jobset_spec(runtime)
    return list((spec.replicated_jobs if spec is not None else None) or [])


def go_list(items: Iterable[str]) -> str:
    """A string slice printed with Go's ``%v``: ``[A B]``."""
    return "[" + " ".join(items) + "]"


def reserved_envs_message(names: Iterable[str]) -> str:
    """Upstream's reserved-env message, the names sorted (``sets.List``)."""
    return f"must not have reserved envs, invalid envs configured: {go_list(sorted(set(names)))}"


def trainer_of(info: Info) -> Trainer | None:
    """The TrainJob's ``spec.trainer``."""
    return info.trainjob.spec.trainer if info.trainjob.spec else None


def reserved_envs_error(info: Info, reserved: Iterable[str]) -> list[FieldError]:
    """One Invalid error at ``spec.trainer.env`` naming every ``reserved`` env the TrainJob
    sets (none when it sets none)."""
    trainer = trainer_of(info)
    names = set(reserved)
    if trainer is None or not trainer.env or not names:
        return []
    found = [e.name for e in trainer.env if e.name in names]
    if not found:
        return []
    # Printed as upstream's webhook prints the env list: each EnvVar struct's JSON
    # (side by side, docs/side-by-side.md).
    value = Rendered("[" + ",".join(go_struct(e.to_wire()) for e in trainer.env) + "]")
    return [FieldError(PATH_TRAINER_ENV, INVALID, reserved_envs_message(found), value)]


def not_found(kind: str, name: str) -> str:
    """A missing runtime, as upstream's webhook says it: it reads runtimes from
    controller-runtime's cache, whose NotFound names the kind, not the resource
    (``ClusterTrainingRuntime.trainer.kubeflow.org "x" not found``; side by side,
    docs/side-by-side.md)."""
    return f'{kind}.{c.GROUP} "{name}" not found'
