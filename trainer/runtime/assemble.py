"""Merge a TrainJob onto its runtime: the :class:`~trainer.runtime.info.Info` every plugin
starts from (the first step of every build: docs/design.md, "The path of one TrainJob").

1. JobSet labels/annotations: the runtime template's, then each runtimePatch's, in order.
2. runtimePatches strategic-merged onto the runtime's JobSet spec, in order; the runtime's
   replicated-job order is kept.
3. One pod set per replicated job; count = parallelism (default 1), or ``mlPolicy.numNodes``
   (default 1) for the trainer step when there is an ML policy; clamped to at least 1. Then
   the TrainJob's ``trainer.numNodes`` by the ML policy's rule. Both rules are
   :mod:`trainer.runtime.podsets`'s, applied here and nowhere else.
4. ``trainer.resourcesPerNode`` merged into container ``node`` of the trainer step (only with
   an ML policy) and, for MPI with runLauncherAsNode, of the replicated job ``node``.
5. The TrainJob's trainer image/command/args replace the runtime's in container ``node`` of
   the trainer step; its env is upserted there (and into job ``node`` for MPI
   runLauncherAsNode).
6. Initializers: ``STORAGE_URI`` then the initializer env into the initializer container of
   the same name, and the secretRef as envFrom; a ``cache://`` dataset goes to this project's
   ``cache-initializer`` when the runtime has one.
"""

from __future__ import annotations

import marshal
import weakref
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from trainer.api import constants as c
from trainer.api.v1alpha1 import DatasetInitializer, ModelInitializer, TrainJob
from trainer.jobset.types import JobSetSpec, ReplicatedJob
from trainer.machinery.models.core import EnvFromSource, LocalObjectReference
from trainer.runtime import apply
from trainer.runtime.info import BuildError, Info, Observed, PodSet, Runtime
from trainer.runtime.merge import merge_string_maps, strategic_merge
from trainer.runtime.podsets import apply_num_nodes, runtime_count
from trainer.runtime.resources import merge_resources

CACHE_SCHEME = "cache://"


class PatchMergeError(BuildError):
    """The runtimePatches merged onto the runtime do not make a valid JobSet spec (for example
    a patch naming a job the runtime lacks adds a job without a template)."""


def ancestor_of(job: ReplicatedJob) -> str | None:
    meta = job.template.metadata
    return ((meta.labels if meta else None) or {}).get(c.LABEL_ANCESTOR)


_SPEC_WIRE: dict[int, tuple[weakref.ref[JobSetSpec], bytes]] = {}
"""Wire form of the runtime JobSet specs the build has seen (marshalled), by object identity.
An entry goes when its spec object does (the weak reference's callback), so an identity is
never mistaken for a later object's. It relies on what the build already promises: a runtime
model is never changed in place (runtimes come from the API server or a file, and a change is
a new object)."""


def _drop_spec_wire(key: int) -> Callable[[weakref.ref[JobSetSpec]], None]:
    def drop(_: weakref.ref[JobSetSpec]) -> None:
        _SPEC_WIRE.pop(key, None)

    return drop


def runtime_spec_wire(spec: JobSetSpec) -> dict[str, Any]:
    """A fresh copy of ``spec.to_wire()``: dumped once per spec object, then copied with
    ``marshal`` (exact for JSON data, a third of the cost of dumping the model again)."""
    key = id(spec)
    known = _SPEC_WIRE.get(key)
    if known is None or known[0]() is not spec:
        known = (weakref.ref(spec, _drop_spec_wire(key)), marshal.dumps(spec.to_wire()))
        _SPEC_WIRE[key] = known
    data: dict[str, Any] = marshal.loads(known[1])
    return data


def merged_spec(runtime: Runtime, trainjob: TrainJob) -> JobSetSpec:
    """The runtime's JobSet spec with every runtimePatch merged in, runtime job order kept."""
    if runtime.spec is None:
        raise BuildError(f"runtime {runtime_label(runtime)} has no spec")
    template = runtime.spec.template
    base: dict[str, Any] = runtime_spec_wire(template.spec) if template.spec is not None else {}
    order = [j.get("name") for j in base.get("replicatedJobs") or []]
    for patch in (trainjob.spec.runtime_patches if trainjob.spec else None) or []:
        rt = patch.training_runtime_spec
        if rt is None or rt.template is None or rt.template.spec is None:
            continue
        # base is ours (a fresh dump, then each merge's result): merge into it.
        base = strategic_merge(base, rt.template.spec.to_wire(), in_place=True)
    jobs = base.get("replicatedJobs")
    if jobs:
        rank = {name: i for i, name in enumerate(order)}
        base["replicatedJobs"] = sorted(jobs, key=lambda j: rank.get(j.get("name"), len(rank)))
    try:
        return JobSetSpec.from_wire(base)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise PatchMergeError(
            f"the runtimePatches do not merge into a valid JobSet spec of the runtime: {problems}"
        ) from None


def runtime_label(runtime: Runtime) -> str:
    name = runtime.metadata.name if runtime.metadata else None
    return f"{runtime.kind}/{name or '?'}"


def merged_metadata(runtime: Runtime, trainjob: TrainJob) -> tuple[dict[str, str], dict[str, str]]:
    meta = runtime.spec.template.metadata if runtime.spec else None
    labels = [meta.labels if meta else None]
    annotations = [meta.annotations if meta else None]
    for patch in (trainjob.spec.runtime_patches if trainjob.spec else None) or []:
        rt = patch.training_runtime_spec
        pmeta = rt.template.metadata if rt is not None and rt.template is not None else None
        if pmeta is not None:
            labels.append(pmeta.labels)
            annotations.append(pmeta.annotations)
    return merge_string_maps(*labels), merge_string_maps(*annotations)


