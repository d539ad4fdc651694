"""Convert one Training Operator v1 job into a TrainJob and the TrainingRuntime it runs on.

Pure: a v1 object (wire data) in, wire objects and warnings out; only the CLI reads and writes
files. Accepted: ``PyTorchJob``, ``TFJob``, ``MPIJob``, ``XGBoostJob``, ``PaddleJob`` and
``JAXJob`` of ``kubeflow.org/v1``, and ``MPIJob`` of ``kubeflow.org/v2beta1``. Anything else is a
:class:`ConvertError` naming the document and field.

Shape of the output
    A namespaced ``TrainingRuntime`` named like the job (in its namespace) holding one JobSet
    replicated job per v1 role, the role's pod template copied verbatim (images, commands,
    args, resources, volumes, node placement, tolerations, env), and a ``TrainJob`` of the same
    name referencing it. The framework's main container (``pytorch``, ``tensorflow``,
    ``xgboost``, ``paddle``, ``jax``; MPI: ``mainContainer`` or the first) is renamed ``node``,
    where the v2 policies inject their env. When a built-in ClusterTrainingRuntime renders the
    same pods (:mod:`trainer.convert.builtin`), :func:`convert` returns only a TrainJob
    referencing it instead.

How the v1 env is reproduced
    PyTorch and XGBoost (Master + Worker): when the Master's and the Workers' pod templates are
    equal, both become one replicated job ``node`` of ``1 + workers`` pods (the master is pod
    0), under ``mlPolicy.torch`` / ``mlPolicy.xgboost``; the v1 env is written into the
    runtime's ``node`` container: ``MASTER_ADDR`` = pod 0's DNS name, ``MASTER_PORT`` = the v1
    port (PyTorch 23456, XGBoost 9999, or the container's ``pytorchjob-port`` /
    ``xgboostjob-port``), ``WORLD_SIZE``, ``RANK`` = the completion index (downward API), plus
    ``WORKER_PORT`` / ``WORKER_ADDRS`` (XGBoost, more than one pod). ``PYTHONUNBUFFERED`` is
    v1's ``0`` (PyTorch on every pod, XGBoost). The torch policy adds torchrun's ``PET_*`` env
    (and, from ``elasticPolicy``, the elastic rendezvous).
    When the templates differ, Master and Worker stay separate jobs ``master`` and ``worker``
    without an ML policy; the worker's ``RANK`` (index + 1; PyTorch also ``PET_NODE_RANK``) is
    computed by a ``/bin/sh -c`` prefix in front of its command (reported as a warning).
    JAX: one job ``node`` under ``mlPolicy.jax`` plus v1's ``COORDINATOR_ADDRESS``,
    ``COORDINATOR_PORT`` (6666), ``NUM_PROCESSES``, ``PROCESS_ID``, ``PYTHONUNBUFFERED=1``.
    TensorFlow: jobs ``chief`` / ``master`` / ``worker`` / ``ps`` / ``evaluator`` under
    ``mlPolicy.tensorflow``, which writes ``TF_CONFIG`` per pod.
    Paddle: workers become ``node``, a Master a job ``master``, without ``mlPolicy.paddle``
    (its port 29500 and ``PADDLE_RANK`` are not v1's); v1's ``PADDLE_MASTER`` (worker 0, or
    master 0 in parameter-server mode, on the ``master`` port, default 36543),
    ``PADDLE_NNODES``, ``PADDLE_JOB_ID`` and ``PADDLE_SERVER_NUM`` / ``PADDLE_TRAINER_NUM``
    are written out. MPI: ``launcher`` and ``node`` under ``mlPolicy.mpi``.
    Default replica ``restartPolicy`` as v1: ``Never`` for TFJob, XGBoostJob, JAXJob and
    MPIJob (v2beta1: Launcher ``OnFailure``, Workers ``Never``), ``OnFailure`` for PyTorchJob
    and PaddleJob; it always replaces the pod template's.

runPolicy
    ``activeDeadlineSeconds`` -> TrainJob ``activeDeadlineSeconds``; ``backoffLimit`` ->
    JobSet ``failurePolicy.maxRestarts`` (each Job's ``backoffLimit`` 0: a failed pod restarts
    the gang); ``ttlSecondsAfterFinished`` -> the JobSet's; ``suspend`` and ``managedBy`` ->
    the TrainJob's; ``schedulingPolicy`` -> ``podGroupPolicy`` (Volcano when a pod template
    uses ``schedulerName: volcano``, else coscheduling; ``queue`` -> the JobSet annotation
    ``scheduling.volcano.sh/queue-name``; ``priorityClass`` -> pod ``priorityClassName``).
    Everything without an equivalent is a :class:`ConvertWarning` naming the field and what
    the converted job does instead.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trainer.api import constants as c
from trainer.api.core import PodTemplateSpec
from trainer.api.errors import format_errors
from trainer.api.load import pydantic_errors
from trainer.convert.builtin import try_builtin

V1 = "kubeflow.org/v1"
V2BETA1 = "kubeflow.org/v2beta1"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MANAGED_BY_V1 = "kubeflow.org/training-operator"
VOLCANO = "volcano"

Obj = dict[str, Any]


class ConvertError(ValueError):
    """The input is not a v1 job this tool can convert; the message names the field."""


@dataclass(frozen=True)
class ConvertWarning:
    """A v1 field without an exact v2 equivalent, and what the converted job does instead."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Converted:
    """The converted objects of one v1 job (runtime first, then the TrainJob)."""

    kind: str
    name: str
    namespace: str | None
    objects: list[Obj]
    warnings: list[ConvertWarning] = field(default_factory=list)
    runtime: str = ""
    """``TrainingRuntime/<name>`` (its own) or ``ClusterTrainingRuntime/<name>`` (a built-in)."""
    info: list[str] = field(default_factory=list)
    """Why the job uses the runtime it does (one line each)."""


