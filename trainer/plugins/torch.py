"""The Torch plugin and its TorchTune mode (upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins/torch).

For ``mlPolicy.torch`` runtimes: the trainer step's count comes from ``trainer.numNodes``
(set when the Info is assembled: :mod:`trainer.runtime.podsets`); container ``node`` gets the
torchrun rendezvous env (``PET_*``) and port 29500; envInjection targets get the same env; a
TrainJob whose command is exactly ``["tune", "run"]`` has its command rewritten into a full
TorchTune invocation for its model and recipe.

Beyond upstream, ``mlPolicy.torch.elasticPolicy`` makes the rendezvous elastic: ``PET_NNODES``
becomes ``<minNodes>:<maxNodes>`` (each defaulting to the node count), with
``PET_RDZV_BACKEND=c10d``, ``PET_RDZV_ENDPOINT=<node 0>:29500`` and, when set,
``PET_MAX_RESTARTS``; torchrun then keeps training while at least ``minNodes`` nodes are up.

Admission (Validate phase): the ``PET_*`` names are reserved (with ``elasticPolicy`` also
``PET_RDZV_BACKEND``, ``PET_RDZV_ENDPOINT``, ``PET_MAX_RESTARTS``); every envInjection target
must exist; the TorchTune rules (:func:`trainer.plugins.torchtune.validate`); beyond upstream,
an elastic range must be ordered and contain the node count the job starts with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import TorchElasticPolicy, Trainer, TrainJob
from trainer.machinery.errors import INVALID, FieldError
from trainer.machinery.models.core import Container, ContainerPort, EnvVar, PodSpec
from trainer.plugins import torchtune
from trainer.runtime import apply
from trainer.runtime.apply import find_container
from trainer.runtime.assemble import apply_trainer_env
from trainer.runtime.info import BuildError, Info, PodSet
from trainer.runtime.podsets import resources_per_node
from trainer.runtime.resources import cpu_count, gpu_count
from trainer.runtime.validation import ClusterView, Verdict, trainer_of

AUTO = "auto"


def resolve_num_proc_per_node(info: Info) -> int | str:
    """``trainer.numProcPerNode``, or "auto"; "auto" without GPUs becomes max(1, CPU count)
    (CPU rounded up). With GPUs it stays the literal "auto" for torchrun to resolve."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    value: int | str = AUTO
    if trainer is not None and isinstance(trainer.num_proc_per_node, int):
        value = trainer.num_proc_per_node
    if value == AUTO:
        resources = resources_per_node(info)
        if gpu_count(resources) == 0:
            value = max(1, cpu_count(resources))
    return value


def node_range(elastic: TorchElasticPolicy, nnodes: int) -> tuple[int, int]:
    """``(minNodes, maxNodes)``, each defaulting to the node count."""
    low = elastic.min_nodes if elastic.min_nodes is not None else nnodes
    high = elastic.max_nodes if elastic.max_nodes is not None else nnodes
    return low, high


def rendezvous_env(
    info: Info,
    nnodes: int,
    nproc: int | str,
    master: bool,
    elastic: TorchElasticPolicy | None = None,
) -> list[EnvVar]:
    nnodes_value = str(nnodes)
    if elastic is not None:
        low, high = node_range(elastic, nnodes)
        nnodes_value = f"{low}:{high}"
    envs: list[dict[str, Any]] = [
        {"name": c.ENV_PET_NNODES, "value": nnodes_value},
        {"name": c.ENV_PET_NPROC_PER_NODE, "value": str(nproc)},
        {"name": c.ENV_PET_NODE_RANK, "valueFrom": apply.field_ref(c.FIELD_PATH_COMPLETION_INDEX)},
    ]
    if master:
        envs += [
            {"name": c.ENV_PET_MASTER_ADDR, "value": info.first_endpoint()},
            {"name": c.ENV_PET_MASTER_PORT, "value": str(c.CONTAINER_TRAINER_PORT)},
        ]
    if elastic is not None:
        endpoint = f"{info.first_endpoint()}:{c.CONTAINER_TRAINER_PORT}"
        envs += [
            {"name": c.ENV_PET_RDZV_BACKEND, "value": c.RDZV_BACKEND_C10D},
            {"name": c.ENV_PET_RDZV_ENDPOINT, "value": endpoint},
        ]
        if elastic.max_restarts is not None:
            envs.append({"name": c.ENV_PET_MAX_RESTARTS, "value": str(elastic.max_restarts)})
    return apply.env_vars(envs)


def is_torchtune(trainer: Trainer | None) -> bool:
    return trainer is not None and trainer.command == list(torchtune.ENTRYPOINT)


PATH_RUNTIME_REF = "spec.runtimeRef"
PATH_NUM_NODES = "spec.trainer.numNodes"
PATH_ELASTIC_POLICY = "spec.mlPolicy.torch.elasticPolicy"


def _template_pod_spec(ps: PodSet) -> PodSpec | None:
    """The pod spec of ``ps`` without creating one (validation must not change the Info)."""
    job_spec = ps.job.template.spec
    return job_spec.template.spec if job_spec is not None else None


def _find_container(ps: PodSet, name: str) -> Container | None:
    """A regular container ``name``, else the init container of that name (envInjection's
    lookup order)."""
    pod = _template_pod_spec(ps)
    return find_container(pod, name) if pod is not None else None


