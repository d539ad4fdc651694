"""The runtimes of the side-by-side corpus and what the generator needs to know about them.

``training_runtimes()`` are the TrainingRuntimes (no ``metadata.namespace``: the harness applies
them in the namespace of the TrainJobs) for what upstream's released ClusterTrainingRuntimes
do not cover: PlainML (no mlPolicy), coscheduling and Volcano gang scheduling, torch
``envInjection``, MPI with and without ``runLauncherAsNode`` (and an MPI runtime that has no
``launcher`` job), dataset and model initializers with ``dependsOn``, and Flux. Images are
short fake names: the corpus compares objects, nothing runs a real image.

``facts(runtime)`` reads any runtime dict (released or ours) into the few facts the generator
uses: framework, replicated jobs and their containers, which initializers it can take, and
the longest TrainJob name its generated names allow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

GROUP = "trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
ANCESTOR = f"{GROUP}/trainjob-ancestor-step"
INIT_VOLUME = "initializer"
# Containers a runtimePatch may not give env to.
NO_PATCH_ENV = ("node", "dataset-initializer", "model-initializer")
MAX_NAME = 63
POD_SUFFIX = "-abcde"  # the Job controller's random pod-name suffix

Obj = dict[str, Any]
Rng = random.Random


def _container(name: str, image: str, **extra: Any) -> Obj:
    return {"name": name, "image": image, **extra}


def _job(
    name: str,
    containers: list[Obj],
    *,
    ancestor: str | None = None,
    depends_on: list[Obj] | None = None,
    pod_spec: Obj | None = None,
) -> Obj:
    job: Obj = {"name": name}
    if depends_on:
        job["dependsOn"] = depends_on
    template: Obj = {}
    if ancestor:
        template["metadata"] = {"labels": {ANCESTOR: ancestor}}
    template["spec"] = {"template": {"spec": {**(pod_spec or {}), "containers": containers}}}
    job["template"] = template
    return job


def _runtime(name: str, framework: str, jobs: list[Obj], **spec: Any) -> Obj:
    """A TrainingRuntime: ``spec`` holds mlPolicy, podGroupPolicy and ``template_meta`` /
    ``jobset`` (JobSet template metadata and spec fields besides replicatedJobs)."""
    template: Obj = {"spec": {**spec.pop("jobset", {}), "replicatedJobs": jobs}}
    if "template_meta" in spec:
        template = {"metadata": spec.pop("template_meta"), **template}
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "labels": {f"{GROUP}/framework": framework}},
        "spec": {**spec, "template": template},
    }


def _requests(cpu: str, memory: str) -> Obj:
    return {"requests": {"cpu": cpu, "memory": memory}}


RANK_ENV = {
    "name": "NODE_RANK",
    "valueFrom": {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    },
}
TRAIN = "example.com/train:1"
MPI = "example.com/mpi:1"
INIT_POD = {"volumes": [{"name": INIT_VOLUME, "emptyDir": {}}]}
INIT_MOUNT = [{"name": INIT_VOLUME, "mountPath": "/workspace"}]


def _trainer_job(*containers: Obj, **kw: Any) -> Obj:
    return _job("node", list(containers), ancestor="trainer", **kw)


def _mpi(procs: int, launcher_as_node: bool, **extra: Any) -> Obj:
    return {"mpi": {"numProcPerNode": procs, "runLauncherAsNode": launcher_as_node, **extra}}


def _sshd_job() -> Obj:
    args = ["-De", "-f", "/etc/ssh/sshd_config"]
    return _job("node", [_container("node", MPI, command=["/usr/sbin/sshd"], args=args)])


def _init_job(step: str, **extra: Any) -> Obj:
    ctr = _container(step, f"example.com/{step}:1", **extra, volumeMounts=INIT_MOUNT)
    return _job(step, [ctr], ancestor=step, pod_spec=INIT_POD)


def training_runtimes() -> list[Obj]:
    """The TrainingRuntimes the corpus adds (module docstring)."""
    agent = _container("metrics-agent", "example.com/agent:1")
    launcher = _job("launcher", [_container("node", MPI)], ancestor="trainer")
    plain_node = _container(
        "node",
        TRAIN,
        command=["python3", "train.py"],
        env=[RANK_ENV],
        resources=_requests("100m", "64Mi"),
    )
    return [
        _runtime(
            "plain",
            "plain",
            [_trainer_job(plain_node, _container("log-shipper", "example.com/logs:1"))],
        ),
        _runtime(
            "torch-gang",
            "torch",
            [_trainer_job(_container("node", TRAIN, resources=_requests("1", "2Gi")), agent)],
            mlPolicy={
                "numNodes": 2,
                "torch": {
                    "envInjection": {
                        "targets": [{"jobName": "node", "containerNames": ["metrics-agent"]}]
                    }
                },
            },
            podGroupPolicy={"coscheduling": {"scheduleTimeoutSeconds": 120}},
        ),
        _runtime(
            "torch-volcano",
            "torch",
            [_trainer_job(_container("node", TRAIN, resources=_requests("500m", "1Gi")))],
            mlPolicy={"numNodes": 1, "torch": {}},
            # No networkTopology: Volcano v1.10's PodGroup CRD, the newest the module proxy
            # serves (hack/testbed/crds), lacks the field, and both controllers' applies fail.
            podGroupPolicy={"volcano": {}},
            template_meta={"annotations": {"scheduling.volcano.sh/queue-name": "default"}},
        ),
        # The CRD's defaults: OpenMPI, sshAuthMountPath /root/.ssh.
        _runtime(
            "mpi-launcher",
            "openmpi",
            [launcher, _sshd_job()],
            mlPolicy={"numNodes": 1, **_mpi(2, True)},
        ),
        _runtime(
            "mpi-workers",
            "openmpi",
            [
                _sshd_job(),
                _job(
                    "launcher",
                    [_container("node", MPI, command=["mpirun", "hostname"])],
                    ancestor="trainer",
                    depends_on=[{"name": "node", "status": "Ready"}],
                ),
            ],
            mlPolicy={
                "numNodes": 1,
                **_mpi(
                    4, False, mpiImplementation="OpenMPI", sshAuthMountPath="/home/mpiuser/.ssh"
                ),
            },
            jobset={
                "network": {"publishNotReadyAddresses": True},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
            },
        ),
        # runLauncherAsNode without a launcher job: numNodes >= 2 is refused.
        _runtime(
            "mpi-solo", "openmpi", [_trainer_job(_container("node", MPI))], mlPolicy=_mpi(1, True)
        ),
        _runtime(
            "torch-init",
            "torch",
            [
                _init_job("dataset-initializer"),
                _init_job(
                    "model-initializer", env=[{"name": "STORAGE_URI", "value": "hf://org/model"}]
                ),
                _trainer_job(
                    _container("node", TRAIN, volumeMounts=INIT_MOUNT),
                    depends_on=[
                        {"name": "dataset-initializer", "status": "Complete"},
                        {"name": "model-initializer", "status": "Complete"},
                    ],
                    pod_spec=INIT_POD,
                ),
            ],
            mlPolicy={"numNodes": 1, "torch": {}},
        ),
        _runtime(
            "flux",
            "flux",
            [_trainer_job(_container("node", "example.com/flux:1"))],
            mlPolicy={"numNodes": 1, "flux": {"numProcPerNode": 2}},
        ),
    ]


@dataclass(frozen=True)
class Job:
    """One replicated job of a runtime."""

    name: str
    ancestor: str | None
    containers: tuple[str, ...]
    mounts_initializer: tuple[str, ...]  # containers that mount the ``initializer`` volume


@dataclass(frozen=True)
class Facts:
    """What the generator knows of one runtime."""

    name: str
    kind: str  # ClusterTrainingRuntime | TrainingRuntime
    framework: str  # torch, torchtune, mpi, jax, xgboost, flux, plain
    jobs: tuple[Job, ...]
    launcher_as_node: bool
    volcano: bool
    has_dataset: bool  # a dataset-initializer job whose container mounts ``initializer``
    has_model: bool
    claims: tuple[str, ...]  # volumeClaimPolicies template names (PVC ``<claim>-<trainjob>``)

    def job(self, name: str) -> Job | None:
        return next((j for j in self.jobs if j.name == name), None)

    @property
    def trainer_job(self) -> Job:
        return next(j for j in self.jobs if j.ancestor == "trainer")

    @property
    def name_budget(self) -> int:
        """The longest TrainJob name whose generated Job, Pod and PVC names fit in 63
        characters, for node counts below 10: ``<name>-<rjob>-0-<k>-abcde`` for each job,
        ``<claim>-<name>`` for the runtime's PVC templates; trainer/admission/names.py)."""
        budget = MAX_NAME
        for job in self.jobs:
            budget = min(budget, MAX_NAME - len(f"-{job.name}-0-0{POD_SUFFIX}"))
        for claim in self.claims:
            budget = min(budget, MAX_NAME - len(f"{claim}-"))
        return budget


