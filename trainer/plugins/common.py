"""Helpers several plugins share."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.api.core import Container, ResourceRequirements
from trainer.runtime.info import Info


def runtime_resources_per_node(info: Info) -> ResourceRequirements | None:
    """Resources of container ``node`` of the job named ``node`` or of the trainer step; the
    TrainJob's ``resourcesPerNode``, when set, replaces them wholesale (for counting GPUs and
    CPUs only: the pod itself gets the merge of both)."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    if trainer is not None and trainer.resources_per_node is not None:
        return trainer.resources_per_node
    for ps in info.pod_sets:
        if ps.name == c.JOB_NODE or ps.ancestor == c.ANCESTOR_TRAINER:
            ctr = ps.container(c.CONTAINER_NODE)
            if ctr is not None:
                return ctr.resources
    return None


def trainer_node_container(info: Info) -> tuple[Container, int] | None:
    """Container ``node`` of the trainer step and the step's pod count, when the TrainJob has
    a ``spec.trainer`` (framework env and ports are injected only then)."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    ps = info.trainer_pod_set()
    if ps is None or trainer is None:
        return None
    node = ps.container(c.CONTAINER_NODE)
    return (node, ps.count) if node is not None else None
