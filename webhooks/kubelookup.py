"""The webhook's view of the cluster, read through the Kubernetes API (webhooks.lookup's
ClusterLookup protocol): a cache first when one is given, then a live read, so a runtime
created a moment ago is never refused because a cache has not seen it yet (a client that
creates a runtime and then a TrainJob must not have to retry)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainer.api import constants as c
from trainer.api.load import ObjectError, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.jobset.types import JobSet
from trainer.kube import resources as r
from trainer.kube.client import ApiClient
from trainer.kube.rest import APIError, Kube
from trainer.runtime.info import Runtime
from trainer.runtime.validation import not_found

Cache = Callable[[str, str, str], dict[str, Any] | None]
"""(kind, namespace, name) -> the cached wire object, or None on a miss."""

RESOURCES = {
    c.KIND_TRAINING_RUNTIME: r.TRAINING_RUNTIMES,
    c.KIND_CLUSTER_TRAINING_RUNTIME: r.CLUSTER_TRAINING_RUNTIMES,
}


class KubeLookup:
    """Reads runtimes, JobSets and PriorityClasses for admission."""

    #: Parsed runtimes kept (one per runtime; a runtime is parsed again only when its
    #: resourceVersion changes). The bound is far above any real number of runtimes.
    MAX_PARSED = 1024

    def __init__(self, api: ApiClient, cache: Cache | None = None) -> None:
        self.kube = Kube(api)
        self.cache = cache
        # (kind, namespace, name) -> (uid, resourceVersion, model). The build never changes a
        # runtime model, so one parse serves every review until the runtime changes.
        self._parsed: dict[tuple[str, str, str], tuple[str, str, Runtime]] = {}

    async def runtime(
        self, kind: str, namespace: str, name: str
    ) -> tuple[Runtime | None, str | None]:
        gvr = RESOURCES.get(kind)
        if gvr is None:
            return None, f"unsupported runtime kind {kind}"
        data = self.cache(kind, namespace, name) if self.cache is not None else None
        if data is None:
            data = await self.kube.get(gvr, namespace if gvr.namespaced else None, name)
            if data is None:
                return None, not_found(kind, name)
        key = (kind, namespace if kind == c.KIND_TRAINING_RUNTIME else "", name)
        meta = data.get("metadata") if isinstance(data, dict) else None
        uid = str(meta.get("uid") or "") if isinstance(meta, dict) else ""
        version = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        known = self._parsed.get(key)
        if version and known is not None and known[:2] == (uid, version):
            return known[2], None
        try:
            runtime = parse_object(data)
        except ObjectError as exc:
            return None, f"{kind} {name!r} cannot be read: {exc}"
        if not isinstance(runtime, TrainingRuntime | ClusterTrainingRuntime):
            return None, f"{kind} {name!r} is not a runtime"
        if version:
            if len(self._parsed) >= self.MAX_PARSED and key not in self._parsed:
                self._parsed.clear()
            self._parsed[key] = (uid, version, runtime)
        return runtime, None

    async def jobset(self, namespace: str, name: str) -> JobSet | None:
        data = await self.kube.get(r.JOBSETS, namespace, name)
        return None if data is None else JobSet.from_wire(data)

    async def priority_classes(self) -> frozenset[str] | None:
        try:
            items, _ = await self.kube.list(r.PRIORITY_CLASSES)
        except APIError as exc:
            if not exc.status:  # no answer: as any other unreachable server
                raise
            return None
        return frozenset(str(pc["metadata"]["name"]) for pc in items)
