"""Master + Workers, as PyTorchJob and XGBoostJob have them: one shape, two env tables.

When the Master's and the Workers' pod templates are equal they become one replicated job
``node`` of ``1 + workers`` pods under the framework's ML policy (the master is pod 0). When
they differ, Master and Worker stay separate jobs without an ML policy and the worker's rank is
computed by a ``/bin/sh -c`` prefix in front of its command (reported as a warning). The
framework modules pass in the env v1 wrote; this module decides the shape.
"""

from __future__ import annotations

from collections.abc import Callable

from trainer.api import constants as c
from trainer.convert.v1job import (
    Obj,
    Plan,
    Role,
    V1Job,
    ensure_port,
    env_from_field,
    env_var,
    replicated_job,
    upsert_env,
)


def rank_wrapper(
    job: V1Job, role: Role, container: Obj, offset: int, names: tuple[str, ...] = ("RANK",)
) -> None:
    """Prefix the container's command with a shell that exports ``names`` = index + offset."""
    command = list(container.get("command") or [])
    if not command:
        raise job.error(
            f"{role.path}.template.spec.containers",
            "the Worker pod template differs from the Master's and its main container has no "
            "command: RANK (worker index + 1) can only be set by wrapping the command; give the "
            "container a command, or make the Master and Worker templates equal",
        )
    exports = "; ".join(f"export {name}=$$((JOB_COMPLETION_INDEX + {offset}))" for name in names)
    script = f'{exports}; exec "$$0" "$$@"'
    container["command"] = ["/bin/sh", "-c", script, *command, *(container.get("args") or [])]
    container.pop("args", None)
    names_text = " and ".join(names)
    job.warn(
        f"{role.path}.template",
        "Master and Worker pod templates differ, so they run as replicatedJobs 'master' and "
        f"'worker'; the worker command is prefixed with '/bin/sh -c' to export {names_text} = "
        f"JOB_COMPLETION_INDEX + {offset} (the image needs /bin/sh)",
    )


def leader_worker(
    job: V1Job,
    policy_key: str,
    env_for: Callable[[int, str, list[str]], list[Obj]],
    always: list[Obj],
    split_env: Callable[[int], list[Obj]],
    rank_names: tuple[str, ...],
) -> Plan:
    """PyTorch / XGBoost: Master (rank 0) + Workers. ``env_for(total, master_host,
    worker_hosts)`` gives the v1 env of a job with a Master, ``always`` the env v1 sets even
    without one; ``rank_names`` get the pod's rank (added here). ``split_env(total)`` is the
    env the ML policy would have added, for when Master and Worker templates differ."""
    master, worker = job.roles.get("Master"), job.roles.get("Worker")
    if master is not None and master.replicas != 1:
        raise job.error(f"{master.path}.replicas", "must be 1 (v1 allows one Master)")
    port_role = master or worker
    assert port_role is not None
    total = (1 if master else 0) + (worker.replicas if worker else 0)
    same = master is None or worker is None or master.template == worker.template
    if same:
        role = master or worker
        assert role is not None
        tmpl = job.pod_template(role)
        node = job.node(tmpl)
        hosts = [job.host(c.JOB_NODE, i) for i in range(total)]
        env = list(always)
        if master is not None:
            env += env_for(total, hosts[0], hosts[1:])
            env.append(env_from_field("RANK", c.FIELD_PATH_COMPLETION_INDEX))
        if env:
            upsert_env(node, env)
        ensure_port(node, job.port(port_role), job.info.port_name)
        return Plan(
            [replicated_job(c.JOB_NODE, total, tmpl, trainer=True)],
            {"numNodes": total, policy_key: {}},
            trainer={"numNodes": total},
        )
    assert master is not None and worker is not None
    mtmpl, wtmpl = job.pod_template(master), job.pod_template(worker)
    mhost = job.host("master", 0)
    whosts = [job.host("worker", i) for i in range(worker.replicas)]
    mnode, wnode = job.node(mtmpl), job.node(wtmpl)
    common = [*always, *env_for(total, mhost, whosts), *split_env(total)]
    upsert_env(mnode, [*common, *(env_var(name, "0") for name in rank_names)])
    upsert_env(
        wnode,
        [*common, env_from_field("JOB_COMPLETION_INDEX", c.FIELD_PATH_COMPLETION_INDEX)],
    )
    rank_wrapper(job, worker, wnode, 1, rank_names)
    ensure_port(mnode, job.port(master), job.info.port_name)
    ensure_port(wnode, job.port(worker), job.info.port_name)
    job.warn(
        f"spec.{job.info.specs_field}",
        f"without a shared pod template the runtime has no mlPolicy; mlPolicy.{policy_key} env "
        "(PET_MASTER_* / DMLC_*) is not injected, only the v1 env",
    )
    return Plan(
        [
            replicated_job("master", 1, mtmpl, trainer=True),
            replicated_job("worker", worker.replicas, wtmpl, trainer=False),
        ],
        None,
    )