def _framework(runtime: Obj) -> str:
    policy = runtime["spec"].get("mlPolicy") or {}
    for key in ("torch", "mpi", "jax", "xgboost", "flux"):
        if key in policy:
            if key == "torch" and runtime["metadata"]["name"].startswith("torchtune-"):
                return "torchtune"
            return key
    return "plain"


def facts(runtime: Obj) -> Facts:
    """The :class:`Facts` of a runtime dict (a released one or one of ours)."""
    jobs = []
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        template = rjob["template"]
        labels = (template.get("metadata") or {}).get("labels") or {}
        pod = template["spec"]["template"]["spec"]
        ctrs = pod.get("containers") or []
        mounting = tuple(
            c["name"]
            for c in ctrs
            if any(m["name"] == INIT_VOLUME for m in c.get("volumeMounts") or [])
        )
        jobs.append(
            Job(rjob["name"], labels.get(ANCESTOR), tuple(c["name"] for c in ctrs), mounting)
        )
    policy = runtime["spec"].get("mlPolicy") or {}
    by_name = {j.name: j for j in jobs}

    def takes(step: str) -> bool:
        job = by_name.get(step)
        return job is not None and step in job.mounts_initializer

    return Facts(
        name=runtime["metadata"]["name"],
        kind=runtime["kind"],
        framework=_framework(runtime),
        jobs=tuple(jobs),
        launcher_as_node=bool((policy.get("mpi") or {}).get("runLauncherAsNode")),
        volcano="volcano" in (runtime["spec"].get("podGroupPolicy") or {}),
        has_dataset=takes("dataset-initializer"),
        has_model=takes("model-initializer"),
        claims=tuple(
            t["metadata"]["name"]
            for p in runtime["spec"]["template"]["spec"].get("volumeClaimPolicies") or []
            for t in p.get("templates") or []
        ),
    )


