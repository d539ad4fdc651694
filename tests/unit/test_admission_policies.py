"""The per-plugin TrainJob admission rules (the Validate phase, this project's data cache): for each
rule an accepted and a rejected case, asserting the exact path, type and message a user sees."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import yaml

from tests import builders as b
from trainer.admission.types import ClusterView, Verdict
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.machinery.errors import FORBIDDEN, INVALID
from trainer.plugins.registry import default_framework
from trainer.runtime.assemble import new_info
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.info import Info

Err = tuple[str, str, str]


@cache
def builtin(name: str) -> ClusterTrainingRuntime:
    return builtin_runtimes()[name]


def runtime(text: str) -> ClusterTrainingRuntime:
    return ClusterTrainingRuntime.from_wire(yaml.safe_load(text))


def trainjob(ref: str = "rt", trainer: dict[str, Any] | None = None, **spec: Any) -> TrainJob:
    """A TrainJob in ``team`` on the ClusterTrainingRuntime ``ref``."""
    return b.trainjob_model(
        namespace="team",
        uid="uid-1",
        runtime=ref,
        runtime_kind="ClusterTrainingRuntime",
        trainer=trainer,
        **spec,
    )


def verdict(job: TrainJob, rt: ClusterTrainingRuntime, view: ClusterView | None = None) -> Verdict:
    return validate_policies(new_info(job, rt), None, view or ClusterView())


def validate_policies(info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
    """The Validate phase of every registered plugin."""
    return default_framework().validate(info, old, view)


def errors(job: TrainJob, rt: ClusterTrainingRuntime, view: ClusterView | None = None) -> list[Err]:
    v = verdict(job, rt, view)
    assert v.warnings == []
    return [(e.path, e.type, e.message) for e in v.errors]


def env(*names: str) -> list[dict[str, str]]:
    return [{"name": n, "value": "x"} for n in names]


def reserved(names: str) -> Err:
    return (
        "spec.trainer.env",
        INVALID,
        f"must not have reserved envs, invalid envs configured: [{names}]",
    )


# --- Runtimes ------------------------------------------------------------------------------------
def one_job_runtime(policy: str, extra_pod: str = "", metadata: str = "", pgp: str = "") -> str:
    return f"""
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: rt}}
spec:
  mlPolicy: {{numNodes: 1, {policy}}}
  {pgp}
  template:
    {metadata}
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  {extra_pod}
                  containers: [{{name: node, image: img}}]
"""


TORCH = runtime(one_job_runtime("torch: {}"))
JAX = runtime(one_job_runtime("jax: {}"))
XGBOOST = runtime(one_job_runtime("xgboost: {}"))

ENV_INJECTION = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt}
spec:
  mlPolicy:
    numNodes: 1
    torch:
      envInjection:
        targets: TARGETS
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers: [{name: node, image: img}]
        - name: aux
          template:
            spec:
              template:
                spec:
                  initContainers: [{name: init-helper, image: img}]
                  containers: [{name: helper, image: img}]
"""


def env_injection(targets: list[dict[str, Any]]) -> ClusterTrainingRuntime:
    data = yaml.safe_load(ENV_INJECTION)
    data["spec"]["mlPolicy"]["torch"]["envInjection"]["targets"] = targets
    return ClusterTrainingRuntime.from_wire(data)


def mpi_runtime(
    jobs: tuple[str, ...], run_launcher_as_node: bool, implementation: str = "OpenMPI"
) -> ClusterTrainingRuntime:
    """An MPI runtime with the given jobs; the first one is the trainer step."""
    replicated = [
        b.replicated_job(
            name,
            ancestor="trainer" if i == 0 else None,
            containers=[b.container("node", "mpi")],
        )
        for i, name in enumerate(jobs)
    ]
    return b.cluster_runtime_model(
        "rt",
        ml_policy={
            "numNodes": 1,
            "mpi": {
                "numProcPerNode": 1,
                "runLauncherAsNode": run_launcher_as_node,
                "mpiImplementation": implementation,
            },
        },
        replicated_jobs=replicated,
    )