@dataclass(frozen=True)
class KindInfo:
    specs_field: str
    container: str
    roles: tuple[str, ...]
    framework: str
    port_name: str = ""
    default_port: int = 0
    restart_policy: str = "OnFailure"


KINDS: dict[str, KindInfo] = {
    "PyTorchJob": KindInfo(
        "pytorchReplicaSpecs", "pytorch", ("Master", "Worker"), "torch", "pytorchjob-port", 23456
    ),
    "XGBoostJob": KindInfo(
        "xgbReplicaSpecs",
        "xgboost",
        ("Master", "Worker"),
        "xgboost",
        "xgboostjob-port",
        9999,
        "Never",
    ),
    "TFJob": KindInfo(
        "tfReplicaSpecs",
        "tensorflow",
        ("Chief", "Master", "Worker", "PS", "Evaluator"),
        "tensorflow",
        "tfjob-port",
        2222,
        "Never",
    ),
    "PaddleJob": KindInfo(
        "paddleReplicaSpecs", "paddle", ("Master", "Worker"), "paddle", "master", 36543
    ),
    "JAXJob": KindInfo("jaxReplicaSpecs", "jax", ("Worker",), "jax", "jaxjob-port", 6666, "Never"),
    "MPIJob": KindInfo("mpiReplicaSpecs", "mpi", ("Launcher", "Worker"), "mpi", "", 0, "Never"),
}