# --------------------------------------------------------------------------- TrainJob fields

ENV_VALUES = [
    ("LOG_LEVEL", "debug"),
    ("EPOCHS", "3"),
    ("BATCH_SIZE", "64"),
    ("PYTHONUNBUFFERED", "1"),
    ("HF_HOME", "/workspace/cache"),
]
FIELD_REFS = [
    ("POD_NAME", "metadata.name"),
    ("POD_NAMESPACE", "metadata.namespace"),
    ("POD_IP", "status.podIP"),
    ("JOB_INDEX", "metadata.annotations['batch.kubernetes.io/job-completion-index']"),
]
# Env a runtime sets itself, overridden by the TrainJob (upsert by name).
OVERRIDES = {
    "plain": [("NODE_RANK", "0")],
    "flux": [("FLUX_NETWORK_DEVICE", "eth1"), ("FLUX_QUEUE_POLICY", "easy")],
    "torch-distributed-with-cache": [("TRAIN_JOB_NAME", "renamed")],
}
COMMANDS = {
    "torch": [["torchrun", "train.py"], ["python3", "-m", "train"]],
    "torchtune": [["tune", "run"], ["tune", "run"], ["python3", "finetune.py"]],
    "mpi": [["mpirun", "--allow-run-as-root", "python3", "train.py"], ["deepspeed", "train.py"]],
    "jax": [["python3", "train_jax.py"]],
    "xgboost": [["python3", "train_xgb.py"]],
    "flux": [["lmp", "-in", "in.reaxc.hns"], ["hostname"]],
    "plain": [["python3", "main.py"], ["sh", "-c", "echo hello"]],
}
ARGS = ["--epochs=2", "--lr", "0.01", "--batch-size=32", "--seed=7"]
TUNE_ARGS = [
    "epochs=1",
    "batch_size=2",
    "model.lora_attn_modules=[q_proj,v_proj]",
    "dataset.split=train[:10%]",
]
DATASET_URIS = ["hf://tatsu-lab/alpaca", "s3://datasets/imagenet/train", "hf://org/data", ""]
MODEL_URIS = ["hf://meta-llama/Llama-3.2-1B-Instruct", "hf://Qwen/Qwen2.5-1.5B-Instruct", ""]
MANAGERS = [
    "example.com/patcher",
    "platform.example.org/team-a",
    "acme.io/quota",
    "example.com/scheduler-hints",
]
CPU = [("500m", "1"), ("1", "2"), ("2", "2"), ("2500m", "4")]
MEMORY = [("512Mi", "512Mi"), ("1Gi", "2Gi"), ("4Gi", "8Gi")]