MPI = mpi_runtime(("launcher", "node"), run_launcher_as_node=False)
MPICH = mpi_runtime(("launcher", "node"), run_launcher_as_node=False, implementation="MPICH")


# --- Torch: reserved env -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("trainer", "want"),
    [
        pytest.param(None, [], id="no-trainer"),
        pytest.param({"env": env("FOO", "MASTER_ADDR")}, [], id="ordinary-env"),
        pytest.param({"env": env("PET_MASTER_PORT")}, [reserved("PET_MASTER_PORT")], id="one"),
        pytest.param(
            {"env": env("PET_NODE_RANK", "FOO", "PET_NNODES", "PET_NPROC_PER_NODE")},
            [reserved("PET_NNODES PET_NODE_RANK PET_NPROC_PER_NODE")],
            id="several-sorted",
        ),
    ],
)
def test_torch_reserved_env(trainer: dict[str, Any] | None, want: list[Err]) -> None:
    assert errors(trainjob(trainer=trainer), TORCH) == want


def test_torch_reserved_env_only_for_torch() -> None:
    job = trainjob(trainer={"env": env("PET_NNODES")})
    assert errors(job, JAX) == []
    assert errors(job, XGBOOST) == []


# --- Torch: envInjection -------------------------------------------------------------------------
def injection_error(job: str, container: str) -> Err:
    return (
        "spec.runtimeRef",
        INVALID,
        f'envInjection target podSet "{job}" container "{container}" not found in runtime template',
    )


@pytest.mark.parametrize(
    ("targets", "want"),
    [
        pytest.param(
            [{"jobName": "aux", "containerNames": ["helper", "init-helper"]}],
            [],
            id="regular-and-init-container",
        ),
        pytest.param(
            [{"jobName": "aux", "containerNames": ["helper", "missing"]}],
            [injection_error("aux", "missing")],
            id="missing-container",
        ),
        pytest.param(
            [
                {"jobName": "nope", "containerNames": ["a", "b"]},
                {"jobName": "node", "containerNames": ["helper"]},
            ],
            [
                injection_error("nope", "a"),
                injection_error("nope", "b"),
                injection_error("node", "helper"),
            ],
            id="missing-job-and-container-in-other-job",
        ),
    ],
)
def test_torch_env_injection(targets: list[dict[str, Any]], want: list[Err]) -> None:
    rt = env_injection(targets)
    # Checked with or without spec.trainer: it is about the runtime the TrainJob picks.
    assert errors(trainjob(), rt) == want
    assert errors(trainjob(trainer={"image": "x"}), rt) == want


def test_env_injection_check_leaves_info_untouched() -> None:
    rt = env_injection([{"jobName": "aux", "containerNames": ["helper"]}])
    info = new_info(trainjob(), rt)
    before = info.spec.to_wire()
    validate_policies(info, None, ClusterView())
    assert info.spec.to_wire() == before


# --- TorchTune -----------------------------------------------------------------------------------
LLAMA_1B = "torchtune-llama3.2-1b"
LLAMA_3B = "torchtune-llama3.2-3b"
LLAMA_70B = "torchtune-llama3.3-70b"
QWEN = "torchtune-qwen2.5-1.5b"
LORA = "model.lora_attn_modules=[q_proj,v_proj]"
QLORA = "model.quantize_base=True"


def tune(ref: str, **trainer: Any) -> TrainJob:
    return trainjob(ref, {"command": ["tune", "run"], **trainer})


def tune_errors(job: TrainJob) -> list[Err]:
    # The shipped torchtune runtimes (node limits nvidia.com/gpu: 2); the model comes from
    # the TrainJob's runtimeRef name, as upstream.
    return errors(job, builtin(LLAMA_1B))


def qlora_device_errors(model: str) -> list[Err]:
    return [
        (
            "spec.trainer.numProcPerNode",
            INVALID,
            f"must be auto or 1 for {model} model when using QLoRA",
        ),
        (
            "spec.trainer.resourcesPerNode",
            INVALID,
            f"must have gpu resource with value 1 for {model} model when using QLoRA",
        ),
    ]


