"""What admission decides, and what it may read of the cluster (passed in: admission is pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.api.errors import FieldError
from trainer.api.jobset import JobSet
from trainer.runtime.info import Runtime


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
    ``trainingruntimes.trainer.kubeflow.org "x" not found``). ``jobset`` is the TrainJob's
    existing JobSet (updates only). ``priority_classes`` are the PriorityClass names that exist
    (None: unknown, the check is skipped).
    """

    runtime: Runtime | None = None
    runtime_error: str | None = None
    jobset: JobSet | None = None
    priority_classes: frozenset[str] | None = None
