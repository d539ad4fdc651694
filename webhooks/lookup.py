"""What the webhook reads of the cluster to admit a TrainJob, behind one small async Protocol.

Admission itself is pure (:mod:`trainer.admission`): it is handed a
:class:`~trainer.admission.types.ClusterView`. The webhook fills that view through a
:class:`ClusterLookup`, so the same HTTP layer runs against

* :class:`StaticLookup`: in-memory objects, for tests and for ``trainer validate`` (offline);
* a Kubernetes-backed lookup (``trainer.kube``, later): watch caches first, then a live read.

The runtime lookup returns ``(runtime, None)`` or ``(None, message)`` instead of raising, so an
implementation decides what "not found" means. The Kubernetes one must not refuse a runtime
created a moment ago that its cache has not seen yet: on a cache miss it reads the API before
answering ``None``. The message is the API error text (``clustertrainingruntimes.trainer.
kubeflow.org "x" not found``, see :func:`not_found_message`); admission prefixes it to upstream's
"specified ... must be created before the TrainJob is created".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.jobset.types import JobSet
from trainer.machinery.models.base import K8sModel
from trainer.runtime.info import Runtime
from trainer.runtime.validation import not_found


def not_found_message(kind: str, name: str) -> str:
    """A missing runtime, as upstream's webhook says it (:func:`not_found`)."""
    return not_found(kind, name)


@runtime_checkable
class ClusterLookup(Protocol):
    """The cluster reads a TrainJob's admission needs. Implementations never raise for a
    missing object; an exception means the cluster could not be read at all (the webhook then
    denies with an internal error, and ``failurePolicy: Fail`` keeps the object out)."""

    async def runtime(
        self, kind: str, namespace: str, name: str
    ) -> tuple[Runtime | None, str | None]:
        """The live runtime ``kind``/``name`` (``namespace`` is ignored for
        ClusterTrainingRuntime), or ``(None, message)`` saying why there is none."""
        ...

    async def jobset(self, namespace: str, name: str) -> JobSet | None:
        """The TrainJob's JobSet (same namespace and name), or None when it does not exist."""
        ...

    async def priority_classes(self) -> frozenset[str] | None:
        """Names of the PriorityClasses that exist; None when unknown (the check is skipped)."""
        ...


class StaticLookup:
    """A :class:`ClusterLookup` over objects held in memory (tests, ``trainer validate``).

    ``priority_classes=None`` means "unknown": the Volcano priority-class check is skipped,
    as it is when the webhook cannot list PriorityClasses.
    """

    def __init__(
        self,
        runtimes: Iterable[Runtime] = (),
        jobsets: Iterable[JobSet] = (),
        priority_classes: Iterable[str] | None = None,
    ) -> None:
        self._runtimes: dict[tuple[str, str, str], Runtime] = {}
        self._jobsets: dict[tuple[str, str], JobSet] = {}
        self._priority_classes = (
            frozenset(priority_classes) if priority_classes is not None else None
        )
        for runtime in runtimes:
            self.add_runtime(runtime)
        for jobset in jobsets:
            self.add_jobset(jobset)

    @classmethod
    def from_objects(
        cls, objects: Iterable[K8sModel], priority_classes: Iterable[str] | None = None
    ) -> StaticLookup:
        """A lookup over whatever runtimes and JobSets are among ``objects`` (others ignored):
        what ``trainer validate`` has when given a directory of YAML."""
        objs = list(objects)
        return cls(
            runtimes=[o for o in objs if isinstance(o, TrainingRuntime | ClusterTrainingRuntime)],
            jobsets=[o for o in objs if isinstance(o, JobSet)],
            priority_classes=priority_classes,
        )

    @staticmethod
    def _runtime_key(kind: str, namespace: str, name: str) -> tuple[str, str, str]:
        # Cluster-scoped runtimes have no namespace: whatever the caller passes is ignored.
        return (kind, "" if kind == c.KIND_CLUSTER_TRAINING_RUNTIME else namespace, name)

    def add_runtime(self, runtime: Runtime) -> None:
        """Add or replace a runtime (keyed by kind, namespace and name)."""
        meta = runtime.metadata
        name = (meta.name if meta else None) or ""
        namespace = (meta.namespace if meta else None) or "default"
        self._runtimes[self._runtime_key(runtime.kind, namespace, name)] = runtime

    def add_jobset(self, jobset: JobSet) -> None:
        """Add or replace a JobSet (keyed by namespace and name)."""
        meta = jobset.metadata
        key = ((meta.namespace if meta else None) or "default", (meta.name if meta else None) or "")
        self._jobsets[key] = jobset

    async def runtime(
        self, kind: str, namespace: str, name: str
    ) -> tuple[Runtime | None, str | None]:
        found = self._runtimes.get(self._runtime_key(kind, namespace, name))
        if found is None:
            return None, not_found_message(kind, name)
        return found, None

    async def jobset(self, namespace: str, name: str) -> JobSet | None:
        return self._jobsets.get((namespace, name))

    async def priority_classes(self) -> frozenset[str] | None:
        return self._priority_classes
