"""XGBoostJob -> ``mlPolicy.xgboost``: v1's env (``MASTER_ADDR``, ``MASTER_PORT`` 9999 or the
``xgboostjob-port``, ``WORLD_SIZE``, ``RANK``, and for more than one pod ``WORKER_PORT`` /
``WORKER_ADDRS``)."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.convert.frameworks.leader_worker import leader_worker
from trainer.convert.v1job import Obj, Plan, V1Job, env_var


def convert_xgboost(job: V1Job) -> Plan:
    master, worker = job.roles.get("Master"), job.roles.get("Worker")
    port = job.port(master or job.roles["Worker"])
    worker_port = job.port(worker) if worker is not None else port

    def env_for(total: int, master: str, workers: list[str]) -> list[Obj]:
        env = [
            env_var(c.ENV_MASTER_PORT, str(port)),
            env_var(c.ENV_MASTER_ADDR, master),
            env_var("WORLD_SIZE", str(total)),
            env_var("PYTHONUNBUFFERED", "0"),
        ]
        if total > 1:  # v1: only then (for LightGBM)
            env += [
                env_var("WORKER_PORT", str(worker_port)),
                env_var("WORKER_ADDRS", ",".join(workers)),
            ]
        return env

    return leader_worker(job, "xgboost", env_for, [], lambda _total: [], ("RANK",))
