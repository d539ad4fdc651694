"""The XGBoost plugin (upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins/xgboost):
Rabit/collective tracker env on the trainer step's ``node``
container. The node count comes from ``trainer.numNodes``, set when the Info is assembled
(:mod:`trainer.runtime.podsets`).

Admission: each ``DMLC_*`` name the plugin injects is Forbidden in ``spec.trainer.env``, at
its own index (upstream's format, unlike the other policies' one reserved-env error)."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.machinery.errors import FORBIDDEN, FieldError
from trainer.machinery.models.core import ContainerPort
from trainer.runtime import apply
from trainer.runtime.info import Info
from trainer.runtime.podsets import resources_per_node, trainer_node_container
from trainer.runtime.resources import gpu_count
from trainer.runtime.validation import PATH_TRAINER_ENV, ClusterView, Verdict, trainer_of


def workers_per_node(info: Info) -> int:
    """One worker per GPU, or one per node without GPUs."""
    return gpu_count(resources_per_node(info)) or 1


class XGBoostPlugin:
    name = "XGBoost"

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        trainer = trainer_of(info)
        if info.ml_policy is None or info.ml_policy.xgboost is None or trainer is None:
            return Verdict()
        errors = [
            FieldError(
                f"{PATH_TRAINER_ENV}[{i}]",
                FORBIDDEN,
                f"{env.name} is reserved for the XGBoost runtime",
            )
            for i, env in enumerate(trainer.env or [])
            if env.name in c.XGBOOST_RESERVED_ENVS
        ]
        return Verdict([], errors)

    def enforce_ml_policy(self, info: Info) -> None:
        if info.ml_policy is None or info.ml_policy.xgboost is None:
            return
        found = trainer_node_container(info)
        if found is None:
            return
        node, count = found
        apply.upsert_env(
            node,
            [
                apply.env(c.ENV_DMLC_TRACKER_URI, info.first_endpoint()),
                apply.env(c.ENV_DMLC_TRACKER_PORT, str(c.CONTAINER_TRAINER_PORT)),
                apply.env_from_field(c.ENV_DMLC_TASK_ID, c.FIELD_PATH_COMPLETION_INDEX),
                apply.env(c.ENV_DMLC_NUM_WORKER, str(count * workers_per_node(info))),
            ],
            fresh=True,
        )
        apply.upsert_port(node, ContainerPort(container_port=c.CONTAINER_TRAINER_PORT))
