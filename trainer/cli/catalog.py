"""The runtimes a CLI command resolves TrainJobs against: given files, else the built-ins,
plus any runtime found next to the TrainJobs."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.api.load import Document
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.runtime.info import Runtime

RuntimeKey = tuple[str, str, str]  # kind, namespace ("" for cluster scope), name


def runtime_key(runtime: Runtime) -> RuntimeKey:
    meta = runtime.metadata
    name = (meta.name if meta else None) or ""
    if isinstance(runtime, TrainingRuntime):
        return (c.KIND_TRAINING_RUNTIME, (meta.namespace if meta else None) or "default", name)
    return (c.KIND_CLUSTER_TRAINING_RUNTIME, "", name)


class RuntimeCatalog:
    def __init__(self, source: str) -> None:
        self.source = source  # how the runtimes were given, for messages
        self._items: dict[RuntimeKey, Runtime] = {}

    def add(self, runtime: Runtime) -> None:
        self._items[runtime_key(runtime)] = runtime

    def names(self) -> list[str]:
        return sorted(f"{k}/{n}" if not ns else f"{k}/{ns}/{n}" for k, ns, n in self._items)

    def find(self, job: TrainJob) -> tuple[Runtime | None, str]:
        """The runtime a TrainJob references, or None and a message saying what exists."""
        if job.spec is None:
            return None, "spec.runtimeRef is required"
        ref = job.spec.runtime_ref
        namespace = (job.metadata.namespace if job.metadata else None) or "default"
        if ref.api_group != c.GROUP or ref.kind not in (
            c.KIND_TRAINING_RUNTIME,
            c.KIND_CLUSTER_TRAINING_RUNTIME,
        ):
            return None, f"unsupported runtime: {ref.kind}.{ref.api_group}"
        scope = namespace if ref.kind == c.KIND_TRAINING_RUNTIME else ""
        runtime = self._items.get((ref.kind, scope, ref.name))
        if runtime is not None:
            return runtime, ""
        where = f" in namespace {scope}" if scope else ""
        return None, (
            f"{ref.kind} {ref.name!r}{where} is not among the runtimes {self.source}: "
            + ", ".join(self.names())
        )


def is_runtime(obj: object) -> bool:
    return isinstance(obj, TrainingRuntime | ClusterTrainingRuntime)


NAMESPACED_KINDS = (c.KIND_TRAINJOB, c.KIND_TRAINING_RUNTIME)


def with_namespace(docs: list[Document], namespace: str) -> list[Document]:
    """Namespaced objects without a namespace get ``namespace``, as ``kubectl -n`` gives it
    (TrainJobs and TrainingRuntimes alike, so a runtime next to its TrainJob stays with it)."""
    out: list[Document] = []
    for doc in docs:
        data = doc.data
        meta = data.get("metadata") if isinstance(data, dict) else None
        if (
            isinstance(meta, dict)
            and data.get("kind") in NAMESPACED_KINDS
            and not meta.get("namespace")
        ):
            data = {**data, "metadata": {**meta, "namespace": namespace}}
        out.append(Document(doc.source, doc.index, data))
    return out
