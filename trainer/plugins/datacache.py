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

The credential (docs/data-cache.md, "Security"), on the pattern of the MPI plugin's SSH key:
  - Build: Secret ``<job>-data-cache-auth`` (Opaque, immutable, owned by the TrainJob) with
    key ``credential``, made from ``BuildContext.credential_gen`` only when none is observed,
    so an existing credential is reused, never rotated under running pods;
  - EnforcePodSpec: the Secret as volume ``data-cache-auth`` (``defaultMode`` 0444, read-only)
    at ``/var/run/secrets/trainer.kubeflow.org/data-cache`` in the cache-initializer container
    and every trainer container, with ``DATA_CACHE_CREDENTIAL_FILE`` naming the file;
  - Watch: that Secret (by the TrainJob-name label, events by owner).
Runtimes without a cache-initializer job get none of it.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSetSpec, ReplicatedJob
from trainer.machinery.models.core import (
    Container,
    KeyToPath,
    SecretVolumeSource,
    Volume,
    VolumeMount,
)
from trainer.runtime import apply
from trainer.runtime.assemble import ancestor_of
from trainer.runtime.info import BuildContext, BuildError, Info, Runtime
from trainer.runtime.objects import object_meta
from trainer.runtime.validation import Verdict, runtime_jobs, runtime_jobset_spec, runtime_name
from trainer.runtime.watch import SECRETS, ByOwner, Obj, Store, Watch

VOLUME_AUTH = "data-cache-auth"
AUTH_MOUNT_PATH = "/var/run/secrets/trainer.kubeflow.org/data-cache"
CREDENTIAL_KEY = "credential"
CREDENTIAL_FILE = f"{AUTH_MOUNT_PATH}/{CREDENTIAL_KEY}"
# Read-only for every user of the container: the cache image runs as 65532 without an
# fsGroup, and a Secret volume's files belong to root (docs/data-cache.md, "Security").
AUTH_MODE = 0o444


def auth_secret_name(trainjob_name: str) -> str:
    return f"{trainjob_name}{c.DATA_CACHE_AUTH_SUFFIX}"


def cache_endpoint(info: Info) -> str | None:
    caches = info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER)
    if not caches:
        return None
    host = jsc.pod_dns_name(info.name, caches[0].name, 0, 0, info.subdomain)
    return f"{host}:{c.DATA_CACHE_PORT}"


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


def _auth_volume(info: Info) -> Volume:
    return Volume(
        name=VOLUME_AUTH,
        secret=SecretVolumeSource(
            secret_name=auth_secret_name(info.name),
            default_mode=AUTH_MODE,
            items=[KeyToPath(key=CREDENTIAL_KEY, path=CREDENTIAL_KEY)],
        ),
    )


def _mount_credential(ctr: Container) -> None:
    apply.upsert_volume_mount(
        ctr, VolumeMount(name=VOLUME_AUTH, mount_path=AUTH_MOUNT_PATH, read_only=True)
    )
    apply.upsert_env(ctr, [apply.env(c.ENV_DATA_CACHE_CREDENTIAL_FILE, CREDENTIAL_FILE)])


def _auth_secret(store: Store, trainjob: TrainJob, runtime: Runtime) -> dict[str, Obj]:
    meta = trainjob.metadata
    name = auth_secret_name((meta.name if meta else None) or "")
    found = store.get((meta.namespace if meta else None) or "default", name)
    return {name: found} if found is not None else {}


AUTH_WATCH = Watch(
    "data-cache-auth",
    SECRETS,
    ByOwner(),
    _auth_secret,
    into="secrets",
    label_selector=c.LABEL_TRAINJOB_NAME,
)
"""The credential Secret, among the Secrets the builds create (they carry the TrainJob-name
label)."""


class DataCachePlugin:
    name = "DataCache"

    def watches(self, ctx: BuildContext) -> Sequence[Watch]:
        return [AUTH_WATCH]

    def validate_runtime(self, runtime: Runtime, old: Runtime | None) -> Verdict:
        return Verdict(cache_warnings(runtime))

    def reserved_envs(self, info: Info) -> Sequence[str]:
        """With a cache-initializer job, ``DATA_CACHE_ENDPOINT`` and
        ``DATA_CACHE_CREDENTIAL_FILE`` are the plugin's."""
        if info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER):
            return (c.ENV_DATA_CACHE_ENDPOINT, c.ENV_DATA_CACHE_CREDENTIAL_FILE)
        return ()

    def enforce_pod_spec(self, info: Info, ctx: BuildContext) -> None:
        endpoint = cache_endpoint(info)
        if endpoint is None:
            return
        for ps in info.pod_sets_with_ancestor(c.ANCESTOR_TRAINER):
            containers = ps.pod_spec.containers or []
            for ctr in containers:
                apply.upsert_env(ctr, [apply.env(c.ENV_DATA_CACHE_ENDPOINT, endpoint)])
                _mount_credential(ctr)
            if containers:
                apply.upsert_volume(ps.pod_spec, _auth_volume(info))
        peers = cache_peers(info)
        for ps in info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER)[:1]:
            cache = ps.container(c.CONTAINER_CACHE_INITIALIZER)
            if cache is not None and peers is not None:
                apply.upsert_env(cache, [apply.env(c.ENV_DATA_CACHE_PEERS, peers)])
            if cache is not None:
                _mount_credential(cache)
                apply.upsert_volume(ps.pod_spec, _auth_volume(info))

    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        """The credential Secret, unless one is observed (an existing one is reused)."""
        if not info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER) or not ctx.objects:
            return []
        name = auth_secret_name(info.name)
        if name in info.observed.secrets:
            return []
        if ctx.credential_gen is None:
            raise BuildError("the data cache needs a credential generator")
        credential = ctx.credential_gen().encode("ascii")
        return [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": object_meta(info.trainjob, name),
                "type": "Opaque",
                "immutable": True,
                "data": {CREDENTIAL_KEY: base64.b64encode(credential).decode("ascii")},
            }
        ]