def env_var(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def _field_env(rng: Rng, name: str, path: str) -> Obj:
    ref: Obj = {"fieldPath": path}
    if rng.random() < 0.3:
        ref = {"apiVersion": "v1", **ref}
    return {"name": name, "valueFrom": {"fieldRef": ref}}


def _trainer_env(rng: Rng, rt: Facts) -> list[Obj]:
    env = [env_var(n, v) for n, v in rng.sample(ENV_VALUES, rng.randint(0, 2))]
    env += [_field_env(rng, n, p) for n, p in rng.sample(FIELD_REFS, rng.randint(0, 2))]
    key = rt.framework if rt.framework in OVERRIDES else rt.name
    if key in OVERRIDES and rng.random() < 0.5:
        env.append(env_var(*rng.choice(OVERRIDES[key])))
    return env or [env_var(*rng.choice(ENV_VALUES))]


def _resources(rng: Rng) -> Obj:
    requests: dict[str, str | int] = {}
    limits: dict[str, str | int] = {}
    for kind, pairs in (("cpu", CPU), ("memory", MEMORY)):
        if rng.random() < 0.7:
            req, lim = rng.choice(pairs)
            where = rng.choice(["requests", "limits", "both"])
            if where != "limits":
                requests[kind] = req
            if where != "requests":
                limits[kind] = lim
    if rng.random() < 0.35 or not (requests or limits):
        gpus = rng.choice([1, 2, 4])
        limits["nvidia.com/gpu"] = gpus
        if rng.random() < 0.4:
            requests["nvidia.com/gpu"] = gpus
    out: Obj = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _num_nodes_choices(rt: Facts) -> list[int | None]:
    if rt.framework == "torchtune" or (rt.launcher_as_node and rt.job("launcher") is None):
        return [None, 1]
    return [None, 1, 1, 2, 2, 3, 4]


def trainer_spec(rng: Rng, rt: Facts) -> Obj | None:
    """``spec.trainer``: absent, empty (set, so the plugins inject their env), or a random
    choice of its fields."""
    draw = rng.random()
    if draw < 0.1:
        return None
    trainer: Obj = {}
    if draw < 0.14:
        return trainer
    if rng.random() < 0.3:
        trainer["image"] = f"example.com/{rt.framework}:{rng.randint(2, 9)}"
    if rng.random() < (0.75 if rt.framework == "torchtune" else 0.45):
        trainer["command"] = list(rng.choice(COMMANDS[rt.framework]))
    tune = trainer.get("command") == ["tune", "run"]
    if rng.random() < 0.35:
        pool = TUNE_ARGS if tune else ARGS
        trainer["args"] = rng.sample(pool, rng.randint(1, len(pool)))
    if rng.random() < 0.45:
        trainer["env"] = _trainer_env(rng, rt)
    nodes = rng.choice(_num_nodes_choices(rt))
    if nodes is not None and nodes > 1 and rng.random() < 0.04:
        nodes = 0  # admitted: the trainer job gets parallelism 0
    if nodes is not None:
        trainer["numNodes"] = nodes
    if rng.random() < 0.35:
        trainer["numProcPerNode"] = rng.choice([1, 2, 4, 8])
    if rng.random() < 0.45:
        trainer["resourcesPerNode"] = _resources(rng)
    return trainer


def _init_config(rng: Rng, uris: list[str]) -> Obj:
    config: Obj = {}
    if rng.random() < 0.85:
        config["storageUri"] = rng.choice(uris)
    if rng.random() < 0.3:
        config["env"] = [env_var("HF_HUB_OFFLINE", "1")]
        if rng.random() < 0.3:  # the user's STORAGE_URI wins over storageUri
            config["env"].append(env_var("STORAGE_URI", "s3://override/path"))
    if rng.random() < 0.3:
        config["secretRef"] = {"name": rng.choice(["hf-token", "s3-credentials"])}
    return config


def initializer_spec(rng: Rng, rt: Facts) -> Obj | None:
    """``spec.initializer``: dataset and model configs where the runtime can take them."""
    init: Obj = {}
    if rt.has_dataset and rng.random() < 0.6:
        init["dataset"] = _init_config(rng, DATASET_URIS)
    if rt.has_model and rng.random() < 0.6:
        init["model"] = _init_config(rng, MODEL_URIS)
    return init or None


NODE_LABELS = (("type", "kwok"), ("kubernetes.io/os", "linux"), ("nvidia.com/gpu.present", "true"))
SERVICE_ACCOUNTS = ("training-sa", "patched-sa")
"""ServiceAccounts the pod patches name: kube-apiserver refuses a pod whose ServiceAccount
does not exist, so the run creates them (with the ConfigMap and Secrets the corpus names:
:func:`support_objects`)."""


def support_objects() -> list[Obj]:
    """What the corpus's pods refer to, created in each run's namespace before its TrainJobs."""
    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n}}
        for n in SERVICE_ACCOUNTS
    ]
    objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}})
    objects += [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": n}, "stringData": {"k": "v"}}
        for n in ("hf-token", "s3-credentials")
    ]
    return objects