def lora_multi_node() -> Err:
    return (
        "spec.trainer.numNodes",
        INVALID,
        "LoRA fine-tuning is not supported for multi-node training in TorchTune",
    )


def immutable(i: int, key: str) -> Err:
    return (
        f"spec.trainer.args[{i}]",
        INVALID,
        f'must not set immutable config "{key}" in trainer args; it is managed by the runtime',
    )


GPU1 = {"limits": {"nvidia.com/gpu": 1}}


@pytest.mark.parametrize(
    ("job", "want"),
    [
        # Supported models.
        pytest.param(tune(LLAMA_1B), [], id="llama-1b"),
        pytest.param(tune(QWEN, args=["epochs=1"]), [], id="qwen-full"),
        pytest.param(
            tune("torchtune-llama3.1-70b"),
            [
                (
                    "spec.runtimeRef.name",
                    INVALID,
                    "must have a supported pretrained model, invalid model configured: "
                    "llama3_1/70B",
                )
            ],
            id="unsupported-model",
        ),
        pytest.param(
            tune("my-tune"),
            [
                (
                    "spec.runtimeRef.name",
                    INVALID,
                    "must have a supported pretrained model, invalid model configured: ",
                )
            ],
            id="name-not-three-parts",
        ),
        # Multi-node: 70B only.
        pytest.param(tune(LLAMA_70B, numNodes=4), [], id="70b-multi-node"),
        pytest.param(
            tune(LLAMA_1B, numNodes=2),
            [("spec.trainer.numNodes", INVALID, "must be 1 for llama3_2/1B model")],
            id="1b-multi-node",
        ),
        # QLoRA: never for qwen, single device only for llama 3.2.
        pytest.param(
            tune(QWEN, args=[QLORA]),
            [("spec.runtimeRef.name", INVALID, "QLoRA is not supported for qwen2_5/1.5B model")],
            id="qwen-qlora-distributed",
        ),
        pytest.param(
            tune(QWEN, args=[QLORA], numProcPerNode=1),
            [("spec.runtimeRef.name", INVALID, "QLoRA is not supported for qwen2_5/1.5B model")],
            id="qwen-qlora-single-device",
        ),
        pytest.param(tune(LLAMA_1B, args=[QLORA], numProcPerNode=1), [], id="1b-qlora-1-proc"),
        pytest.param(
            tune(LLAMA_1B, args=[QLORA], numProcPerNode=2, resourcesPerNode=GPU1),
            [],
            id="1b-qlora-1-gpu-is-single-device",
        ),
        pytest.param(tune(LLAMA_3B, args=[QLORA], resourcesPerNode=GPU1), [], id="3b-qlora-1-gpu"),
        pytest.param(
            tune(LLAMA_1B, args=[QLORA]),
            qlora_device_errors("llama3_2/1B"),
            id="1b-qlora-2-gpus",
        ),
        pytest.param(
            tune(LLAMA_3B, args=[QLORA], numProcPerNode=2),
            qlora_device_errors("llama3_2/3B"),
            id="3b-qlora-2-procs",
        ),
        pytest.param(
            tune(LLAMA_1B, args=[QLORA, "model.use_dora=True"]), [], id="dora-is-not-qlora"
        ),
        pytest.param(tune(LLAMA_70B, args=[QLORA]), [], id="70b-qlora-distributed"),
        # LoRA / QLoRA on several nodes.
        pytest.param(tune(LLAMA_70B, args=[LORA]), [], id="70b-lora-one-node"),
        pytest.param(
            tune(LLAMA_70B, args=[LORA], numNodes=2), [lora_multi_node()], id="70b-lora-2-nodes"
        ),
        pytest.param(
            tune(LLAMA_70B, args=[QLORA], numNodes=3), [lora_multi_node()], id="70b-qlora-3-nodes"
        ),
        pytest.param(
            tune(LLAMA_1B, args=[LORA], numNodes=2),
            [
                ("spec.trainer.numNodes", INVALID, "must be 1 for llama3_2/1B model"),
                lora_multi_node(),
            ],
            id="1b-lora-2-nodes",
        ),
        # Keys the runtime manages.
        pytest.param(
            tune(LLAMA_1B, args=["epochs=2", "batch_size=4", "dataset.packed=True"]),
            [],
            id="free-args",
        ),
        pytest.param(
            tune(
                QWEN,
                args=[
                    "output_dir=/tmp/out",
                    "epochs=1",
                    "tokenizer.path=/t",
                    "checkpointer.checkpoint_dir=/c",
                    "tokenizer.merges_file=/m",
                ],
            ),
            [
                immutable(0, "output_dir"),
                immutable(2, "tokenizer.path"),
                immutable(3, "checkpointer.checkpoint_dir"),
                immutable(4, "tokenizer.merges_file"),
            ],
            id="immutable-keys",
        ),
    ],
)
def test_torchtune(job: TrainJob, want: list[Err]) -> None:
    assert tune_errors(job) == want


