"""This project's data cache (spec: "This project's data cache", after section 2.14).

A runtime with a ``cache-initializer`` step (ancestor label ``cache-initializer``) runs an
Arrow Flight cache before training; the trainer step depends on it with status Ready. The
cache's address is injected into every container of the trainer step as
``DATA_CACHE_ENDPOINT=<job>-cache-initializer-0-0.<subdomain>:50051``. (Routing a
``cache://`` dataset's STORAGE_URI, env and secretRef to the cache container happens where
the TrainJob is merged onto the runtime: trainer.runtime.assemble.)
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.api import constants as c
from trainer.runtime import apply
from trainer.runtime.info import BuildContext, Info


def cache_endpoint(info: Info) -> str | None:
    caches = info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER)
    if not caches:
        return None
    return f"{info.name}-{caches[0].name}-0-0.{info.subdomain}:{c.DATA_CACHE_PORT}"


class DataCachePlugin:
    name = "DataCache"

    def reserved_envs(self, info: Info) -> Sequence[str]:
        """With a cache-initializer job, ``DATA_CACHE_ENDPOINT`` is the plugin's."""
        if info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER):
            return (c.ENV_DATA_CACHE_ENDPOINT,)
        return ()

    def enforce_pod_spec(self, info: Info, ctx: BuildContext) -> None:
        endpoint = cache_endpoint(info)
        if endpoint is None:
            return
        for ps in info.pod_sets_with_ancestor(c.ANCESTOR_TRAINER):
            for ctr in ps.pod_spec.containers or []:
                apply.upsert_env(ctr, [apply.env(c.ENV_DATA_CACHE_ENDPOINT, endpoint)])
