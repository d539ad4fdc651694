"""The TensorFlow plugin (beyond upstream: ``mlPolicy.tensorflow``): ``TF_CONFIG`` for
MultiWorkerMirroredStrategy and ParameterServerStrategy.

Roles come from the replicated jobs: a job named ``chief``, ``master``, ``ps`` or ``evaluator``
has that task type; a job named ``worker`` and the trainer step (``node`` in the built-in
runtime) are workers. Other jobs (initializers) get nothing. The cluster spec lists every pod
of every role except the evaluator (TensorFlow keeps the evaluator out of the cluster), each as
``<jobset>-<rjob>-<jobidx>-<podidx>.<subdomain>:29500``, role by role in pod-index order.

All pods of one replicated job share a template, so the task index cannot be written into it.
Each role's container gets ``TF_TASK_INDEX`` from the downward API (the pod's completion index;
for a job of one pod per replica, the JobSet job index) followed by ``TF_CONFIG``, whose
``task.index`` is the dependent reference ``$(TF_TASK_INDEX)``: the kubelet expands it when
the container starts, so every pod sees ``{"cluster": {...}, "task": {"type": "worker",
"index": 2}}`` with its own index. A job with several replicas *and* several pods per replica
has no single downward-API index and is a build error.

The env goes into container ``node`` of each role's pods, or the first container when a role's
pods have no ``node`` container; port 29500 is added to it. Unlike upstream's plugins, the env
is injected whether or not the TrainJob has a ``spec.trainer`` block.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from trainer.api import constants as c
from trainer.machinery.models.core import Container, ContainerPort
from trainer.runtime import apply
from trainer.runtime.info import BuildError, Info, PodSet

NAMED_ROLES = {
    c.TF_ROLE_CHIEF: c.TF_ROLE_CHIEF,
    c.TF_ROLE_MASTER: c.TF_ROLE_MASTER,
    c.TF_ROLE_PS: c.TF_ROLE_PS,
    c.TF_ROLE_EVALUATOR: c.TF_ROLE_EVALUATOR,
    c.TF_ROLE_WORKER: c.TF_ROLE_WORKER,
}
CLUSTER_ORDER = (c.TF_ROLE_CHIEF, c.TF_ROLE_MASTER, c.TF_ROLE_WORKER, c.TF_ROLE_PS)
"""Task types in the cluster spec, in this order; the evaluator is never in it."""


def role_of(ps: PodSet) -> str | None:
    """The TF task type of a pod set, or None when it takes no part."""
    if ps.name in NAMED_ROLES:
        return NAMED_ROLES[ps.name]
    if ps.ancestor == c.ANCESTOR_TRAINER:
        return c.TF_ROLE_WORKER
    return None


def role_pod_sets(info: Info) -> list[tuple[str, PodSet]]:
    return [(role, ps) for ps in info.pod_sets if (role := role_of(ps)) is not None]


def cluster_spec(info: Info) -> dict[str, list[str]]:
    """``{"chief": [...], "worker": [...], "ps": [...]}``: host:port of every pod per task
    type (roles without pods are left out)."""
    hosts: dict[str, list[str]] = {}
    for role, ps in role_pod_sets(info):
        if role == c.TF_ROLE_EVALUATOR:
            continue
        port = c.CONTAINER_TRAINER_PORT
        hosts.setdefault(role, []).extend(
            f"{host}:{port}" for host in ps.endpoints(info.name, info.subdomain)
        )
    return {role: hosts[role] for role in CLUSTER_ORDER if hosts.get(role)}


def index_field(ps: PodSet) -> str:
    """The downward-API field holding a pod's index within its role."""
    if ps.replicas <= 1:
        return c.FIELD_PATH_COMPLETION_INDEX
    if ps.count == 1:
        return c.FIELD_PATH_JOB_INDEX
    raise BuildError(
        f"tensorflow policy: replicatedJob {ps.name!r} has {ps.replicas} replicas of "
        f"{ps.count} pods; a TensorFlow role needs replicas 1 (or 1 pod per replica) so each "
        "pod's task index comes from the downward API"
    )


def tf_config_template(cluster: dict[str, list[str]], role: str) -> str:
    """TF_CONFIG with ``$(TF_TASK_INDEX)`` where the index goes (a bare JSON number once the
    kubelet expands it). ``$`` in the cluster spec is escaped as ``$$``."""
    cluster_json = json.dumps(cluster, separators=(",", ":")).replace("$", "$$")
    task = f'{{"type":{json.dumps(role)},"index":$({c.ENV_TF_TASK_INDEX})}}'
    return f'{{"cluster":{cluster_json},"task":{task}}}'


def role_container(ps: PodSet) -> Container | None:
    node = ps.container(c.CONTAINER_NODE)
    if node is not None:
        return node
    containers = ps.pod_spec.containers or []
    return containers[0] if containers else None


class TensorFlowPlugin:
    name = "TensorFlow"

    def reserved_envs(self, info: Info) -> Sequence[str]:
        """Beyond upstream: the TrainJob may not set the env this plugin writes."""
        if info.ml_policy is None or info.ml_policy.tensorflow is None:
            return ()
        return c.TENSORFLOW_RESERVED_ENVS

    def enforce_ml_policy(self, info: Info) -> None:
        if info.ml_policy is None or info.ml_policy.tensorflow is None:
            return
        cluster = cluster_spec(info)
        for role, ps in role_pod_sets(info):
            ctr = role_container(ps)
            if ctr is None or ps.count == 0:
                continue
            # TF_CONFIG refers to TF_TASK_INDEX, so it must come after it: drop both, append.
            kept = [e for e in ctr.env or [] if e.name not in c.TENSORFLOW_RESERVED_ENVS]
            ctr.env = [
                *kept,
                apply.env_from_field(c.ENV_TF_TASK_INDEX, index_field(ps)),
                apply.env(c.ENV_TF_CONFIG, tf_config_template(cluster, role)),
            ]
            apply.upsert_port(ctr, ContainerPort(container_port=c.CONTAINER_TRAINER_PORT))