# --- small helpers -------------------------------------------------------------------------------
def _env(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def _env_field(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _upsert_env(container: Obj, envs: list[Obj]) -> None:
    names = {e["name"] for e in envs}
    kept = [e for e in container.get("env") or [] if e.get("name") not in names]
    container["env"] = kept + envs


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConvertError(f"{where}: must be an integer, got {value!r}")
    return value


@dataclass
class Role:
    """One v1 replica spec."""

    name: str  # canonical v1 role name (Master, Worker, ...)
    path: str  # spec.<field>.<Role>
    replicas: int
    template: Obj
    restart_policy: str | None


class _Job:
    """The state of one conversion."""

    def __init__(self, data: Mapping[str, Any], label: str) -> None:
        self.label = label
        kind = data.get("kind")
        api_version = data.get("apiVersion")
        if not isinstance(kind, str) or kind not in KINDS:
            raise ConvertError(
                f"{label}: kind {kind!r} is not a Training Operator v1 job (expected one of "
                f"{', '.join(KINDS)})"
            )
        allowed = (V1, V2BETA1) if kind == "MPIJob" else (V1,)
        if api_version not in allowed:
            raise ConvertError(
                f"{label}: apiVersion {api_version!r} of {kind} is not supported "
                f"(expected {' or '.join(allowed)})"
            )
        self.kind = kind
        self.info = KINDS[kind]
        self.api_version = api_version
        meta = data.get("metadata")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            raise ConvertError(f"{label}: {kind} has no metadata.name")
        self.meta = dict(meta)
        self.name: str = meta["name"]
        namespace = meta.get("namespace")
        self.namespace: str | None = namespace if isinstance(namespace, str) else None
        spec = data.get("spec")
        if not isinstance(spec, Mapping):
            raise ConvertError(f"{label}: {kind}/{self.name} has no spec")
        self.spec: Mapping[str, Any] = spec
        self.warnings: list[ConvertWarning] = []
        self.roles = self._roles()

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(ConvertWarning(path, message))

    def error(self, path: str, message: str) -> ConvertError:
        return ConvertError(f"{self.label}: {self.kind}/{self.name}: {path}: {message}")

    # --- replica specs ---------------------------------------------------------------------------
    def _roles(self) -> dict[str, Role]:
        key = self.info.specs_field
        specs = self.spec.get(key)
        path = f"spec.{key}"
        if not isinstance(specs, Mapping) or not specs:
            raise self.error(path, "missing or empty: a v1 job needs at least one replica spec")
        canon = {r.lower(): r for r in self.info.roles}
        roles: dict[str, Role] = {}
        for raw, rspec in specs.items():
            role = canon.get(str(raw).lower())
            rpath = f"{path}.{raw}"
            if role is None:
                raise self.error(
                    rpath, f"unknown replica type (expected one of {', '.join(self.info.roles)})"
                )
            if not isinstance(rspec, Mapping):
                raise self.error(rpath, "must be an object")
            replicas = _int(rspec.get("replicas", 1), f"{rpath}.replicas")
            template = rspec.get("template")
            pod = template.get("spec") if isinstance(template, Mapping) else None
            containers = pod.get("containers") if isinstance(pod, Mapping) else None
            if not isinstance(containers, list) or not containers:
                raise self.error(f"{rpath}.template.spec.containers", "must list a container")
            if replicas < 0:
                raise self.error(f"{rpath}.replicas", f"must be 0 or more, got {replicas}")
            try:  # the types of every modelled pod field, before anything reads them
                PodTemplateSpec.from_wire(template or {})
            except ValidationError as exc:
                raise self.error(f"{rpath}.template", format_errors(pydantic_errors(exc))) from None
            restart = rspec.get("restartPolicy")
            roles[role] = Role(
                role,
                rpath,
                replicas,
                copy.deepcopy(dict(template)),  # type: ignore[arg-type]
                restart if isinstance(restart, str) else None,
            )
        return roles

    def pod_template(self, role: Role, container: str | None = None) -> Obj:
        """The role's pod template with the main container renamed ``node`` and a Job-valid
        restartPolicy."""
        tmpl = copy.deepcopy(role.template)
        pod: Obj = tmpl.setdefault("spec", {})
        containers: list[Obj] = pod["containers"]
        names = [ctr.get("name") for ctr in containers]
        main = container or self.info.container
        if c.CONTAINER_NODE not in names:
            index = names.index(main) if main in names else 0
            if main not in names and len(containers) > 1:
                self.warn(
                    f"{role.path}.template.spec.containers",
                    f"no container named {main!r}; container {names[0]!r} is taken as the "
                    "main container and renamed 'node'",
                )
            containers[index]["name"] = c.CONTAINER_NODE
        # v1 defaults the replica's restartPolicy and always writes it over the template's.
        policy = role.restart_policy or self.default_restart_policy(role)
        if policy == "ExitCode":
            self.warn(
                f"{role.path}.restartPolicy",
                "ExitCode has no Job equivalent; pods use restartPolicy Never and a failed pod "
                "fails its Job (the JobSet failurePolicy decides about restarts)",
            )
            policy = "Never"
        elif policy == "Always":
            self.warn(
                f"{role.path}.restartPolicy",
                "Always is not allowed for Job pods; pods use restartPolicy OnFailure",
            )
            policy = "OnFailure"
        pod["restartPolicy"] = policy
        return tmpl

    def default_restart_policy(self, role: Role) -> str:
        """v1's default for an unset replica restartPolicy; the MPI operator's v2beta1 MPIJob
        defaults its Launcher to OnFailure and its Workers to Never."""
        if self.api_version == V2BETA1 and role.name == "Launcher":
            return "OnFailure"
        return self.info.restart_policy

    def node(self, template: Obj) -> Obj:
        return next(ctr for ctr in template["spec"]["containers"] if ctr["name"] == "node")

    def port(self, role: Role) -> int:
        """The v1 port of the framework (the main container's named port, else the default)."""
        for ctr in role.template.get("spec", {}).get("containers", []):
            for port in ctr.get("ports") or []:
                if port.get("name") == self.info.port_name and isinstance(
                    port.get("containerPort"), int
                ):
                    return int(port["containerPort"])
        return self.info.default_port

    def host(self, rjob: str, index: int) -> str:
        return f"{self.name}-{rjob}-0-{index}.{self.name}"


def _rjob(name: str, count: int, template: Obj, trainer: bool) -> Obj:
    job: Obj = {"name": name, "replicas": 1, "template": {}}
    if trainer:
        job["template"]["metadata"] = {"labels": {c.LABEL_ANCESTOR: c.ANCESTOR_TRAINER}}
    job["template"]["spec"] = {"parallelism": count, "completions": count, "template": template}
    return job


def _ensure_port(container: Obj, port: int, name: str) -> None:
    ports = container.setdefault("ports", [])
    if not any(p.get("containerPort") == port for p in ports):
        ports.append({"name": name, "containerPort": port} if name else {"containerPort": port})


# --- per-framework builders ---------------------------------------------------------------------
@dataclass
class Plan:
    """What a framework builder decides: the jobs, the ML policy and the TrainJob trainer."""

    jobs: list[Obj]
    ml_policy: Obj | None
    trainer: Obj | None = None
    success_policy: Obj | None = None
    depends_on: dict[str, list[Obj]] = field(default_factory=dict)


def _rank_wrapper(
    job: _Job, role: Role, container: Obj, offset: int, names: tuple[str, ...] = ("RANK",)
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


def _leader_worker(
    job: _Job,
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
            env.append(_env_field("RANK", c.FIELD_PATH_COMPLETION_INDEX))
        if env:
            _upsert_env(node, env)
        _ensure_port(node, job.port(port_role), job.info.port_name)
        return Plan(
            [_rjob(c.JOB_NODE, total, tmpl, trainer=True)],
            {"numNodes": total, policy_key: {}},
            trainer={"numNodes": total},
        )
    assert master is not None and worker is not None
    mtmpl, wtmpl = job.pod_template(master), job.pod_template(worker)
    mhost = job.host("master", 0)
    whosts = [job.host("worker", i) for i in range(worker.replicas)]
    mnode, wnode = job.node(mtmpl), job.node(wtmpl)
    common = [*always, *env_for(total, mhost, whosts), *split_env(total)]
    _upsert_env(mnode, [*common, *(_env(name, "0") for name in rank_names)])
    _upsert_env(
        wnode,
        [*common, _env_field("JOB_COMPLETION_INDEX", c.FIELD_PATH_COMPLETION_INDEX)],
    )
    _rank_wrapper(job, worker, wnode, 1, rank_names)
    _ensure_port(mnode, job.port(master), job.info.port_name)
    _ensure_port(wnode, job.port(worker), job.info.port_name)
    job.warn(
        f"spec.{job.info.specs_field}",
        f"without a shared pod template the runtime has no mlPolicy; mlPolicy.{policy_key} env "
        "(PET_MASTER_* / DMLC_*) is not injected, only the v1 env",
    )
    return Plan(
        [
            _rjob("master", 1, mtmpl, trainer=True),
            _rjob("worker", worker.replicas, wtmpl, trainer=False),
        ],
        None,
    )


def _pytorch(job: _Job) -> Plan:
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
            _env(c.ENV_MASTER_ADDR, master),
            _env(c.ENV_MASTER_PORT, str(port)),
            _env("WORLD_SIZE", str(total * (nproc or 1))),
        ]

    def split_env(total: int) -> list[Obj]:
        # v1 sets these with a Master (torchrun reads them); mlPolicy.torch would otherwise.
        raw = nproc_raw if isinstance(nproc_raw, str) else str(nproc or "auto")
        return [_env("PET_NNODES", str(total)), _env("PET_NPROC_PER_NODE", raw)]

    plan = _leader_worker(
        job,
        "torch",
        env_for,
        [_env("PYTHONUNBUFFERED", "0")],
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
        plan.ml_policy["torch"]["elasticPolicy"] = _elastic(job, elastic, plan.trainer["numNodes"])
    return plan


def _elastic(job: _Job, elastic: Mapping[str, Any], nodes: int) -> Obj:
    path = "spec.elasticPolicy"
    out: Obj = {}
    low = elastic.get("minReplicas")
    high = elastic.get("maxReplicas")
    if low is not None:
        out["minNodes"] = _int(low, f"{path}.minReplicas")
    if high is not None:
        out["maxNodes"] = _int(high, f"{path}.maxReplicas")
    if elastic.get("maxRestarts") is not None:
        out["maxRestarts"] = _int(elastic["maxRestarts"], f"{path}.maxRestarts")
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


def _xgboost(job: _Job) -> Plan:
    master, worker = job.roles.get("Master"), job.roles.get("Worker")
    port = job.port(master or job.roles["Worker"])
    worker_port = job.port(worker) if worker is not None else port

    def env_for(total: int, master: str, workers: list[str]) -> list[Obj]:
        env = [
            _env(c.ENV_MASTER_PORT, str(port)),
            _env(c.ENV_MASTER_ADDR, master),
            _env("WORLD_SIZE", str(total)),
            _env("PYTHONUNBUFFERED", "0"),
        ]
        if total > 1:  # v1: only then (for LightGBM)
            env += [
                _env("WORKER_PORT", str(worker_port)),
                _env("WORKER_ADDRS", ",".join(workers)),
            ]
        return env

    return _leader_worker(job, "xgboost", env_for, [], lambda _total: [], ("RANK",))


def _jax(job: _Job) -> Plan:
    worker = job.roles["Worker"]
    tmpl = job.pod_template(worker)
    node = job.node(tmpl)
    port = job.port(worker)
    _upsert_env(
        node,
        [
            _env("PYTHONUNBUFFERED", "1"),
            _env("COORDINATOR_ADDRESS", job.host(c.JOB_NODE, 0)),
            _env("COORDINATOR_PORT", str(port)),
            _env("NUM_PROCESSES", str(worker.replicas)),
            _env_field("PROCESS_ID", c.FIELD_PATH_COMPLETION_INDEX),
        ],
    )
    _ensure_port(node, port, job.info.port_name)
    return Plan(
        [_rjob(c.JOB_NODE, worker.replicas, tmpl, trainer=True)],
        {"numNodes": worker.replicas, "jax": {}},
        trainer={"numNodes": worker.replicas},
    )


def _paddle(job: _Job) -> Plan:
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
        _env("PYTHONUNBUFFERED", "0"),
        _env("PADDLE_JOB_ID", job.name),
        _env("PADDLE_NNODES", str(total)),
        _env("PADDLE_MASTER", endpoint),
    ]
    jobs: list[Obj] = []
    if master is not None:
        mtmpl = job.pod_template(master)
        mnode = job.node(mtmpl)
        _upsert_env(mnode, [*common, _env("PADDLE_SERVER_NUM", "1")])
        _ensure_port(mnode, port, job.info.port_name)
        jobs.append(_rjob("master", master.replicas, mtmpl, trainer=False))
    tmpl = job.pod_template(worker)
    node = job.node(tmpl)
    extra = [_env("PADDLE_TRAINER_NUM", "1")] if master is not None else []
    _upsert_env(node, [*common, *extra])
    _ensure_port(node, job.port(worker), job.info.port_name)
    jobs.append(_rjob(c.JOB_NODE, worker.replicas, tmpl, trainer=True))
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


TF_JOB_NAMES = {
    "Chief": c.TF_ROLE_CHIEF,
    "Master": c.TF_ROLE_MASTER,
    "Worker": c.TF_ROLE_WORKER,
    "PS": c.TF_ROLE_PS,
    "Evaluator": c.TF_ROLE_EVALUATOR,
}


def _tensorflow(job: _Job) -> Plan:
    order = ("Chief", "Master", "Worker", "PS", "Evaluator")
    present = [r for r in order if r in job.roles]
    trainer_role = next(r for r in ("Worker", "Chief", "Master", "PS", "Evaluator") if r in present)
    jobs = []
    for name in present:
        role = job.roles[name]
        jobs.append(
            _rjob(
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


def _mpi(job: _Job) -> Plan:
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
        policy["numProcPerNode"] = _int(slots, "spec.slotsPerWorker")
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
    jobs = [_rjob(c.JOB_LAUNCHER, 1, job.pod_template(launcher, main), trainer=True)]
    if worker is not None:
        jobs.append(_rjob(c.JOB_NODE, workers, job.pod_template(worker, main), trainer=False))
    plan = Plan(
        jobs,
        {"numNodes": 1, "mpi": policy},
        trainer={"numNodes": workers + 1 if run_as_node else workers},
    )
    if spec.get("launcherCreationPolicy") == "WaitForWorkersReady" and worker is not None:
        plan.depends_on[c.JOB_LAUNCHER] = [{"name": c.JOB_NODE, "status": "Ready"}]
    return plan


BUILDERS: dict[str, Callable[[_Job], Plan]] = {
    "PyTorchJob": _pytorch,
    "XGBoostJob": _xgboost,
    "TFJob": _tensorflow,
    "PaddleJob": _paddle,
    "JAXJob": _jax,
    "MPIJob": _mpi,
}


# --- runPolicy -----------------------------------------------------------------------------------
def _run_policy(job: _Job, plan: Plan, trainjob_spec: Obj, jobset_spec: Obj, js_meta: Obj) -> Obj:
    """Apply ``spec.runPolicy``; returns the runtime's podGroupPolicy (empty when none)."""
    rp = job.spec.get("runPolicy")
    policy: Mapping[str, Any] = rp if isinstance(rp, Mapping) else {}
    path = "spec.runPolicy"
    if job.spec.get("cleanPodPolicy") not in (None, "None"):  # MPIJob v1's spec-level field
        job.warn(
            "spec.cleanPodPolicy",
            f"{job.spec['cleanPodPolicy']!r} has no v2 equivalent; pods of the finished job stay "
            "until the TrainJob is deleted or the JobSet's ttlSecondsAfterFinished removes them",
        )
    clean = policy.get("cleanPodPolicy")
    if clean not in (None, "None"):
        job.warn(
            f"{path}.cleanPodPolicy",
            f"{clean!r} has no v2 equivalent; pods of the finished job stay until the TrainJob "
            "is deleted or the JobSet's ttlSecondsAfterFinished removes them",
        )
    deadline = policy.get("activeDeadlineSeconds")
    if deadline is not None:
        value = _int(deadline, f"{path}.activeDeadlineSeconds")
        if value >= 1:
            trainjob_spec["activeDeadlineSeconds"] = value
        else:
            job.warn(f"{path}.activeDeadlineSeconds", f"{value} is not >= 1; no deadline is set")
    backoff = policy.get("backoffLimit")
    if backoff is not None:
        jobset_spec["failurePolicy"] = {"maxRestarts": _int(backoff, f"{path}.backoffLimit")}
        for rjob in plan.jobs:
            rjob["template"]["spec"]["backoffLimit"] = 0
    ttl = policy.get("ttlSecondsAfterFinished")
    if ttl is not None:
        jobset_spec["ttlSecondsAfterFinished"] = _int(ttl, f"{path}.ttlSecondsAfterFinished")
    if policy.get("suspend") is True:
        trainjob_spec["suspend"] = True
    managed = policy.get("managedBy")
    if managed == c.MANAGED_BY_MULTIKUEUE:
        trainjob_spec["managedBy"] = managed
    elif managed not in (None, MANAGED_BY_V1):
        job.warn(
            f"{path}.managedBy",
            f"{managed!r} is not a v2 manager; the TrainJob is managed by the Trainer controller",
        )
    return _scheduling(
        job, plan, policy.get("schedulingPolicy"), f"{path}.schedulingPolicy", js_meta
    )


def _pod_specs(plan: Plan) -> list[Obj]:
    return [rjob["template"]["spec"]["template"].setdefault("spec", {}) for rjob in plan.jobs]


def _scheduling(job: _Job, plan: Plan, sp: Any, path: str, js_meta: Obj) -> Obj:
    if not isinstance(sp, Mapping):
        return {}
    pods = _pod_specs(plan)
    volcano = any(p.get("schedulerName") == VOLCANO for p in pods)
    out: Obj
    if volcano:
        out = {"volcano": {}}
        if sp.get("queue"):
            js_meta.setdefault("annotations", {})[c.ANNOTATION_VOLCANO_QUEUE] = sp["queue"]
        if sp.get("scheduleTimeoutSeconds") is not None:
            job.warn(
                f"{path}.scheduleTimeoutSeconds",
                "Volcano PodGroups have no schedule timeout; ignored",
            )
    else:
        timeout = sp.get("scheduleTimeoutSeconds")
        out = {"coscheduling": {}}
        if timeout is not None:
            out["coscheduling"]["scheduleTimeoutSeconds"] = _int(
                timeout, f"{path}.scheduleTimeoutSeconds"
            )
        if sp.get("queue"):
            job.warn(
                f"{path}.queue",
                "coscheduling has no queues (no pod template uses schedulerName volcano); "
                "ignored. For Kueue, label the TrainJob with kueue.x-k8s.io/queue-name",
            )
    priority = sp.get("priorityClass")
    if priority:
        for pod in pods:
            pod.setdefault("priorityClassName", priority)
    total = sum(rjob["template"]["spec"]["parallelism"] for rjob in plan.jobs)
    min_available = sp.get("minAvailable")
    if min_available is not None and _int(min_available, f"{path}.minAvailable") != total:
        job.warn(
            f"{path}.minAvailable",
            f"{min_available} differs from the job's {total} pods; the v2 PodGroup's minMember "
            f"is always every pod ({total})",
        )
    if sp.get("minResources"):
        job.warn(
            f"{path}.minResources",
            "ignored; the v2 PodGroup's minResources is the sum of the pods' requests",
        )
    return out


# --- entry point ---------------------------------------------------------------------------------
RUNTIME_MODES = ("auto", "builtin", "own")


def _candidates(framework: str, builtins: Mapping[str, Mapping[str, Any]]) -> list[Obj]:
    """The built-ins labelled with the job's framework or with its ML policy (``mpi``: the
    DeepSpeed and MLX runtimes), ``<framework>-distributed`` first."""
    found = []
    for _, doc in sorted(builtins.items()):
        labels = (doc.get("metadata") or {}).get("labels") or {}
        policy = (doc.get("spec") or {}).get("mlPolicy") or {}
        if labels.get(c.LABEL_FRAMEWORK) == framework or framework in policy:
            found.append(dict(doc))
    preferred = f"{framework}-distributed"
    return sorted(found, key=lambda d: d["metadata"]["name"] != preferred)


def convert(
    data: Mapping[str, Any],
    label: str = "<input>",
    *,
    builtins: Mapping[str, Mapping[str, Any]] | None = None,
    runtime_mode: str = "auto",
) -> Converted:
    """Convert one v1 job document; :class:`ConvertError` when it is not one.

    ``builtins`` (name -> wire ClusterTrainingRuntime) are the built-in runtimes to try:
    ``runtime_mode`` ``auto`` references the first that fits (:mod:`trainer.convert.builtin`)
    and otherwise writes the job's own TrainingRuntime, ``builtin`` fails when none fits, and
    ``own`` always writes the job's own runtime.
    """
    if runtime_mode not in RUNTIME_MODES:
        raise ConvertError(
            f"runtime mode {runtime_mode!r} is not one of {', '.join(RUNTIME_MODES)}"
        )
    result = _convert_own(data, label)
    if runtime_mode == "own":
        result.info.append(f"uses its own TrainingRuntime ({runtime_mode} mode)")
        return result
    if builtins is None and runtime_mode == "auto":
        result.info.append("uses its own TrainingRuntime (no built-in runtimes to compare with)")
        return result
    runtime, trainjob = result.objects
    reasons: list[str] = []
    candidates = _candidates(KINDS[result.kind].framework, builtins or {})
    for builtin in candidates:
        fit = try_builtin(trainjob, runtime, builtin)
        if fit.trainjob is not None:
            result.objects = [fit.trainjob]
            result.runtime = f"{c.KIND_CLUSTER_TRAINING_RUNTIME}/{fit.runtime}"
            result.info.append(
                f"uses the built-in ClusterTrainingRuntime {fit.runtime}: it renders the same "
                "pods as the job's own runtime would"
            )
            return result
        reasons.append(fit.reason or "")
    if not candidates:
        reasons.append(
            f"no built-in runtime is for {KINDS[result.kind].framework} (label "
            f"{c.LABEL_FRAMEWORK} or mlPolicy.{KINDS[result.kind].framework})"
        )
    if runtime_mode == "builtin":
        raise ConvertError(
            f"{label}: {result.kind}/{result.name}: no built-in ClusterTrainingRuntime fits "
            f"(--runtime-mode builtin): {reasons[0]}"
        )
    result.info.append(f"uses its own TrainingRuntime: {reasons[0]}")
    return result


def _convert_own(data: Mapping[str, Any], label: str) -> Converted:
    """The job converted onto its own TrainingRuntime."""
    if not isinstance(data, Mapping):
        raise ConvertError(f"{label}: not an object")
    job = _Job(data, label)
    plan = BUILDERS[job.kind](job)

    meta: Obj = {"name": job.name}
    if job.namespace:
        meta["namespace"] = job.namespace
    trainjob_meta = dict(meta)
    labels = job.meta.get("labels")
    if isinstance(labels, Mapping) and labels:
        trainjob_meta["labels"] = dict(labels)
    annotations = {
        k: v for k, v in (job.meta.get("annotations") or {}).items() if k != LAST_APPLIED
    }
    if annotations:
        trainjob_meta["annotations"] = annotations

    trainjob_spec: Obj = {
        "runtimeRef": {
            "apiGroup": c.GROUP,
            "kind": c.KIND_TRAINING_RUNTIME,
            "name": job.name,
        }
    }
    jobset_spec: Obj = {}
    js_meta: Obj = {}
    pod_group = _run_policy(job, plan, trainjob_spec, jobset_spec, js_meta)
    for rjob in plan.jobs:
        deps = plan.depends_on.get(rjob["name"])
        if deps:
            rjob["dependsOn"] = deps
    if plan.success_policy is not None:
        jobset_spec["successPolicy"] = plan.success_policy
    jobset_spec["replicatedJobs"] = plan.jobs
    if plan.trainer:
        trainjob_spec["trainer"] = plan.trainer

    runtime_spec: Obj = {}
    if plan.ml_policy is not None:
        runtime_spec["mlPolicy"] = plan.ml_policy
    if pod_group:
        runtime_spec["podGroupPolicy"] = pod_group
    template: Obj = {}
    if js_meta:
        template["metadata"] = js_meta
    template["spec"] = jobset_spec
    runtime_spec["template"] = template
    runtime = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_TRAINING_RUNTIME,
        "metadata": {
            **meta,
            "labels": {c.LABEL_FRAMEWORK: job.info.framework},
            "annotations": {c.ANNOTATION_CONVERTED_FROM: f"{job.api_version}/{job.kind}"},
        },
        "spec": runtime_spec,
    }
    trainjob = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_TRAINJOB,
        "metadata": trainjob_meta,
        "spec": trainjob_spec,
    }
    return Converted(
        job.kind,
        job.name,
        job.namespace,
        [runtime, trainjob],
        job.warnings,
        runtime=f"{c.KIND_TRAINING_RUNTIME}/{job.name}",
    )