def test_torchtune_only_for_exact_tune_run() -> None:
    """Another command (even one starting with tune run) is plain torchrun: no model checks."""
    for command in (["tune", "run", "lora_finetune"], ["torchrun", "train.py"]):
        job = trainjob("weird", {"command": command, "numNodes": 2, "args": ["output_dir=/x"]})
        assert tune_errors(job) == []


def test_torchtune_collects_every_error() -> None:
    job = tune(
        "torchtune-llama3.2-1b",
        numNodes=2,
        args=[LORA, "output_dir=/o"],
        env=env("PET_NNODES"),
    )
    assert tune_errors(job) == [
        reserved("PET_NNODES"),
        ("spec.trainer.numNodes", INVALID, "must be 1 for llama3_2/1B model"),
        lora_multi_node(),
        immutable(1, "output_dir"),
    ]


def test_torchtune_error_values() -> None:
    v = verdict(tune(LLAMA_1B, numNodes=2, args=[QLORA, "output_dir=/o"]), builtin(LLAMA_1B))
    values = {e.path: e.value for e in v.errors}
    assert values["spec.trainer.numNodes"] == 2
    assert values["spec.trainer.args[1]"] == "output_dir=/o"


# --- MPI -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("names", "want"),
    [
        pytest.param(("FOO", "PET_NNODES"), [], id="ordinary-env"),
        pytest.param(
            ("OMPI_MCA_plm_rsh_args", "FOO", "OMPI_MCA_orte_default_hostfile"),
            [reserved("OMPI_MCA_orte_default_hostfile OMPI_MCA_plm_rsh_args")],
            id="openmpi",
        ),
        pytest.param(
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "OMPI_MCA_orte_set_default_slots"),
            [reserved("OMPI_MCA_orte_keep_fqdn_hostnames OMPI_MCA_orte_set_default_slots")],
            id="openmpi-2",
        ),
        pytest.param(
            (
                "I_MPI_PERHOST",
                "HYDRA_HOST_FILE",
                "HYDRA_LAUNCH_EXTRA_ARGS",
                "I_MPI_HYDRA_HOST_FILE",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
            ),
            [
                reserved(
                    "HYDRA_HOST_FILE HYDRA_LAUNCH_EXTRA_ARGS I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS "
                    "I_MPI_HYDRA_HOST_FILE I_MPI_PERHOST"
                )
            ],
            id="mpich-and-intel-names-too",
        ),
    ],
)
def test_mpi_reserved_env(names: tuple[str, ...], want: list[Err]) -> None:
    assert errors(trainjob(trainer={"env": env(*names)}), MPI) == want


