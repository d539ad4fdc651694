"""The per-plugin admission rules for a TrainJob (spec 2.5-2.9, and this project's data cache).

:func:`validate_policies` runs on ``info = trainer.runtime.assemble.new_info(new, runtime)``:
the TrainJob merged onto its live runtime, *before* any plugin ran. Each rule is active only
for its policy, and every error is collected (never only the first):

Torch (``mlPolicy.torch``)
    reserved ``PET_*`` names in ``spec.trainer.env`` (with ``elasticPolicy`` also
    ``PET_RDZV_BACKEND``, ``PET_RDZV_ENDPOINT``, ``PET_MAX_RESTARTS``); envInjection targets
    that do not exist; the TorchTune checks when ``spec.trainer.command`` is exactly
    ``["tune", "run"]``; with ``elasticPolicy`` (beyond upstream): ``minNodes <= maxNodes`` and
    the node count within ``[minNodes, maxNodes]``.
TensorFlow / Paddle (``mlPolicy.tensorflow`` / ``mlPolicy.paddle``, beyond upstream)
    reserved ``TF_CONFIG``, ``TF_TASK_INDEX`` / ``PADDLE_MASTER``, ``PADDLE_NNODES``,
    ``PADDLE_RANK``, ``PADDLE_JOB_ID`` in ``spec.trainer.env``.
MPI (``mlPolicy.mpi``)
    reserved launcher env names (OpenMPI's, and the MPICH and Intel names this project's MPI
    plugin injects); ``numNodes >= 2`` with ``runLauncherAsNode`` on a runtime without both a
    ``launcher`` and a ``node`` job.
XGBoost (``mlPolicy.xgboost``)
    each reserved ``DMLC_*`` name, Forbidden at its own index.
Volcano / Flux
    the plugins' own pure ``validate`` functions.
Data cache (a runtime with a ``cache-initializer`` job)
    ``DATA_CACHE_ENDPOINT`` in ``spec.trainer.env``.
JAX
    nothing.

Reserved-env errors of Torch, MPI, TensorFlow or Paddle and of the data cache are reported as ONE
error at ``spec.trainer.env`` listing every reserved name found (they share upstream's message
format; one error reads better than two at the same path).

The checks only read ``info``: nothing is mutated (``PodSet.pod_spec`` would create missing
specs, so pod specs are reached without it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainer.admission.types import ClusterView, Verdict
from trainer.api import constants as c
from trainer.api.core import Container, EnvVar, PodSpec
from trainer.api.errors import FORBIDDEN, INVALID, FieldError
from trainer.api.v1alpha1 import Trainer, TrainJob
from trainer.plugins import flux, mpi, torchtune, volcano
from trainer.plugins.common import runtime_resources_per_node
from trainer.plugins.torch import is_torchtune, resolve_num_proc_per_node
from trainer.runtime.apply import find_container
from trainer.runtime.info import Info, PodSet
from trainer.runtime.resources import gpu_count

# --- Field paths ---------------------------------------------------------------------------------
PATH_TRAINER_ENV = "spec.trainer.env"
PATH_TRAINER_ARGS = "spec.trainer.args"
PATH_NUM_NODES = "spec.trainer.numNodes"
PATH_NUM_PROC_PER_NODE = "spec.trainer.numProcPerNode"
PATH_RESOURCES_PER_NODE = "spec.trainer.resourcesPerNode"
PATH_RUNTIME_REF = "spec.runtimeRef"
PATH_RUNTIME_REF_NAME = "spec.runtimeRef.name"

# --- Reserved env names --------------------------------------------------------------------------
MPI_EXTRA_RESERVED_ENVS = (
    mpi.ENV_HYDRA_HOST_FILE,
    mpi.ENV_HYDRA_LAUNCH_EXTRA_ARGS,
    mpi.ENV_I_MPI_HYDRA_HOST_FILE,
    mpi.ENV_I_MPI_BOOTSTRAP_EXTRA_ARGS,
    mpi.ENV_I_MPI_PERHOST,
)
"""Beyond upstream: the launcher env the MPI plugin injects for MPICH and Intel MPI. They are
reserved whatever the runtime's implementation, so a TrainJob is judged the same way on every
MPI runtime."""
MPI_ALL_RESERVED_ENVS = (*c.MPI_RESERVED_ENVS, *MPI_EXTRA_RESERVED_ENVS)

# --- TorchTune models ----------------------------------------------------------------------------
MODEL_LLAMA3_2_1B = "llama3_2/1B"
MODEL_LLAMA3_2_3B = "llama3_2/3B"
MODEL_LLAMA3_3_70B = "llama3_3/70B"
MODEL_QWEN2_5_1_5B = "qwen2_5/1.5B"
MULTI_NODE_MODELS = frozenset({MODEL_LLAMA3_3_70B})
SINGLE_DEVICE_QLORA_MODELS = frozenset({MODEL_LLAMA3_2_1B, MODEL_LLAMA3_2_3B})
NO_QLORA_MODELS = frozenset({MODEL_QWEN2_5_1_5B})
QLORA_CONFIG = "_qlora"
QLORA_SINGLE_DEVICE_CONFIG = "_qlora_single_device"

MSG_LORA_MULTI_NODE = "LoRA fine-tuning is not supported for multi-node training in TorchTune"


def go_list(items: Iterable[str]) -> str:
    """A string slice printed with Go's ``%v``: ``[A B]``."""
    return "[" + " ".join(items) + "]"


