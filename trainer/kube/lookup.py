"""The webhook's view of the cluster, read through the Kubernetes API (webhooks.lookup's
ClusterLookup protocol): a cache first when one is given, then a live read, so a runtime
created a moment ago is never refused because a cache has not seen it yet (a client that
creates a runtime and then a TrainJob must not have to retry)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

from trainer.api import constants as c
from trainer.api import jobset_contract as jsc
from trainer.api.jobset import JobSet
from trainer.api.load import ObjectError, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.runtime.info import Runtime
from trainer.runtime.validation import not_found

Cache = Callable[[str, str, str], dict[str, Any] | None]
"""(kind, namespace, name) -> the cached wire object, or None on a miss."""

PLURALS = {
    c.KIND_TRAINING_RUNTIME: c.PLURAL_TRAINING_RUNTIMES,
    c.KIND_CLUSTER_TRAINING_RUNTIME: c.PLURAL_CLUSTER_TRAINING_RUNTIMES,
}


class KubeLookup:
    """Reads runtimes, JobSets and PriorityClasses for admission."""

    #: Parsed runtimes kept (one per runtime; a runtime is parsed again only when its
    #: resourceVersion changes). The bound is far above any real number of runtimes.
    MAX_PARSED = 1024

    def __init__(self, api: ApiClient, cache: Cache | None = None) -> None:
        self.api = api
        self.cache = cache
        self.custom = client.CustomObjectsApi(api)
        # (kind, namespace, name) -> (uid, resourceVersion, model). The build never changes a
        # runtime model, so one parse serves every review until the runtime changes.
        self._parsed: dict[tuple[str, str, str], tuple[str, str, Runtime]] = {}

    async def runtime(
        self, kind: str, namespace: str, name: str
    ) -> tuple[Runtime | None, str | None]:
        plural = PLURALS.get(kind)
        if plural is None:
            return None, f"unsupported runtime kind {kind}"
        data = self.cache(kind, namespace, name) if self.cache is not None else None
        if data is None:
            try:
                if kind == c.KIND_TRAINING_RUNTIME:
                    data = await self.custom.get_namespaced_custom_object(
                        c.GROUP, c.VERSION, namespace, plural, name
                    )
                else:
                    data = await self.custom.get_cluster_custom_object(
                        c.GROUP, c.VERSION, plural, name
                    )
            except client.ApiException as exc:
                if exc.status == 404:
                    return None, not_found(kind, name)
                raise
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
        try:
            data = await self.custom.get_namespaced_custom_object(
                jsc.GROUP, jsc.VERSION, namespace, jsc.PLURAL, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return JobSet.from_wire(data)

    async def priority_classes(self) -> frozenset[str] | None:
        try:
            listing = await client.SchedulingV1Api(self.api).list_priority_class()
        except client.ApiException:
            return None
        return frozenset(pc.metadata.name for pc in listing.items)