def new_info(trainjob: TrainJob, runtime: Runtime, observed: Observed | None = None) -> Info:
    """The TrainJob merged onto the runtime, before any plugin ran."""
    if trainjob.spec is None:
        raise BuildError("TrainJob has no spec")
    spec = merged_spec(runtime, trainjob)
    labels, annotations = merged_metadata(runtime, trainjob)
    runtime_spec = runtime.spec
    assert runtime_spec is not None  # merged_spec checked it
    ml_policy = runtime_spec.ml_policy
    pod_sets: list[PodSet] = []
    for job in spec.replicated_jobs or []:
        ancestor = ancestor_of(job)
        pod_sets.append(PodSet(job.name, ancestor, runtime_count(job, ancestor, ml_policy), job))
    info = Info(
        trainjob=trainjob,
        runtime=runtime,
        ml_policy=ml_policy,
        pod_group_policy=runtime_spec.pod_group_policy,
        labels=labels,
        annotations=annotations,
        spec=spec,
        pod_sets=pod_sets,
        observed=observed or Observed(),
    )
    apply_num_nodes(info)
    _merge_resources_per_node(info)
    _apply_trainer(info)
    _apply_initializers(info)
    return info


def _run_launcher_as_node(info: Info) -> bool:
    mpi = info.ml_policy.mpi if info.ml_policy else None
    return bool(mpi and mpi.run_launcher_as_node)


def node_pod_sets(info: Info) -> list[PodSet]:
    """The trainer step's pod sets, plus job ``node`` for MPI with runLauncherAsNode."""
    targets = info.pod_sets_with_ancestor(c.ANCESTOR_TRAINER)
    if _run_launcher_as_node(info):
        node = info.pod_set(c.JOB_NODE)
        if node is not None and node not in targets:
            targets.append(node)
    return targets


def _merge_resources_per_node(info: Info) -> None:
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    if info.ml_policy is None or trainer is None or trainer.resources_per_node is None:
        return
    for ps in node_pod_sets(info):
        ctr = ps.container(c.CONTAINER_NODE)
        if ctr is not None:
            ctr.resources = merge_resources(ctr.resources, trainer.resources_per_node)


def _apply_trainer(info: Info) -> None:
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    if trainer is None:
        return
    for ps in info.pod_sets_with_ancestor(c.ANCESTOR_TRAINER):
        ctr = ps.container(c.CONTAINER_NODE)
        if ctr is None:
            continue
        if trainer.image is not None:
            ctr.image = trainer.image
        if trainer.command is not None:
            ctr.command = list(trainer.command)
        if trainer.args is not None:
            ctr.args = list(trainer.args)


def apply_trainer_env(info: Info) -> None:
    """Upsert ``spec.trainer.env`` into the trainer's ``node`` containers: a name already
    there keeps its place, a new one is appended. Upstream does it when it builds the
    JobSet, after every plugin's phase, so the TrainJob's env comes after what JAX, MPI or
    XGBoost inject (for XGBoost upstream's order varies from run to run: Go's map iteration
    orders its plugins); the Torch plugin upserts it itself before its ``PET_*`` env (side by
    side with upstream's controller, docs/side-by-side.md)."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    if trainer is None or not trainer.env:
        return
    for ps in node_pod_sets(info):
        ctr = ps.container(c.CONTAINER_NODE)
        if ctr is not None:
            apply.upsert_env(ctr, trainer.env)


def dataset_goes_to_cache(info: Info) -> bool:
    """A ``cache://`` dataset on a runtime with a cache-initializer step."""
    init = info.trainjob.spec.initializer if info.trainjob.spec else None
    uri = init.dataset.storage_uri if init is not None and init.dataset is not None else None
    return bool(
        uri
        and uri.startswith(CACHE_SCHEME)
        and info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER)
    )


def _apply_initializers(info: Info) -> None:
    init = info.trainjob.spec.initializer if info.trainjob.spec else None
    if init is None:
        return
    if init.dataset is not None:
        if dataset_goes_to_cache(info):
            _inject(info, c.ANCESTOR_CACHE_INITIALIZER, c.CONTAINER_CACHE_INITIALIZER, init.dataset)
        else:
            _inject(
                info, c.ANCESTOR_DATASET_INITIALIZER, c.CONTAINER_DATASET_INITIALIZER, init.dataset
            )
    if init.model is not None:
        _inject(info, c.ANCESTOR_MODEL_INITIALIZER, c.CONTAINER_MODEL_INITIALIZER, init.model)


def _inject(
    info: Info, ancestor: str, container: str, src: DatasetInitializer | ModelInitializer
) -> None:
    for ps in info.pod_sets_with_ancestor(ancestor):
        ctr = ps.container(container)
        if ctr is None:
            continue
        if src.storage_uri is not None:
            apply.upsert_env(ctr, [apply.env(c.ENV_STORAGE_URI, src.storage_uri)])
        if src.env:
            apply.upsert_env(ctr, src.env)
        if src.secret_ref is not None:
            apply.append_env_from(
                ctr, EnvFromSource(secret_ref=LocalObjectReference(name=src.secret_ref.name))
            )