@pytest.mark.parametrize("runtime", [MPI, MPICH], ids=["openmpi", "mpich"])
@pytest.mark.parametrize(
    ("names", "want"),
    [
        pytest.param(("FOO", "MPI4PY_LIBMPI"), [], id="ordinary-env"),
        pytest.param(
            ("HYDRA_LAUNCHER_EXTRA_ARGS", "HYDRA_CONFIG_FILE", "HYDRA_HOST_FILE"),
            [reserved("HYDRA_CONFIG_FILE HYDRA_HOST_FILE HYDRA_LAUNCHER_EXTRA_ARGS")],
            id="hydra",
        ),
        pytest.param(
            ("OMPI_MCA_plm_rsh_args", "PRTE_MCA_prte_default_hostfile"),
            [reserved("OMPI_MCA_plm_rsh_args PRTE_MCA_prte_default_hostfile")],
            id="openmpi",
        ),
    ],
)
def test_mpich_runtimes_reserve_the_same_env_as_openmpi_ones(
    runtime: ClusterTrainingRuntime, names: tuple[str, ...], want: list[Err]
) -> None:
    """A TrainJob is judged the same way on every MPI runtime: the launcher env of every
    implementation is reserved, Hydra's three names included."""
    assert errors(trainjob(trainer={"env": env(*names)}), runtime) == want


LAUNCHER_AS_NODE = (
    "spec.trainer.numNodes",
    INVALID,
    "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have either "
    "launcher and node",
)


@pytest.mark.parametrize(
    ("jobs", "as_node", "num_nodes", "want"),
    [
        pytest.param(("launcher", "node"), True, 3, [], id="launcher-and-node"),
        pytest.param(("node",), True, 1, [], id="no-launcher-one-node"),
        pytest.param(("node",), True, None, [], id="no-launcher-default-one-node"),
        pytest.param(("node",), False, 4, [], id="no-launcher-not-as-node"),
        pytest.param(("node",), True, 2, [LAUNCHER_AS_NODE], id="no-launcher"),
        pytest.param(("launcher", "worker"), True, 2, [LAUNCHER_AS_NODE], id="no-node"),
    ],
)
@pytest.mark.parametrize("implementation", ["OpenMPI", "MPICH"])
def test_mpi_run_launcher_as_node(
    jobs: tuple[str, ...],
    as_node: bool,
    num_nodes: int | None,
    want: list[Err],
    implementation: str,
) -> None:
    trainer = {"numNodes": num_nodes} if num_nodes is not None else {"image": "x"}
    runtime = mpi_runtime(jobs, as_node, implementation)
    assert errors(trainjob(trainer=trainer), runtime) == want


def test_mpi_rules_need_spec_trainer() -> None:
    assert errors(trainjob(), mpi_runtime(("node",), True)) == []


# --- XGBoost -------------------------------------------------------------------------------------
def test_xgboost_reserved_env() -> None:
    job = trainjob(trainer={"env": env("A", "DMLC_TASK_ID", "PET_NNODES", "DMLC_NUM_WORKER")})
    assert errors(job, XGBOOST) == [
        ("spec.trainer.env[1]", FORBIDDEN, "DMLC_TASK_ID is reserved for the XGBoost runtime"),
        ("spec.trainer.env[3]", FORBIDDEN, "DMLC_NUM_WORKER is reserved for the XGBoost runtime"),
    ]
    job = trainjob(trainer={"env": env("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT")})
    assert [e[0] for e in errors(job, XGBOOST)] == ["spec.trainer.env[0]", "spec.trainer.env[1]"]


def test_xgboost_accepts_ordinary_env() -> None:
    assert errors(trainjob(trainer={"env": env("A", "DMLC_OTHER")}), XGBOOST) == []
    assert errors(trainjob(trainer={"env": env("DMLC_TASK_ID")}), TORCH) == []


# --- JAX -----------------------------------------------------------------------------------------
def test_jax_has_no_rules() -> None:
    job = trainjob(trainer={"env": env("JAX_NUM_PROCESSES", "JAX_PROCESS_ID"), "numNodes": 8})
    assert errors(job, JAX) == []


# --- Volcano -------------------------------------------------------------------------------------
def volcano_runtime(queue: str | None, priority_class: str | None) -> ClusterTrainingRuntime:
    metadata = ""
    if queue is not None:
        metadata = f"metadata: {{annotations: {{scheduling.volcano.sh/queue-name: '{queue}'}}}}"
    pod = f"priorityClassName: {priority_class}" if priority_class else ""
    return runtime(one_job_runtime("torch: {}", pod, metadata, "podGroupPolicy: {volcano: {}}"))


