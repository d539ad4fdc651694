"""TFJob -> jobs ``chief`` / ``master`` / ``worker`` / ``ps`` / ``evaluator`` under
``mlPolicy.tensorflow`` (which writes ``TF_CONFIG`` per pod); v1's ``successPolicy`` -> the
JobSet successPolicy's target job."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.convert.v1job import Plan, V1Job, replicated_job

TF_JOB_NAMES = {
    "Chief": c.TF_ROLE_CHIEF,
    "Master": c.TF_ROLE_MASTER,
    "Worker": c.TF_ROLE_WORKER,
    "PS": c.TF_ROLE_PS,
    "Evaluator": c.TF_ROLE_EVALUATOR,
}


def convert_tensorflow(job: V1Job) -> Plan:
    order = ("Chief", "Master", "Worker", "PS", "Evaluator")
    present = [r for r in order if r in job.roles]
    trainer_role = next(r for r in ("Worker", "Chief", "Master", "PS", "Evaluator") if r in present)
    jobs = []
    for name in present:
        role = job.roles[name]
        jobs.append(
            replicated_job(
                TF_JOB_NAMES[name],
                role.replicas,
                job.pod_template(role),
                trainer=name == trainer_role,
            )
        )
    count = job.roles[trainer_role].replicas
    plan = Plan(jobs, {"numNodes": count, "tensorflow": {}}, trainer={"numNodes": count})
    if job.spec.get("enableDynamicWorker"):
        job.warn("spec.enableDynamicWorker", "ignored; the converted job has a fixed worker set")
    success = job.spec.get("successPolicy")
    chief = next((r for r in ("Chief", "Master") if r in present), None)
    if success == "AllWorkers" and "Worker" in present:
        target = c.TF_ROLE_WORKER
    elif chief is not None:
        target = TF_JOB_NAMES[chief]
    elif "Worker" in present:
        target = c.TF_ROLE_WORKER
        if "PS" in present or "Evaluator" in present:
            job.warn(
                "spec.successPolicy",
                "v1 finishes when worker 0 completes; the converted job finishes when every "
                "worker has completed (JobSet successPolicy targetReplicatedJobs [worker])",
            )
    else:
        target = TF_JOB_NAMES[trainer_role]
    if len(present) > 1:
        plan.success_policy = {"operator": "All", "targetReplicatedJobs": [target]}
    return plan
