"""Convert one Training Operator v1 job into a TrainJob and the TrainingRuntime it runs on.

Pure: a v1 object (wire data) in, wire objects and warnings out; only the CLI reads and writes
files. Accepted: ``PyTorchJob``, ``TFJob``, ``MPIJob``, ``XGBoostJob``, ``PaddleJob`` and
``JAXJob`` of ``kubeflow.org/v1``, and ``MPIJob`` of ``kubeflow.org/v2beta1``. Anything else is a
:class:`ConvertError` naming the document and field.

Shape of the output
    A namespaced ``TrainingRuntime`` named like the job (in its namespace) holding one JobSet
    replicated job per v1 role, the role's pod template copied verbatim (images, commands,
    args, resources, volumes, node placement, tolerations, env), and a ``TrainJob`` of the same
    name referencing it. The framework's main container (``pytorch``, ``tensorflow``,
    ``xgboost``, ``paddle``, ``jax``; MPI: ``mainContainer`` or the first) is renamed ``node``,
    where the v2 policies inject their env. When a built-in ClusterTrainingRuntime renders the
    same pods (:mod:`trainer.convert.builtin`), :func:`convert` returns only a TrainJob
    referencing it instead.

How the v1 env is reproduced
    PyTorch and XGBoost (Master + Worker): when the Master's and the Workers' pod templates are
    equal, both become one replicated job ``node`` of ``1 + workers`` pods (the master is pod
    0), under ``mlPolicy.torch`` / ``mlPolicy.xgboost``; the v1 env is written into the
    runtime's ``node`` container: ``MASTER_ADDR`` = pod 0's DNS name, ``MASTER_PORT`` = the v1
    port (PyTorch 23456, XGBoost 9999, or the container's ``pytorchjob-port`` /
    ``xgboostjob-port``), ``WORLD_SIZE``, ``RANK`` = the completion index (downward API), plus
    ``WORKER_PORT`` / ``WORKER_ADDRS`` (XGBoost, more than one pod). ``PYTHONUNBUFFERED`` is
    v1's ``0`` (PyTorch on every pod, XGBoost). The torch policy adds torchrun's ``PET_*`` env
    (and, from ``elasticPolicy``, the elastic rendezvous).
    When the templates differ, Master and Worker stay separate jobs ``master`` and ``worker``
    without an ML policy; the worker's ``RANK`` (index + 1; PyTorch also ``PET_NODE_RANK``) is
    computed by a ``/bin/sh -c`` prefix in front of its command (reported as a warning).
    JAX: one job ``node`` under ``mlPolicy.jax`` plus v1's ``COORDINATOR_ADDRESS``,
    ``COORDINATOR_PORT`` (6666), ``NUM_PROCESSES``, ``PROCESS_ID``, ``PYTHONUNBUFFERED=1``.
    TensorFlow: jobs ``chief`` / ``master`` / ``worker`` / ``ps`` / ``evaluator`` under
    ``mlPolicy.tensorflow``, which writes ``TF_CONFIG`` per pod.
    Paddle: workers become ``node``, a Master a job ``master``, without ``mlPolicy.paddle``
    (its port 29500 and ``PADDLE_RANK`` are not v1's); v1's ``PADDLE_MASTER`` (worker 0, or
    master 0 in parameter-server mode, on the ``master`` port, default 36543),
    ``PADDLE_NNODES``, ``PADDLE_JOB_ID`` and ``PADDLE_SERVER_NUM`` / ``PADDLE_TRAINER_NUM``
    are written out. MPI: ``launcher`` and ``node`` under ``mlPolicy.mpi``.
    Default replica ``restartPolicy`` as v1: ``Never`` for TFJob, XGBoostJob, JAXJob and
    MPIJob (v2beta1: Launcher ``OnFailure``, Workers ``Never``), ``OnFailure`` for PyTorchJob
    and PaddleJob; it always replaces the pod template's.

runPolicy
    ``activeDeadlineSeconds`` -> TrainJob ``activeDeadlineSeconds``; ``backoffLimit`` ->
    JobSet ``failurePolicy.maxRestarts`` (each Job's ``backoffLimit`` 0: a failed pod restarts
    the gang); ``ttlSecondsAfterFinished`` -> the JobSet's; ``suspend`` and ``managedBy`` ->
    the TrainJob's; ``schedulingPolicy`` -> ``podGroupPolicy`` (Volcano when a pod template
    uses ``schedulerName: volcano``, else coscheduling; ``queue`` -> the JobSet annotation
    ``scheduling.volcano.sh/queue-name``; ``priorityClass`` -> pod ``priorityClassName``).
    Everything without an equivalent is a :class:`ConvertWarning` naming the field and what
    the converted job does instead.

Where each part lives
    This module is the entry point (:func:`convert`: the job's own runtime, or a built-in that
    renders the same pods). Reading the v1 document is :mod:`trainer.convert.v1job`, each
    framework's mapping a module of :mod:`trainer.convert.frameworks`, ``runPolicy``
    :mod:`trainer.convert.run_policy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.api import constants as c
from trainer.convert.builtin import try_builtin
from trainer.convert.frameworks import BUILDERS
from trainer.convert.run_policy import apply_run_policy
from trainer.convert.v1job import KINDS, Converted, ConvertError, Obj, V1Job

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# --- entry point ---------------------------------------------------------------------------------
RUNTIME_MODES = ("auto", "builtin", "own")


def _candidates(framework: str, builtins: Mapping[str, Mapping[str, Any]]) -> list[Obj]:
    """The built-ins labelled with the job's framework or with its ML policy (``mpi``: the
    DeepSpeed and MLX runtimes), ``<framework>-distributed`` first."""
    found = []
    for _, doc in sorted(builtins.items()):
        labels = (doc.get("metadata") or {}).get("labels") or {}
        policy = (doc.get("spec") or {}).get("mlPolicy") or {}
        if labels.get(c.LABEL_FRAMEWORK) == framework or framework in policy:
            found.append(dict(doc))
    preferred = f"{framework}-distributed"
    return sorted(found, key=lambda d: d["metadata"]["name"] != preferred)


def convert(
    data: Mapping[str, Any],
    label: str = "<input>",
    *,
    builtins: Mapping[str, Mapping[str, Any]] | None = None,
    runtime_mode: str = "auto",
) -> Converted:
    """Convert one v1 job document; :class:`ConvertError` when it is not one.

    ``builtins`` (name -> wire ClusterTrainingRuntime) are the built-in runtimes to try:
    ``runtime_mode`` ``auto`` references the first that fits (:mod:`trainer.convert.builtin`)
    and otherwise writes the job's own TrainingRuntime, ``builtin`` fails when none fits, and
    ``own`` always writes the job's own runtime.
    """
    if runtime_mode not in RUNTIME_MODES:
        raise ConvertError(
            f"runtime mode {runtime_mode!r} is not one of {', '.join(RUNTIME_MODES)}"
        )
    result = _convert_own(data, label)
    if runtime_mode == "own":
        result.info.append(f"uses its own TrainingRuntime ({runtime_mode} mode)")
        return result
    if builtins is None and runtime_mode == "auto":
        result.info.append("uses its own TrainingRuntime (no built-in runtimes to compare with)")
        return result
    runtime, trainjob = result.objects
    reasons: list[str] = []
    candidates = _candidates(KINDS[result.kind].framework, builtins or {})
    for builtin in candidates:
        fit = try_builtin(trainjob, runtime, builtin)
        if fit.trainjob is not None:
            result.objects = [fit.trainjob]
            result.runtime = f"{c.KIND_CLUSTER_TRAINING_RUNTIME}/{fit.runtime}"
            result.info.append(
                f"uses the built-in ClusterTrainingRuntime {fit.runtime}: it renders the same "
                "pods as the job's own runtime would"
            )
            return result
        reasons.append(fit.reason or "")
    if not candidates:
        reasons.append(
            f"no built-in runtime is for {KINDS[result.kind].framework} (label "
            f"{c.LABEL_FRAMEWORK} or mlPolicy.{KINDS[result.kind].framework})"
        )
    if runtime_mode == "builtin":
        raise ConvertError(
            f"{label}: {result.kind}/{result.name}: no built-in ClusterTrainingRuntime fits "
            f"(--runtime-mode builtin): {reasons[0]}"
        )
    result.info.append(f"uses its own TrainingRuntime: {reasons[0]}")
    return result


def _convert_own(data: Mapping[str, Any], label: str) -> Converted:
    """The job converted onto its own TrainingRuntime."""
    if not isinstance(data, Mapping):
        raise ConvertError(f"{label}: not an object")
    job = V1Job(data, label)
    plan = BUILDERS[job.kind](job)

    meta: Obj = {"name": job.name}
    if job.namespace:
        meta["namespace"] = job.namespace
    trainjob_meta = dict(meta)
    labels = job.meta.get("labels")
    if isinstance(labels, Mapping) and labels:
        trainjob_meta["labels"] = dict(labels)
    annotations = {
        k: v for k, v in (job.meta.get("annotations") or {}).items() if k != LAST_APPLIED
    }
    if annotations:
        trainjob_meta["annotations"] = annotations

    trainjob_spec: Obj = {
        "runtimeRef": {
            "apiGroup": c.GROUP,
            "kind": c.KIND_TRAINING_RUNTIME,
            "name": job.name,
        }
    }
    jobset_spec: Obj = {}
    js_meta: Obj = {}
    pod_group = apply_run_policy(
        job, plan, trainjob_spec=trainjob_spec, jobset_spec=jobset_spec, js_meta=js_meta
    )
    for rjob in plan.jobs:
        deps = plan.depends_on.get(rjob["name"])
        if deps:
            rjob["dependsOn"] = deps
    if plan.success_policy is not None:
        jobset_spec["successPolicy"] = plan.success_policy
    jobset_spec["replicatedJobs"] = plan.jobs
    if plan.trainer:
        trainjob_spec["trainer"] = plan.trainer

    runtime_spec: Obj = {}
    if plan.ml_policy is not None:
        runtime_spec["mlPolicy"] = plan.ml_policy
    if pod_group:
        runtime_spec["podGroupPolicy"] = pod_group
    template: Obj = {}
    if js_meta:
        template["metadata"] = js_meta
    template["spec"] = jobset_spec
    runtime_spec["template"] = template
    runtime = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_TRAINING_RUNTIME,
        "metadata": {
            **meta,
            "labels": {c.LABEL_FRAMEWORK: job.info.framework},
            "annotations": {c.ANNOTATION_CONVERTED_FROM: f"{job.api_version}/{job.kind}"},
        },
        "spec": runtime_spec,
    }
    trainjob = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_TRAINJOB,
        "metadata": trainjob_meta,
        "spec": trainjob_spec,
    }
    return Converted(
        job.kind,
        job.name,
        job.namespace,
        [runtime, trainjob],
        job.warnings,
        runtime=f"{c.KIND_TRAINING_RUNTIME}/{job.name}",
    )
