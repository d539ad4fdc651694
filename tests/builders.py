"""Fixture builders for the objects tests make over and over: TrainJobs, training runtimes
and JobSets.

Each builder is a small keyword-only function returning the wire form (a plain dict, the
JSON a client would send), with defaults that make a valid object and an argument for each
field tests vary. The ``*_model`` variants parse the same dict into the pydantic model, for
tests that call the admission, runtime or plugin code directly. Anything without a named
argument goes through ``**spec`` (camelCase, as on the wire) and lands in ``spec`` as given::

    from tests import builders as b

    b.trainjob("demo", num_nodes=2)                   # POST body for a TrainJob
    b.trainjob_model(namespace="ns", suspend=True)    # a TrainJob model
    b.trainjob(runtime="rt", runtime_kind="ClusterTrainingRuntime", runtimePatches=[...])
    b.runtime_model(ml_policy={"numNodes": 1, "torch": {}})   # ClusterTrainingRuntime "torch"
    b.runtime(kind="TrainingRuntime", namespace="team")       # a namespaced runtime
    b.runtime(replicated_jobs=[b.replicated_job("node", containers=[b.container("node")])])
    b.jobset_model(active={"node": 1})                # a JobSet with one active Job

Defaults: a TrainJob is ``job`` in ``default`` referring to ``torch-distributed`` with no
kind (the API server defaults it to ClusterTrainingRuntime); ``namespace=None`` leaves the
namespace out (a client that posts to a namespaced URL). A runtime is the
ClusterTrainingRuntime ``torch`` with ``mlPolicy: {numNodes: 1}`` and one ``node`` job
labelled as the trainer step. Optional fields are left out unless given, so a builder call
makes exactly the object the test names and nothing a validator could trip on.
"""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSet


