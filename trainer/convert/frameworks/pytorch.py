"""PyTorchJob -> ``mlPolicy.torch``: v1's env (``MASTER_ADDR``, ``MASTER_PORT`` 23456 or the
``pytorchjob-port``, ``WORLD_SIZE``, ``RANK``, ``PYTHONUNBUFFERED=0``), ``nprocPerNode`` ->
``numProcPerNode``, and ``elasticPolicy`` -> the torch policy's elastic rendezvous (what v1
could do and v2 cannot, such as scaling up, is a warning)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.api import constants as c
from trainer.convert.frameworks.leader_worker import leader_worker
from trainer.convert.v1job import Obj, Plan, V1Job, env_var, require_int


def convert_pytorch(job: V1Job) -> Plan:
    spec = job.spec
    nproc_raw = spec.get("nprocPerNode")
    elastic = spec.get("elasticPolicy")
    elastic = elastic if isinstance(elastic, Mapping) else None
    if elastic is not None and elastic.get("nProcPerNode") is not None and nproc_raw is None:
        nproc_raw = elastic.get("nProcPerNode")
    nproc: int | None = None
    if isinstance(nproc_raw, int) and not isinstance(nproc_raw, bool):
        nproc = nproc_raw
    elif isinstance(nproc_raw, str) and nproc_raw.isdigit():
        nproc = int(nproc_raw)
    elif nproc_raw not in (None, "auto"):
        job.warn(
            "spec.nprocPerNode",
            f"{nproc_raw!r} has no v2 equivalent; the converted job leaves numProcPerNode unset "
            "(auto: one process per GPU, else per CPU)",
        )
    port = job.port(job.roles.get("Master") or job.roles["Worker"])

    def env_for(total: int, master: str, _workers: list[str]) -> list[Obj]:
        return [
            env_var(c.ENV_MASTER_ADDR, master),
            env_var(c.ENV_MASTER_PORT, str(port)),
            env_var("WORLD_SIZE", str(total * (nproc or 1))),
        ]

    def split_env(total: int) -> list[Obj]:
        # v1 sets these with a Master (torchrun reads them); mlPolicy.torch would otherwise.
        raw = nproc_raw if isinstance(nproc_raw, str) else str(nproc or "auto")
        return [env_var("PET_NNODES", str(total)), env_var("PET_NPROC_PER_NODE", raw)]

    plan = leader_worker(
        job,
        "torch",
        env_for,
        [env_var("PYTHONUNBUFFERED", "0")],
        split_env,
        ("RANK", "PET_NODE_RANK"),
    )
    if plan.ml_policy is None:
        if elastic is not None:
            raise job.error(
                "spec.elasticPolicy",
                "elastic training needs the Master and Worker pod templates to be equal (one "
                "torchrun job of all nodes)",
            )
        return plan
    assert plan.trainer is not None
    if nproc is not None:
        plan.trainer["numProcPerNode"] = nproc
    if elastic is not None:
        plan.ml_policy["torch"]["elasticPolicy"] = elastic_policy(
            job, elastic, plan.trainer["numNodes"]
        )
    return plan


def elastic_policy(job: V1Job, elastic: Mapping[str, Any], nodes: int) -> Obj:
    path = "spec.elasticPolicy"
    out: Obj = {}
    low = elastic.get("minReplicas")
    high = elastic.get("maxReplicas")
    if low is not None:
        out["minNodes"] = require_int(low, f"{path}.minReplicas")
    if high is not None:
        out["maxNodes"] = require_int(high, f"{path}.maxReplicas")
    if elastic.get("maxRestarts") is not None:
        out["maxRestarts"] = require_int(elastic["maxRestarts"], f"{path}.maxRestarts")
    lo, hi = out.get("minNodes", nodes), out.get("maxNodes", nodes)
    if lo > hi:
        raise job.error(path, f"minReplicas ({lo}) is greater than maxReplicas ({hi})")
    if not lo <= nodes <= hi:
        raise job.error(
            path,
            f"the job has {nodes} nodes, outside minReplicas..maxReplicas [{lo}, {hi}]",
        )
    if hi > lo:
        job.warn(
            f"{path}.maxReplicas",
            f"v1 could scale between {lo} and {hi} pods; the converted job starts {nodes} pods "
            f"and keeps training while at least {lo} are up (torchrun PET_NNODES={lo}:{hi}), "
            "but never adds pods",
        )
    backend = elastic.get("rdzvBackend")
    if backend not in (None, c.RDZV_BACKEND_C10D):
        job.warn(
            f"{path}.rdzvBackend",
            f"{backend!r} is not supported; the converted job uses the c10d rendezvous on node 0",
        )
    for key in ("rdzvHost", "rdzvPort", "rdzvId", "rdzvConf", "standalone"):
        if elastic.get(key) is not None:
            job.warn(
                f"{path}.{key}",
                "ignored; the converted job's rendezvous is c10d on node 0, port 29500",
            )
    if elastic.get("metrics"):
        job.warn(
            f"{path}.metrics",
            "v1 created a HorizontalPodAutoscaler from these metrics; the converted job has "
            "none (its pod count is fixed)",
        )
    return out