EMPTY_QUEUE = (
    "spec.annotations[scheduling.volcano.sh/queue-name]",
    INVALID,
    "Volcano queue name must not be empty",
)
NO_PRIORITY_CLASS = (
    "spec.templateSpec.priorityClassName",
    INVALID,
    'PriorityClass "high" doesn\'t exist: priorityclasses.scheduling.k8s.io "high" not found',
)


@pytest.mark.parametrize(
    ("queue", "pc", "known", "want"),
    [
        pytest.param("team-a", "high", frozenset({"high"}), [], id="all-known"),
        pytest.param(None, None, None, [], id="no-queue-default"),
        pytest.param("", None, None, [EMPTY_QUEUE], id="empty-queue-classes-unknown"),
        pytest.param("", "high", frozenset({"high"}), [EMPTY_QUEUE], id="empty-queue"),
        pytest.param("q", "high", None, [], id="classes-unknown-skips-lookup"),
        pytest.param("q", "high", frozenset(), [NO_PRIORITY_CLASS], id="missing-class"),
        pytest.param("", "high", frozenset({"low"}), [EMPTY_QUEUE, NO_PRIORITY_CLASS], id="both"),
    ],
)
def test_volcano(
    queue: str | None, pc: str | None, known: frozenset[str] | None, want: list[Err]
) -> None:
    view = ClusterView(priority_classes=known)
    assert errors(trainjob(trainer={"image": "x"}), volcano_runtime(queue, pc), view) == want


def test_volcano_inactive_without_policy() -> None:
    rt = runtime(
        one_job_runtime(
            "torch: {}", metadata="metadata: {annotations: {scheduling.volcano.sh/queue-name: ''}}"
        )
    )
    assert errors(trainjob(), rt, ClusterView(priority_classes=frozenset())) == []


# --- Flux ----------------------------------------------------------------------------------------
def test_flux_reserved_init_container() -> None:
    bad = runtime(
        one_job_runtime("flux: {}", "initContainers: [{name: flux-installer, image: mine}]")
    )
    assert errors(trainjob(), bad) == [
        ("spec.trainer.initContainers", INVALID, "InitContainer 'flux-installer' is reserved")
    ]
    ok = runtime(one_job_runtime("flux: {}", "initContainers: [{name: setup, image: mine}]"))
    assert errors(trainjob(), ok) == []


# --- Data cache ----------------------------------------------------------------------------------
CACHE_NO_POLICY = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt}
spec:
  template:
    spec:
      replicatedJobs:
        - name: cache
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: cache-initializer}
            spec:
              template:
                spec:
                  containers: [{name: cache-initializer, image: cache}]
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers: [{name: node, image: img}]
"""


@pytest.mark.parametrize(
    ("rt", "names", "want"),
    [
        pytest.param("torch-distributed-with-cache", ("FOO",), [], id="ordinary-env"),
        pytest.param(
            "torch-distributed-with-cache",
            ("DATA_CACHE_ENDPOINT",),
            [reserved("DATA_CACHE_ENDPOINT")],
            id="cache-endpoint",
        ),
        pytest.param(
            "torch-distributed-with-cache",
            ("PET_NNODES", "DATA_CACHE_ENDPOINT"),
            [reserved("DATA_CACHE_ENDPOINT PET_NNODES")],
            id="merged-with-torch-names",
        ),
        pytest.param(
            "torch-distributed-with-cache",
            ("DATA_CACHE_CREDENTIAL_FILE",),
            [reserved("DATA_CACHE_CREDENTIAL_FILE")],
            id="cache-credential",
        ),
        pytest.param("torch-distributed", ("DATA_CACHE_ENDPOINT",), [], id="no-cache-job"),
    ],
)
def test_data_cache_reserved_env(rt: str, names: tuple[str, ...], want: list[Err]) -> None:
    assert errors(trainjob(trainer={"env": env(*names)}), builtin(rt)) == want


def test_data_cache_reserved_env_without_ml_policy() -> None:
    job = trainjob(trainer={"env": env("DATA_CACHE_ENDPOINT")})
    assert errors(job, runtime(CACHE_NO_POLICY)) == [reserved("DATA_CACHE_ENDPOINT")]


# --- Whole runtimes ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(builtin_runtimes()))
def test_builtin_runtimes_accept_a_plain_trainjob(name: str) -> None:
    job = trainjob(name, {"numNodes": 1, "env": env("EPOCHS")})
    assert errors(job, builtin(name), ClusterView(priority_classes=frozenset())) == []


def test_update_judges_the_new_object() -> None:
    old = trainjob(trainer={"env": env("FOO")})
    new = trainjob(trainer={"env": env("PET_NNODES")})
    v = validate_policies(new_info(new, TORCH), old, ClusterView())
    assert [(e.path, e.type, e.message) for e in v.errors] == [reserved("PET_NNODES")]


# --- Beyond upstream: TensorFlow, Paddle and elastic torch --------------------------------------
ELASTIC_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt}
spec:
  mlPolicy:
    numNodes: 3
    torch: {elasticPolicy: {minNodes: 2, maxNodes: 4, maxRestarts: 1}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: x}]}}}
"""


