"""PlainML: the trainer step's node count for runtimes without torch, MPI or JAX (so also for
XGBoost and Flux, and for runtimes with no ML policy at all)."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.runtime.info import Info


def applies(info: Info) -> bool:
    policy = info.ml_policy
    return policy is None or not (policy.torch or policy.mpi or policy.jax)


def set_trainer_count(info: Info) -> None:
    """``trainer.numNodes`` (when set) becomes the trainer step's pod count."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    if trainer is None or trainer.num_nodes is None:
        return
    for ps in info.pod_sets:
        if ps.ancestor == c.ANCESTOR_TRAINER:
            ps.count = trainer.num_nodes


class PlainMLPlugin:
    name = "PlainML"

    def enforce_ml_policy(self, info: Info) -> None:
        if applies(info):
            set_trainer_count(info)