def reserved_envs_message(names: Iterable[str]) -> str:
    """Upstream's reserved-env message, the names sorted (``sets.List``)."""
    return f"must not have reserved envs, invalid envs configured: {go_list(sorted(set(names)))}"


def _env_wire(envs: list[EnvVar]) -> list[dict[str, Any]]:
    return [e.to_wire() for e in envs]


def _trainer(info: Info) -> Trainer | None:
    return info.trainjob.spec.trainer if info.trainjob.spec else None


def _template_pod_spec(ps: PodSet) -> PodSpec | None:
    """The pod spec of ``ps`` without creating one."""
    job_spec = ps.job.template.spec
    return job_spec.template.spec if job_spec is not None else None


def _find_container(ps: PodSet, name: str) -> Container | None:
    """A regular container ``name``, else the init container of that name (envInjection's
    lookup order)."""
    pod = _template_pod_spec(ps)
    return find_container(pod, name) if pod is not None else None


# --- Reserved env (Torch, MPI, data cache) -------------------------------------------------------
def _reserved_names(info: Info) -> tuple[str, ...]:
    """The env names ``spec.trainer.env`` may not set that share the ``Invalid`` message format:
    the active policy's (Torch or MPI) and, with a cache-initializer job, the data cache's."""
    policy = info.ml_policy
    names: tuple[str, ...] = ()
    if policy is not None and policy.torch is not None:
        names += c.TORCH_RESERVED_ENVS
        if policy.torch.elastic_policy is not None:
            names += c.TORCH_ELASTIC_RESERVED_ENVS
    if policy is not None and policy.tensorflow is not None:
        names += c.TENSORFLOW_RESERVED_ENVS
    if policy is not None and policy.paddle is not None:
        names += c.PADDLE_RESERVED_ENVS
    if policy is not None and policy.mpi is not None:
        names += MPI_ALL_RESERVED_ENVS
    if info.pod_sets_with_ancestor(c.ANCESTOR_CACHE_INITIALIZER):
        names += (c.ENV_DATA_CACHE_ENDPOINT,)
    return names


def validate_reserved_envs(info: Info) -> list[FieldError]:
    """One Invalid error at ``spec.trainer.env`` naming every reserved env the TrainJob sets."""
    trainer = _trainer(info)
    reserved = set(_reserved_names(info))
    if trainer is None or not trainer.env or not reserved:
        return []
    found = [e.name for e in trainer.env if e.name in reserved]
    if not found:
        return []
    return [
        FieldError(PATH_TRAINER_ENV, INVALID, reserved_envs_message(found), _env_wire(trainer.env))
    ]


# --- Torch ---------------------------------------------------------------------------------------
def validate_env_injection(info: Info) -> list[FieldError]:
    """Every envInjection target must name a job of the runtime and, in it, a container
    (regular, then init): the build fails on a missing one, so admission says so first."""
    torch = info.ml_policy.torch if info.ml_policy else None
    targets = torch.env_injection.targets if torch and torch.env_injection else None
    errors: list[FieldError] = []
    ref_name = info.trainjob.spec.runtime_ref.name if info.trainjob.spec else ""
    for target in targets or []:
        ps = info.pod_set(target.job_name)
        for name in target.container_names:
            if ps is not None and _find_container(ps, name) is not None:
                continue
            message = (
                f'envInjection target podSet "{target.job_name}" container "{name}" '
                "not found in runtime template"
            )
            errors.append(FieldError(PATH_RUNTIME_REF, INVALID, message, ref_name))
    return errors


