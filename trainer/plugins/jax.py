"""The JAX plugin (upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins/jax):
multi-controller JAX env on the trainer step's ``node``
container. GPUs do not change ``JAX_NUM_PROCESSES`` (one process per node)."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.machinery.models.core import ContainerPort
from trainer.runtime import apply
from trainer.runtime.info import Info
from trainer.runtime.podsets import trainer_node_container


class JAXPlugin:
    name = "JAX"

    def enforce_ml_policy(self, info: Info) -> None:
        if info.ml_policy is None or info.ml_policy.jax is None:
            return
        found = trainer_node_container(info)
        if found is None:
            return
        node, count = found
        apply.upsert_env(
            node,
            [
                apply.env(c.ENV_JAX_NUM_PROCESSES, str(count)),
                apply.env_from_field(c.ENV_JAX_PROCESS_ID, c.FIELD_PATH_COMPLETION_INDEX),
                apply.env(
                    c.ENV_JAX_COORDINATOR_ADDRESS,
                    f"{info.first_endpoint()}:{c.CONTAINER_TRAINER_PORT}",
                ),
            ],
            fresh=True,
        )
        apply.upsert_port(node, ContainerPort(container_port=c.CONTAINER_TRAINER_PORT))
