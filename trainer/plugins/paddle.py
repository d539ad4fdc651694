"""The PaddlePaddle plugin (beyond upstream: ``mlPolicy.paddle``): the collective env that
``python -m paddle.distributed.launch`` reads, on the trainer step's ``node`` container.

``PADDLE_MASTER`` = the first trainer pod's DNS name and port 29500 (the launcher's rendezvous
on node 0), ``PADDLE_NNODES`` = the trainer pod count, ``PADDLE_RANK`` = the pod's completion
index (downward API), ``PADDLE_JOB_ID`` = the TrainJob name. The node count itself comes from
``trainer.numNodes``, set when the Info is assembled (:mod:`trainer.runtime.podsets`).
Injected whether or not the TrainJob has a ``spec.trainer`` block.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.api import constants as c
from trainer.machinery.models.core import ContainerPort
from trainer.runtime import apply
from trainer.runtime.info import Info


class PaddlePlugin:
    name = "Paddle"

    def reserved_envs(self, info: Info) -> Sequence[str]:
        """Beyond upstream: the TrainJob may not set the env this plugin writes."""
        if info.ml_policy is None or info.ml_policy.paddle is None:
            return ()
        return c.PADDLE_RESERVED_ENVS

    def enforce_ml_policy(self, info: Info) -> None:
        if info.ml_policy is None or info.ml_policy.paddle is None:
            return
        ps = info.trainer_pod_set()
        node = ps.container(c.CONTAINER_NODE) if ps is not None else None
        if ps is None or node is None:
            return
        endpoints = ps.endpoints(info.name, info.subdomain)
        master = endpoints[0] if endpoints else info.first_endpoint(ps.name)
        apply.upsert_env(
            node,
            [
                apply.env(c.ENV_PADDLE_MASTER, f"{master}:{c.CONTAINER_TRAINER_PORT}"),
                apply.env(c.ENV_PADDLE_NNODES, str(ps.count)),
                apply.env_from_field(c.ENV_PADDLE_RANK, c.FIELD_PATH_COMPLETION_INDEX),
                apply.env(c.ENV_PADDLE_JOB_ID, info.name),
            ],
            fresh=True,
        )
        apply.upsert_port(node, ContainerPort(container_port=c.CONTAINER_TRAINER_PORT))
