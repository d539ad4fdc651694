"""This project's data cache: a working redesign of the data cache runtime, which upstream
v2.3 ships broken (README.md, "Status and parity with upstream").

A runtime with a ``cache-initializer`` step (ancestor label ``cache-initializer``) runs an
Arrow Flight cache before training; the trainer step depends on it with status Ready. The
cache's address is injected into every container of the trainer step as
``DATA_CACHE_ENDPOINT=<job>-cache-initializer-0-0.<subdomain>:50051``; the cache's own
containers get ``DATA_CACHE_PEERS``, every cache pod's ``host:50051`` in index order, so pod 0
can point readers at the pods holding each part (docs/data-cache.md). (Routing a
``cache://`` dataset's STORAGE_URI, env and secretRef to the cache container happens where
the TrainJob is merged onto the runtime: trainer.runtime.assemble.)
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.api import constants as c
from trainer.api.jobset import JobSetSpec, ReplicatedJob
from trainer.runtime import apply
from trainer.runtime.assemble import ancestor_of
from trainer.runtime.info import BuildContext, Info, Runtime
from trainer.runtime.validation import Verdict, runtime_jobs, runtime_jobset_spec, runtime_name


def cache_endpoint(info: Info) -> str | None:
    caches = info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER)
    if not caches:
        return None
    return f"{info.name}-{caches[0].name}-0-0.{info.subdomain}:{c.DATA_CACHE_PORT}"


def cache_peers(info: Info) -> str | None:
    """Every cache pod's ``host:port``, comma-separated in index order."""
    caches = info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER)
    if not caches:
        return None
    hosts = caches[0].endpoints(info.name, info.subdomain)
    return ",".join(f"{host}:{c.DATA_CACHE_PORT}" for host in hosts)


def _completes_with_training(spec: JobSetSpec, jobs: list[ReplicatedJob]) -> bool:
    """Whether the JobSet completes once the trainer jobs succeed while the cache still runs.

    JobSet's success policy targets the listed jobs, or every job when the list is empty (and
    ``All`` over every job when there is no policy). ``All`` needs every target to succeed, so
    no cache-initializer job may be a target; ``Any`` needs one, so a trainer job must be one.
    """
    policy = spec.success_policy
    operator = policy.operator if policy is not None else "All"
    targets = set((policy.target_replicated_jobs if policy is not None else None) or [])
    if not targets:
        targets = {job.name for job in jobs}
    trainers = {job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_TRAINER}
    caches = {job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_CACHE_INITIALIZER}
    if not targets & trainers:
        return False
    return operator == "Any" or not targets & caches


def cache_warnings(runtime: Runtime) -> list[str]:
    """Beyond upstream: a cache that never completes must not hold the TrainJob open."""
    spec = runtime_jobset_spec(runtime)
    jobs = runtime_jobs(runtime)
    caches = [job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_CACHE_INITIALIZER]
    if spec is None or not caches or _completes_with_training(spec, jobs):
        return []
    trainers = [job.name for job in jobs if ancestor_of(job) == c.ANCESTOR_TRAINER]
    suggestion = trainers[0] if trainers else c.JOB_NODE
    return [
        f'{runtime.kind} "{runtime_name(runtime)}" has the data cache job "{caches[0]}", but '
        "spec.template.spec.successPolicy does not target the trainer job alone: the cache "
        "keeps serving until the JobSet is finished, so a TrainJob on this runtime would never "
        "complete while the cache runs. Set successPolicy to "
        f"{{operator: All, targetReplicatedJobs: [{suggestion}]}}"
    ]


class DataCachePlugin:
    name = "DataCache"

    def validate_runtime(self, runtime: Runtime, old: Runtime | None) -> Verdict:
        return Verdict(cache_warnings(runtime))

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
        peers = cache_peers(info)
        for ps in info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER)[:1]:
            cache = ps.container(c.CONTAINER_CACHE_INITIALIZER)
            if cache is not None and peers is not None:
                apply.upsert_env(cache, [apply.env(c.ENV_DATA_CACHE_PEERS, peers)])
