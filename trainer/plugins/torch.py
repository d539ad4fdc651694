"""The Torch plugin (spec 2.5) and its TorchTune mode (2.6).

For ``mlPolicy.torch`` runtimes: the trainer step's count comes from ``trainer.numNodes``;
container ``node`` gets the torchrun rendezvous env (``PET_*``) and port 29500; envInjection
targets get the same env; a TrainJob whose command is exactly ``["tune", "run"]`` has its
command rewritten into a full TorchTune invocation for its model and recipe.

Beyond upstream, ``mlPolicy.torch.elasticPolicy`` makes the rendezvous elastic: ``PET_NNODES``
becomes ``<minNodes>:<maxNodes>`` (each defaulting to the node count), with
``PET_RDZV_BACKEND=c10d``, ``PET_RDZV_ENDPOINT=<node 0>:29500`` and, when set,
``PET_MAX_RESTARTS``; torchrun then keeps training while at least ``minNodes`` nodes are up.
"""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.api.core import ContainerPort, EnvVar
from trainer.api.v1alpha1 import TorchElasticPolicy, Trainer
from trainer.plugins import torchtune
from trainer.plugins.common import runtime_resources_per_node
from trainer.runtime import apply
from trainer.runtime.info import BuildError, Info
from trainer.runtime.resources import cpu_count, gpu_count

AUTO = "auto"


def resolve_num_proc_per_node(info: Info) -> int | str:
    """``trainer.numProcPerNode``, or "auto"; "auto" without GPUs becomes max(1, CPU count)
    (CPU rounded up). With GPUs it stays the literal "auto" for torchrun to resolve."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    value: int | str = AUTO
    if trainer is not None and isinstance(trainer.num_proc_per_node, int):
        value = trainer.num_proc_per_node
    if value == AUTO:
        resources = runtime_resources_per_node(info)
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


class TorchPlugin:
    name = "Torch"

    def enforce_ml_policy(self, info: Info) -> None:
        policy = info.ml_policy.torch if info.ml_policy else None
        if policy is None:
            return
        trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
        ps = info.trainer_pod_set()
        if ps is not None and trainer is not None and trainer.num_nodes is not None:
            ps.count = trainer.num_nodes
        nnodes = ps.count if ps is not None else 1
        nproc = resolve_num_proc_per_node(info)
        elastic = policy.elastic_policy
        if ps is not None and trainer is not None:
            node = ps.container(c.CONTAINER_NODE)
            if node is not None:
                tune = is_torchtune(trainer)
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
