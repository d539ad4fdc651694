"""PaddleJob -> workers as ``node``, a Master as job ``master``, without ``mlPolicy.paddle``
(its port 29500 and ``PADDLE_RANK`` are not v1's): v1's ``PADDLE_MASTER``, ``PADDLE_NNODES``,
``PADDLE_JOB_ID`` and ``PADDLE_SERVER_NUM`` / ``PADDLE_TRAINER_NUM`` are written out."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.convert.v1job import (
    Obj,
    Plan,
    V1Job,
    ensure_port,
    env_var,
    replicated_job,
    upsert_env,
)


def convert_paddle(job: V1Job) -> Plan:
    """v1's Paddle env, written out: the paddle policy's PADDLE_MASTER port (29500) and its
    PADDLE_RANK differ from v1, so the runtime has no ``mlPolicy.paddle``."""
    worker = job.roles.get("Worker")
    master = job.roles.get("Master")
    if worker is None:
        raise job.error(f"spec.{job.info.specs_field}.Worker", "a PaddleJob needs Workers")
    total = worker.replicas + (master.replicas if master is not None else 0)
    # Collective mode: worker 0 is the rendezvous; parameter-server mode: master 0.
    leader = master or worker
    port = job.port(leader)
    endpoint = job.host("master" if master is not None else c.JOB_NODE, 0) + f":{port}"
    common = [
        env_var("PYTHONUNBUFFERED", "0"),
        env_var("PADDLE_JOB_ID", job.name),
        env_var("PADDLE_NNODES", str(total)),
        env_var("PADDLE_MASTER", endpoint),
    ]
    jobs: list[Obj] = []
    if master is not None:
        mtmpl = job.pod_template(master)
        mnode = job.node(mtmpl)
        upsert_env(mnode, [*common, env_var("PADDLE_SERVER_NUM", "1")])
        ensure_port(mnode, port, job.info.port_name)
        jobs.append(replicated_job("master", master.replicas, mtmpl, trainer=False))
    tmpl = job.pod_template(worker)
    node = job.node(tmpl)
    extra = [env_var("PADDLE_TRAINER_NUM", "1")] if master is not None else []
    upsert_env(node, [*common, *extra])
    ensure_port(node, job.port(worker), job.info.port_name)
    jobs.append(replicated_job(c.JOB_NODE, worker.replicas, tmpl, trainer=True))
    if master is not None and master.replicas > 1:
        job.warn(
            f"{master.path}.replicas",
            f"{master.replicas} Masters: v1 gave each PADDLE_SERVER_NUM=1 and pointed "
            "PADDLE_MASTER at master 0, and so does the converted job",
        )
    if job.spec.get("elasticPolicy") is not None:
        job.warn(
            "spec.elasticPolicy",
            "Paddle elastic training (etcd-based) has no v2 equivalent; ignored, the worker "
            "count is fixed",
        )
    return Plan(jobs, {"numNodes": worker.replicas}, trainer={"numNodes": worker.replicas})