def _num_nodes(info: Info, trainer: Trainer) -> int:
    """The trainer node count the build will use: the TrainJob's, else the runtime's."""
    if trainer.num_nodes is not None:
        return trainer.num_nodes
    ps = info.trainer_pod_set()
    return ps.count if ps is not None else 1


def validate_torchtune(info: Info) -> list[FieldError]:
    """Spec 2.6: the TorchTune rules, for a trainer command of exactly ``["tune", "run"]``.

    The node count, processes per node and GPU count are the ones the build uses (TrainJob
    value, else the runtime's; ``auto`` without GPUs resolved from the CPU count), so the
    recipe judged here is the recipe the Torch plugin will pick.
    """
    spec = info.trainjob.spec
    trainer = _trainer(info)
    if spec is None or trainer is None or not is_torchtune(trainer):
        return []
    errors: list[FieldError] = []
    ref_name = spec.runtime_ref.name
    model = torchtune.model_of(ref_name) or ""
    if model not in torchtune.SUPPORTED_MODELS:
        errors.append(
            FieldError(
                PATH_RUNTIME_REF_NAME,
                INVALID,
                f"must have a supported pretrained model, invalid model configured: {model}",
                ref_name,
            )
        )
    num_nodes = _num_nodes(info, trainer)
    if num_nodes > 1 and model not in MULTI_NODE_MODELS:
        errors.append(
            FieldError(PATH_NUM_NODES, INVALID, f"must be 1 for {model} model", num_nodes)
        )
    args = list(trainer.args or [])
    lora, qlora = torchtune.uses_lora(args), torchtune.uses_qlora(args)
    nproc = resolve_num_proc_per_node(info)
    gpus = gpu_count(runtime_resources_per_node(info))
    config = torchtune.recipe_for(num_nodes, nproc, gpus, lora, qlora).config_suffix
    if QLORA_CONFIG in config:
        if model in NO_QLORA_MODELS:
            errors.append(
                FieldError(
                    PATH_RUNTIME_REF_NAME,
                    INVALID,
                    f"QLoRA is not supported for {model} model",
                    ref_name,
                )
            )
        if QLORA_SINGLE_DEVICE_CONFIG not in config and model in SINGLE_DEVICE_QLORA_MODELS:
            resources = trainer.resources_per_node
            errors += [
                FieldError(
                    PATH_NUM_PROC_PER_NODE,
                    INVALID,
                    f"must be auto or 1 for {model} model when using QLoRA",
                    trainer.num_proc_per_node if trainer.num_proc_per_node is not None else "auto",
                ),
                FieldError(
                    PATH_RESOURCES_PER_NODE,
                    INVALID,
                    f"must have gpu resource with value 1 for {model} model when using QLoRA",
                    resources.to_wire() if resources is not None else None,
                ),
            ]
    if num_nodes > 1 and (lora or qlora):
        errors.append(FieldError(PATH_NUM_NODES, INVALID, MSG_LORA_MULTI_NODE, num_nodes))
    for i, arg in enumerate(args):
        key = arg.split("=", 1)[0]
        if key in torchtune.IMMUTABLE_KEYS:
            errors.append(
                FieldError(
                    f"{PATH_TRAINER_ARGS}[{i}]",
                    INVALID,
                    f'must not set immutable config "{key}" in trainer args; '
                    "it is managed by the runtime",
                    arg,
                )
            )
    return errors


PATH_ELASTIC_POLICY = "spec.mlPolicy.torch.elasticPolicy"