def validate_env_injection(info: Info) -> list[FieldError]:
    """Every envInjection target must name a job of the runtime and, in it, a container
    (regular, then init): the build fails on a missing one, so admission says so first."""
    torch = info.ml_policy.torch if info.ml_policy else None
    targets = torch.env_injection.targets if torch and torch.env_injection else None
    errors: list[FieldError] = []
    ref_name = info.trainjob.spec.runtime_ref.name if info.trainjob.spec else ""
    for target in targets or []:
        ps = info.pod_set(target.job_name)
        for name in target.container_names:
            if ps is not None and _find_container(ps, name) is not None:
                continue
            message = (
                f'envInjection target podSet "{target.job_name}" container "{name}" '
                "not found in runtime template"
            )
            errors.append(FieldError(PATH_RUNTIME_REF, INVALID, message, ref_name))
    return errors


def _num_nodes(info: Info, trainer: Trainer) -> int:
    """The trainer node count the build will use: the TrainJob's, else the runtime's."""
    if trainer.num_nodes is not None:
        return trainer.num_nodes
    ps = info.trainer_pod_set()
    return ps.count if ps is not None else 1


def validate_torchtune(info: Info) -> list[FieldError]:
    """The TorchTune rules, for a trainer command of exactly ``["tune", "run"]``."""
    trainer = trainer_of(info)
    if info.trainjob.spec is None or trainer is None or not is_torchtune(trainer):
        return []
    return torchtune.validate(
        info, trainer, _num_nodes(info, trainer), resolve_num_proc_per_node(info)
    )


def validate_torch_elastic(info: Info) -> list[FieldError]:
    """Beyond upstream: an elastic range must be ordered, and the node count the job starts
    with must lie inside it (torchrun would wait forever below minNodes, and refuses nodes
    above maxNodes)."""
    torch = info.ml_policy.torch if info.ml_policy else None
    elastic = torch.elastic_policy if torch is not None else None
    if elastic is None:
        return []
    trainer = trainer_of(info)
    ps = info.trainer_pod_set()
    runtime_count = ps.count if ps is not None else 1
    count = trainer.num_nodes if trainer is not None and trainer.num_nodes is not None else None
    nodes = count if count is not None else runtime_count
    low, high = node_range(elastic, nodes)
    ref_name = info.trainjob.spec.runtime_ref.name if info.trainjob.spec else ""
    if low > high:
        return [
            FieldError(
                PATH_RUNTIME_REF,
                INVALID,
                f"runtime {PATH_ELASTIC_POLICY}: minNodes ({low}) must be less than or equal "
                f"to maxNodes ({high})",
                ref_name,
            )
        ]
    if low <= nodes <= high:
        return []
    message = (
        f"must be within the runtime's elastic range [{low}, {high}] "
        f"({PATH_ELASTIC_POLICY} minNodes..maxNodes)"
    )
    if count is not None:
        return [FieldError(PATH_NUM_NODES, INVALID, message, count)]
    return [
        FieldError(
            PATH_RUNTIME_REF,
            INVALID,
            f"the runtime's node count {nodes} (mlPolicy.numNodes) {message}",
            ref_name,
        )
    ]


class TorchPlugin:
    name = "Torch"

    def reserved_envs(self, info: Info) -> Sequence[str]:
        policy = info.ml_policy.torch if info.ml_policy else None
        if policy is None:
            return ()
        if policy.elastic_policy is not None:
            return (*c.TORCH_RESERVED_ENVS, *c.TORCH_ELASTIC_RESERVED_ENVS)
        return c.TORCH_RESERVED_ENVS

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        """envInjection targets exist, the TorchTune rules, and (beyond upstream) the elastic
        range; ``old`` is not consulted (upstream's validators read the new object only)."""
        if info.ml_policy is None or info.ml_policy.torch is None:
            return Verdict()
        errors = validate_env_injection(info) + validate_torchtune(info)
        return Verdict([], errors + validate_torch_elastic(info))

    def enforce_ml_policy(self, info: Info) -> None:
        policy = info.ml_policy.torch if info.ml_policy else None
        if policy is None:
            return
        trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
        ps = info.trainer_pod_set()  # its count has the TrainJob's numNodes (runtime.podsets)
        nnodes = ps.count if ps is not None else 1
        nproc = resolve_num_proc_per_node(info)
        elastic = policy.elastic_policy
        if ps is not None and trainer is not None:
            node = ps.container(c.CONTAINER_NODE)
            if node is not None:
                tune = is_torchtune(trainer)
                # The TrainJob's env first, then PET_* (upstream's Torch plugin; the others
                # get it after theirs, when the JobSet is built: apply_trainer_env).
                apply_trainer_env(info)
                apply.upsert_env(
                    node,
                    rendezvous_env(info, nnodes, nproc, master=not tune, elastic=elastic),
                    fresh=True,
                )
                apply.upsert_port(node, ContainerPort(container_port=c.CONTAINER_TRAINER_PORT))
                if tune:
                    node.command = torchtune.command(info, nnodes, nproc)
        targets = policy.env_injection.targets if policy.env_injection else None
        for target in targets or []:
            target_ps = info.pod_set(target.job_name)
            for name in target.container_names:
                ctr = target_ps.any_container(name) if target_ps is not None else None
                if ctr is None:
                    raise BuildError(
                        f'envInjection target podSet "{target.job_name}" container "{name}" '
                        "not found in runtime template"
                    )
                apply.upsert_env(
                    ctr,
                    rendezvous_env(info, nnodes, nproc, master=True, elastic=elastic),
                    fresh=True,
                )
