"""JAXJob -> ``mlPolicy.jax``: one job ``node`` plus v1's ``COORDINATOR_ADDRESS``,
``COORDINATOR_PORT`` (6666 or the ``jaxjob-port``), ``NUM_PROCESSES``, ``PROCESS_ID`` and
``PYTHONUNBUFFERED=1``."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.convert.v1job import (
    Plan,
    V1Job,
    ensure_port,
    env_from_field,
    env_var,
    replicated_job,
    upsert_env,
)


def convert_jax(job: V1Job) -> Plan:
    worker = job.roles["Worker"]
    tmpl = job.pod_template(worker)
    node = job.node(tmpl)
    port = job.port(worker)
    upsert_env(
        node,
        [
            env_var("PYTHONUNBUFFERED", "1"),
            env_var("COORDINATOR_ADDRESS", job.host(c.JOB_NODE, 0)),
            env_var("COORDINATOR_PORT", str(port)),
            env_var("NUM_PROCESSES", str(worker.replicas)),
            env_from_field("PROCESS_ID", c.FIELD_PATH_COMPLETION_INDEX),
        ],
    )
    ensure_port(node, port, job.info.port_name)
    return Plan(
        [replicated_job(c.JOB_NODE, worker.replicas, tmpl, trainer=True)],
        {"numNodes": worker.replicas, "jax": {}},
        trainer={"numNodes": worker.replicas},
    )