def validate_torch_elastic(info: Info) -> list[FieldError]:
    """Beyond upstream: an elastic range must be ordered, and the node count the job starts
    with must lie inside it (torchrun would wait forever below minNodes, and refuses nodes
    above maxNodes)."""
    torch = info.ml_policy.torch if info.ml_policy else None
    elastic = torch.elastic_policy if torch is not None else None
    if elastic is None:
        return []
    trainer = _trainer(info)
    ps = info.trainer_pod_set()
    runtime_count = ps.count if ps is not None else 1
    count = trainer.num_nodes if trainer is not None and trainer.num_nodes is not None else None
    nodes = count if count is not None else runtime_count
    low = elastic.min_nodes if elastic.min_nodes is not None else nodes
    high = elastic.max_nodes if elastic.max_nodes is not None else nodes
    if low > high:
        return [
            FieldError(
                PATH_RUNTIME_REF,
                INVALID,
                f"runtime {PATH_ELASTIC_POLICY}: minNodes ({low}) must be less than or equal "
                f"to maxNodes ({high})",
                info.trainjob.spec.runtime_ref.name if info.trainjob.spec else "",
            )
        ]
    if low <= nodes <= high:
        return []
    message = (
        f"must be within the runtime's elastic range [{low}, {high}] "
        f"({PATH_ELASTIC_POLICY} minNodes..maxNodes)"
    )
    if count is not None:
        return [FieldError(PATH_NUM_NODES, INVALID, message, count)]
    return [
        FieldError(
            PATH_RUNTIME_REF,
            INVALID,
            f"the runtime's node count {nodes} (mlPolicy.numNodes) {message}",
            info.trainjob.spec.runtime_ref.name if info.trainjob.spec else "",
        )
    ]


def validate_torch(info: Info) -> list[FieldError]:
    """Spec 2.5: envInjection targets exist, and the TorchTune rules (reserved env names are
    checked with the other reserved names in :func:`validate_reserved_envs`); beyond upstream,
    the elastic range."""
    if info.ml_policy is None or info.ml_policy.torch is None:
        return []
    return validate_env_injection(info) + validate_torchtune(info) + validate_torch_elastic(info)


# --- MPI -----------------------------------------------------------------------------------------
def validate_mpi(info: Info) -> list[FieldError]:
    """Spec 2.7: with runLauncherAsNode, two or more nodes need both a ``launcher`` and a
    ``node`` job (the launcher is one of the nodes; the others run in ``node``)."""
    policy = info.ml_policy.mpi if info.ml_policy else None
    trainer = _trainer(info)
    if policy is None or trainer is None or not policy.run_launcher_as_node:
        return []
    num_nodes = trainer.num_nodes if trainer.num_nodes is not None else 1
    if num_nodes < 2:
        return []
    if info.pod_set(c.JOB_LAUNCHER) is not None and info.pod_set(c.JOB_NODE) is not None:
        return []
    return [
        FieldError(
            PATH_NUM_NODES,
            INVALID,
            "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have "
            "either launcher and node",
            trainer.num_nodes,
        )
    ]


# --- XGBoost -------------------------------------------------------------------------------------
def validate_xgboost(info: Info) -> list[FieldError]:
    """Spec 2.8: each ``DMLC_*`` name the plugin injects is Forbidden at its own index."""
    trainer = _trainer(info)
    if info.ml_policy is None or info.ml_policy.xgboost is None or trainer is None:
        return []
    return [
        FieldError(
            f"{PATH_TRAINER_ENV}[{i}]",
            FORBIDDEN,
            f"{env.name} is reserved for the XGBoost runtime",
        )
        for i, env in enumerate(trainer.env or [])
        if env.name in c.XGBOOST_RESERVED_ENVS
    ]


# --- Gang scheduling -----------------------------------------------------------------------------
def validate_volcano(info: Info, view: ClusterView) -> list[FieldError]:
    """The Volcano plugin's checks: the queue always; PriorityClasses only when the caller
    knows which exist (``view.priority_classes`` is None when it does not)."""
    if view.priority_classes is not None:
        return volcano.validate(info, view.priority_classes)
    return [e for e in volcano.validate(info, frozenset()) if e.path != volcano.PRIORITY_CLASS_PATH]


# --- Entry point ---------------------------------------------------------------------------------
def validate_policies(info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
    """Every plugin rule for the TrainJob in ``info`` (create and update alike: ``old`` is not
    consulted, as upstream's plugin validators only read the new object)."""
    del old  # the plugin rules judge the new object only
    errors = [
        *validate_reserved_envs(info),
        *validate_torch(info),
        *validate_mpi(info),
        *validate_xgboost(info),
        *validate_volcano(info, view),
        *flux.validate(info),
    ]
    return Verdict([], errors)