def test_tensorflow_reserved_envs() -> None:
    job = trainjob("tensorflow-distributed", {"env": env("TF_CONFIG", "OK", "TF_TASK_INDEX")})
    assert errors(job, builtin("tensorflow-distributed")) == [reserved("TF_CONFIG TF_TASK_INDEX")]
    assert (
        errors(
            trainjob("tensorflow-distributed", {"env": env("OK")}),
            builtin("tensorflow-distributed"),
        )
        == []
    )


def test_paddle_reserved_envs() -> None:
    names = ("PADDLE_RANK", "PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_JOB_ID")
    job = trainjob("paddle-distributed", {"env": env(*names, "FLAGS_x")})
    assert errors(job, builtin("paddle-distributed")) == [
        reserved("PADDLE_JOB_ID PADDLE_MASTER PADDLE_NNODES PADDLE_RANK")
    ]


def test_elastic_torch_reserves_the_rendezvous_envs_only_when_elastic() -> None:
    job = trainjob("rt", {"env": env("PET_RDZV_ENDPOINT", "PET_MAX_RESTARTS")})
    assert errors(job, runtime(ELASTIC_RUNTIME)) == [reserved("PET_MAX_RESTARTS PET_RDZV_ENDPOINT")]
    assert errors(job, builtin("torch-distributed")) == []


@pytest.mark.parametrize(
    ("num_nodes", "ok"), [(None, True), (2, True), (4, True), (1, False), (5, False)]
)
def test_elastic_torch_num_nodes_within_the_range(num_nodes: int | None, ok: bool) -> None:
    trainer = {} if num_nodes is None else {"numNodes": num_nodes}
    got = errors(trainjob("rt", trainer), runtime(ELASTIC_RUNTIME))
    if ok:
        assert got == []
    else:
        assert got == [
            (
                "spec.trainer.numNodes",
                INVALID,
                "must be within the runtime's elastic range [2, 4] "
                "(spec.mlPolicy.torch.elasticPolicy minNodes..maxNodes)",
            )
        ]


def test_elastic_torch_range_must_be_ordered() -> None:
    text = ELASTIC_RUNTIME.replace("minNodes: 2, maxNodes: 4", "minNodes: 5, maxNodes: 4")
    got = errors(trainjob("rt", {"numNodes": 4}), runtime(text))
    assert got == [
        (
            "spec.runtimeRef",
            INVALID,
            "runtime spec.mlPolicy.torch.elasticPolicy: minNodes (5) must be less than or "
            "equal to maxNodes (4)",
        )
    ]


def test_elastic_torch_runtime_count_outside_the_range() -> None:
    text = ELASTIC_RUNTIME.replace("numNodes: 3", "numNodes: 1")
    got = errors(trainjob("rt", {}), runtime(text))
    assert [(p, t) for p, t, _ in got] == [("spec.runtimeRef", INVALID)]
    assert "node count 1" in got[0][2]
