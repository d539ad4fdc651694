"""MPIJob (v1 and v2beta1) -> ``launcher`` and ``node`` under ``mlPolicy.mpi``
(``slotsPerWorker`` -> ``numProcPerNode``, ``runLauncherAsWorker``, ``sshAuthMountPath``,
``launcherCreationPolicy: WaitForWorkersReady`` -> a JobSet ``dependsOn``). OpenMPI and MPICH
convert (``mpiImplementation: MPICH`` is beyond upstream: it needs this project's CRDs, so the
conversion warns); Intel MPI does not (docs/convert.md, "Intel MPI and MPICH")."""

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
    if impl == "MPICH":
        policy["mpiImplementation"] = "MPICH"
        job.warn(
            "spec.mpiImplementation",
            "MPICH converts to mlPolicy.mpi.mpiImplementation: MPICH, which only this project's "
            'CRDs admit (Trainer v2.3\'s accept only "OpenMPI"); the launcher gets the hostfile '
            "and Hydra's env from the MPI plugin",
        )
    elif impl not in (None, "OpenMPI"):
        raise job.error(
            "spec.mpiImplementation",
            f"{impl!r} cannot be converted: the runtime field mlPolicy.mpi.mpiImplementation "
            'accepts only "OpenMPI" and "MPICH" (Intel MPI is not supported: its launcher '
            "reads the I_MPI_HYDRA_* env that v1's MPI operator gave it, which no MPI policy "
            "writes, and without mlPolicy.mpi nothing would write the hostfile and the SSH keys "
            "either, so its mpirun could not reach the workers). Build the image with OpenMPI "
            "or MPICH, set spec.mpiImplementation to it (or remove it for OpenMPI), then "
            "convert again",
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
        # JobSet refuses a dependsOn on the first replicated job, or on one listed later
        # (docs/crd-parity.md): the nodes go first, as in Trainer's deepspeed runtime.
        jobs.reverse()
    return plan