def _metadata(
    name: str,
    namespace: str | None,
    *,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return meta


# --- TrainJob ------------------------------------------------------------------------------------


def trainjob(
    name: str = "job",
    *,
    namespace: str | None = "default",
    runtime: str = "torch-distributed",
    runtime_kind: str | None = None,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    num_nodes: int | None = None,
    trainer: dict[str, Any] | None = None,
    suspend: bool | None = None,
    runtime_patches: list[dict[str, Any]] | None = None,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A TrainJob on the wire. ``num_nodes`` is ``spec.trainer.numNodes`` (first, before
    the rest of ``trainer``); ``spec`` entries are added after the named ones."""
    ref: dict[str, Any] = {"name": runtime}
    if runtime_kind is not None:
        ref["kind"] = runtime_kind
    body: dict[str, Any] = {"runtimeRef": ref}
    if num_nodes is not None or trainer is not None:
        nodes = {} if num_nodes is None else {"numNodes": num_nodes}
        body["trainer"] = {**nodes, **(trainer or {})}
    if suspend is not None:
        body["suspend"] = suspend
    if runtime_patches is not None:
        body["runtimePatches"] = runtime_patches
    body.update(spec)
    out: dict[str, Any] = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_TRAINJOB,
        "metadata": _metadata(name, namespace, uid=uid, labels=labels, annotations=annotations),
        "spec": body,
    }
    if status is not None:
        out["status"] = status
    return out


def trainjob_model(name: str = "job", **fields: Any) -> TrainJob:
    """:func:`trainjob` parsed into the model."""
    return TrainJob.from_wire(trainjob(name, **fields))


# --- runtimes ------------------------------------------------------------------------------------


def container(name: str = "node", image: str = "img", **fields: Any) -> dict[str, Any]:
    """A container: ``fields`` are added as given (``resources``, ``env``, ...)."""
    return {"name": name, "image": image, **fields}


def replicated_job(
    name: str = "node",
    *,
    ancestor: str | None = c.ANCESTOR_TRAINER,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    replicas: int | None = None,
    parallelism: int | None = None,
) -> dict[str, Any]:
    """One entry of ``replicatedJobs``: a Job template whose pod runs ``containers`` (one
    container named like the job by default), labelled with the ancestor step ``ancestor``
    (None: no label)."""
    pod: dict[str, Any] = {
        "containers": containers if containers is not None else [container(name)]
    }
    if init_containers is not None:
        pod["initContainers"] = init_containers
    job_spec: dict[str, Any] = {"template": {"spec": pod}}
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    template: dict[str, Any] = {"spec": job_spec}
    if ancestor is not None:
        template = {"metadata": {"labels": {c.LABEL_ANCESTOR: ancestor}}, **template}
    out: dict[str, Any] = {"name": name, "template": template}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def runtime(
    name: str = "torch",
    *,
    kind: str = c.KIND_CLUSTER_TRAINING_RUNTIME,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ml_policy: dict[str, Any] | None = None,
    replicated_jobs: list[dict[str, Any]] | None = None,
    template_annotations: dict[str, str] | None = None,
    pod_group_policy: dict[str, Any] | None = None,
    **jobset_spec: Any,
) -> dict[str, Any]:
    """A TrainingRuntime or ClusterTrainingRuntime on the wire. ``namespace`` applies to a
    TrainingRuntime only; ``jobset_spec`` entries go into ``spec.template.spec`` after
    ``replicatedJobs``."""
    jobs = replicated_jobs if replicated_jobs is not None else [replicated_job()]
    template: dict[str, Any] = {"spec": {"replicatedJobs": jobs, **jobset_spec}}
    if template_annotations is not None:
        template["metadata"] = {"annotations": template_annotations}
    spec: dict[str, Any] = {
        "mlPolicy": ml_policy if ml_policy is not None else {"numNodes": 1},
        "template": template,
    }
    if pod_group_policy is not None:
        spec["podGroupPolicy"] = pod_group_policy
    scope = namespace if kind == c.KIND_TRAINING_RUNTIME else None
    return {
        "apiVersion": c.API_VERSION,
        "kind": kind,
        "metadata": _metadata(name, scope, labels=labels, annotations=annotations),
        "spec": spec,
    }


def runtime_model(name: str = "torch", **fields: Any) -> TrainingRuntime | ClusterTrainingRuntime:
    """:func:`runtime` parsed into the model of its kind."""
    data = runtime(name, **fields)
    if data["kind"] == c.KIND_TRAINING_RUNTIME:
        return TrainingRuntime.from_wire(data)
    return ClusterTrainingRuntime.from_wire(data)


def cluster_runtime_model(name: str = "torch", **fields: Any) -> ClusterTrainingRuntime:
    """:func:`runtime` as a ClusterTrainingRuntime model."""
    return ClusterTrainingRuntime.from_wire(runtime(name, **fields))


# --- JobSet --------------------------------------------------------------------------------------


def replicated_jobs_status(active: dict[str, int]) -> list[dict[str, Any]]:
    """``status.replicatedJobsStatus``: each named job with ``active`` Jobs, no others."""
    return [
        {"name": n, "ready": 0, "succeeded": 0, "failed": 0, "active": a, "suspended": 0}
        for n, a in active.items()
    ]


def jobset(
    name: str = "job",
    *,
    namespace: str | None = "default",
    replicated_jobs: list[dict[str, Any]] | None = None,
    suspend: bool | None = None,
    active: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A JobSet on the wire. ``replicated_jobs`` and ``suspend`` make ``spec`` (left out
    when neither is given); ``active`` makes ``status.replicatedJobsStatus``."""
    out: dict[str, Any] = {
        "apiVersion": jsc.API_VERSION,
        "kind": jsc.KIND,
        "metadata": _metadata(name, namespace, labels=labels),
    }
    spec: dict[str, Any] = {}
    if suspend is not None:
        spec["suspend"] = suspend
    if replicated_jobs is not None:
        spec["replicatedJobs"] = replicated_jobs
    if spec:
        out["spec"] = spec
    if active is not None:
        out["status"] = {"replicatedJobsStatus": replicated_jobs_status(active)}
    return out


def jobset_model(name: str = "job", **fields: Any) -> JobSet:
    """:func:`jobset` parsed into the model."""
    return JobSet.from_wire(jobset(name, **fields))