def _meta(rng: Rng, tag: str, kinds: tuple[str, ...] = ("labels", "annotations")) -> Obj:
    meta: Obj = {}
    for kind in rng.sample(kinds, rng.randint(1, len(kinds))):
        meta[kind] = {f"example.com/{tag}": rng.choice(["a", "b", "c"])}
    return meta


def _pod_spec_patch(rng: Rng, rt: Facts, job: str, k: int) -> Obj:
    spec: Obj = {}
    if rng.random() < 0.4:
        # Labels the bed's KWOK nodes carry, so that the pods run on both sides.
        spec["nodeSelector"] = dict([rng.choice(NODE_LABELS)])
    if rng.random() < 0.3:
        spec["tolerations"] = [
            {"key": "example.com/training", "operator": "Exists", "effect": "NoSchedule"},
            {"key": f"dedicated-{k}", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
        ][: rng.randint(1, 2)]
    if rng.random() < 0.2:
        spec["serviceAccountName"] = rng.choice(SERVICE_ACCOUNTS)
    containers: dict[str, Obj] = {}
    names = found.containers if (found := rt.job(job)) else ()
    if rng.random() < 0.3:
        volume = f"scratch-{k}"
        source: Obj = {"emptyDir": {}} if rng.random() < 0.7 else {"configMap": {"name": "cfg"}}
        spec["volumes"] = [{"name": volume, **source}]
        for ctr in rng.sample(names, rng.randint(1, len(names))):
            mount = {"name": volume, "mountPath": f"/mnt/patch-{k}"}
            containers.setdefault(ctr, {"name": ctr})["volumeMounts"] = [mount]
    sidecars = [n for n in names if n not in NO_PATCH_ENV]
    if sidecars and rng.random() < 0.5:
        ctr = rng.choice(sidecars)
        containers.setdefault(ctr, {"name": ctr})["env"] = [env_var("PATCHED_BY", f"manager-{k}")]
    if containers:
        spec["containers"] = [containers[n] for n in names if n in containers]
    return spec


def _job_patch(rng: Rng, rt: Facts, job: str, k: int) -> Obj:
    template: Obj = {}
    if rng.random() < 0.25:
        template["metadata"] = _meta(rng, f"job-patch-{k}")
    pod: Obj = {}
    if rng.random() < 0.45:
        pod["metadata"] = _meta(rng, f"pod-patch-{k}")
    spec = _pod_spec_patch(rng, rt, job, k)
    if spec:
        pod["spec"] = spec
    if pod:
        template["spec"] = {"template": pod}
    return {"name": job, "template": template} if template else {"name": job}


def runtime_patch(rng: Rng, rt: Facts, manager: str, k: int) -> Obj:
    """One manager's patch (the ``k``-th of its TrainJob): JobSet metadata and/or some of the
    runtime's replicated jobs (Job and pod metadata, pod fields, existing containers)."""
    template: Obj = {}
    if rng.random() < 0.45:
        template["metadata"] = _meta(rng, f"jobset-patch-{k}")
    if rng.random() < 0.8 or not template:
        jobs = rng.sample([j.name for j in rt.jobs], rng.randint(1, len(rt.jobs)))
        template["spec"] = {"replicatedJobs": [_job_patch(rng, rt, j, k) for j in jobs]}
    return {"manager": manager, "trainingRuntimeSpec": {"template": template}}


def runtime_patches(rng: Rng, rt: Facts) -> list[Obj]:
    """None, one or two patches, from distinct managers."""
    n = rng.choices([0, 1, 2], [50, 35, 15])[0]
    return [runtime_patch(rng, rt, m, k) for k, m in enumerate(rng.sample(MANAGERS, n))]


def runtime_ref(rng: Rng, rt: Facts) -> Obj:
    """``spec.runtimeRef``, with kind (required for TrainingRuntime) and apiGroup sometimes
    left to their CRD defaults."""
    ref: Obj = {"name": rt.name}
    if rt.kind == "TrainingRuntime" or rng.random() < 0.5:
        ref["kind"] = rt.kind
    if rng.random() < 0.5:
        ref["apiGroup"] = GROUP
    return ref
