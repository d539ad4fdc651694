"""MPIJob (v1 and v2beta1) -> ``launcher`` and ``node`` under ``mlPolicy.mpi``
(``slotsPerWorker`` -> ``numProcPerNode``, ``runLauncherAsWorker``, ``sshAuthMountPath``,
``launcherCreationPolicy: WaitForWorkersReady`` -> a JobSet ``dependsOn``). Only OpenMPI
converts: Trainer v2.3's MPI policy supports no other implementation."""

from __future__ import annotations

from trainer.api import constants as c
from trainer.convert.v1job import Obj, Plan, V1Job, replicated_job, require_int


def convert_mpi(job: V1Job) -> Plan:
    spec = job.spec
    launcher = job.roles.get("Launcher")
    worker = job.roles.get("Worker")
    if launcher is None:
        raise job.error(f"spec.{job.info.specs_field}.Launcher", "an MPIJob needs a Launcher")
    if launcher.replicas != 1:
        raise job.error(f"{launcher.path}.replicas", "must be 1")
    policy: Obj = {}
    slots = spec.get("slotsPerWorker")
    if slots is not None:
        policy["numProcPerNode"] = require_int(slots, "spec.slotsPerWorker")
    impl = spec.get("mpiImplementation")
    if impl not in (None, "OpenMPI"):
        raise job.error(
            "spec.mpiImplementation",
            f"{impl!r} cannot be converted: the runtime field mlPolicy.mpi.mpiImplementation "
            'accepts only "OpenMPI" in Trainer v2.3\'s CRD (Intel and MPICH are not in its '
            "enum), and without mlPolicy.mpi nothing would write the hostfile, the SSH keys and "
            "the I_MPI_HYDRA_* / HYDRA_* env that v1's MPI operator gave the launcher, so its "
            "mpirun could not reach the workers. Build the image with OpenMPI and set "
            "spec.mpiImplementation: OpenMPI (or remove it), then convert again",
        )
    if spec.get("sshAuthMountPath") is not None:
        policy["sshAuthMountPath"] = spec["sshAuthMountPath"]
    run_as_node = bool(spec.get("runLauncherAsWorker"))
    if run_as_node:
        policy["runLauncherAsNode"] = True
    main = spec.get("mainContainer") if isinstance(spec.get("mainContainer"), str) else None
    workers = worker.replicas if worker is not None else 0
    jobs = [replicated_job(c.JOB_LAUNCHER, 1, job.pod_template(launcher, main), trainer=True)]
    if worker is not None:
        jobs.append(
            replicated_job(c.JOB_NODE, workers, job.pod_template(worker, main), trainer=False)
        )
    plan = Plan(
        jobs,
        {"numNodes": 1, "mpi": policy},
        trainer={"numNodes": workers + 1 if run_as_node else workers},
    )
    if spec.get("launcherCreationPolicy") == "WaitForWorkersReady" and worker is not None:
        plan.depends_on[c.JOB_LAUNCHER] = [{"name": c.JOB_NODE, "status": "Ready"}]
    return plan
