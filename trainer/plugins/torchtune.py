"""TorchTune mode of the Torch plugin (upstream:
https://github.com/kubeflow/trainer/blob/v2.3.0/pkg/runtime/framework/plugins/torch/torchtune.go):
a TrainJob whose command is exactly
``["tune", "run"]`` gets the full ``tune run`` command for its model, recipe and node shape,
and is admitted only for a supported model, node shape and fine-tuning method
(:func:`validate`)."""

from __future__ import annotations

from dataclasses import dataclass

from trainer.api import constants as c
from trainer.api.v1alpha1 import Trainer
from trainer.machinery.errors import INVALID, FieldError
from trainer.runtime.info import Info
from trainer.runtime.podsets import resources_per_node
from trainer.runtime.resources import gpu_count

ENTRYPOINT = ("tune", "run")
SUPPORTED_MODELS = ("llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B")
# Keys of the runtime's command that the runtime manages and carries over.
IMMUTABLE_KEYS = (
    "output_dir",
    "tokenizer.path",
    "checkpointer.checkpoint_dir",
    "tokenizer.merges_file",
)

PATH_TRAINER_ARGS = "spec.trainer.args"
PATH_NUM_NODES = "spec.trainer.numNodes"
PATH_NUM_PROC_PER_NODE = "spec.trainer.numProcPerNode"
PATH_RESOURCES_PER_NODE = "spec.trainer.resourcesPerNode"
PATH_RUNTIME_REF_NAME = "spec.runtimeRef.name"

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


def model_of(runtime_name: str) -> str | None:
    """``torchtune-llama3.2-1b`` -> ``llama3_2/1B``; None unless the name has three parts."""
    parts = runtime_name.split("-")
    if len(parts) != 3:
        return None
    return f"{parts[1].replace('.', '_')}/{parts[2].upper()}"


def uses_lora(args: list[str]) -> bool:
    return any("model.lora_attn_modules" in a for a in args)


def uses_qlora(args: list[str]) -> bool:
    quantized = any(
        a.split("=", 1)[0].endswith("model.quantize_base") and a.split("=", 1)[-1].lower() == "true"
        for a in args
        if "=" in a
    )
    dora = any(a.replace(" ", "").lower() == "model.use_dora=true" for a in args)
    return quantized and not dora


@dataclass(frozen=True)
class Recipe:
    recipe: str
    config_suffix: str


def recipe_for(num_nodes: int, nproc: int | str, gpus: int, lora: bool, qlora: bool) -> Recipe:
    """The recipe and config suffix for the node shape and fine-tuning method."""
    if num_nodes > 1:
        return Recipe("full_finetune_distributed", "_full_multinode")
    single_device = nproc == 1 or gpus == 1
    if single_device:
        if qlora:
            return Recipe("lora_finetune_single_device", "_qlora_single_device")
        if lora:
            return Recipe("lora_finetune_single_device", "_lora_single_device")
        return Recipe("full_finetune_single_device", "_full_single_device")
    if qlora:
        return Recipe("lora_finetune_distributed", "_qlora")
    if lora:
        return Recipe("lora_finetune_distributed", "_lora")
    return Recipe("full_finetune_distributed", "_full")


def needs_rendezvous(num_nodes: int, nproc: int | str, gpus: int) -> bool:
    return num_nodes > 1 or (isinstance(nproc, int) and nproc > 1) or (nproc == "auto" and gpus > 1)


def runtime_overrides(info: Info) -> list[str]:
    """The runtime trainer command's ``key=value`` items for the keys the runtime manages."""
    runtime_spec = info.runtime.spec
    jobs = (
        runtime_spec.template.spec.replicated_jobs
        if runtime_spec is not None and runtime_spec.template.spec is not None
        else None
    )
    for job in jobs or []:
        labels = (job.template.metadata.labels if job.template.metadata else None) or {}
        if labels.get(c.LABEL_ANCESTOR) != c.ANCESTOR_TRAINER:
            continue
        pod = job.template.spec.template.spec if job.template.spec else None
        for ctr in (pod.containers if pod else None) or []:
            if ctr.name == c.CONTAINER_NODE:
                return [
                    item for item in ctr.command or [] if item.split("=", 1)[0] in IMMUTABLE_KEYS
                ]
    return []


def command(info: Info, num_nodes: int, nproc: int | str) -> list[str]:
    """The full ``tune run`` command for this TrainJob."""
    spec = info.trainjob.spec
    assert spec is not None
    args = list((spec.trainer.args if spec.trainer else None) or [])
    gpus = gpu_count(resources_per_node(info))
    model = model_of(spec.runtime_ref.name) or spec.runtime_ref.name
    recipe = recipe_for(num_nodes, nproc, gpus, uses_lora(args), uses_qlora(args))
    out = list(ENTRYPOINT)
    if needs_rendezvous(num_nodes, nproc, gpus):
        out.append(f"--rdzv_endpoint={info.first_endpoint()}:{c.CONTAINER_TRAINER_PORT}")
    out += [recipe.recipe, "--config", f"{model}{recipe.config_suffix}"]
    out += runtime_overrides(info)
    return out


def validate(info: Info, trainer: Trainer, num_nodes: int, nproc: int | str) -> list[FieldError]:
    """Spec 2.6: the TorchTune rules, for a trainer command of exactly ``["tune", "run"]``.

    ``num_nodes`` and ``nproc`` are the ones the build uses (TrainJob value, else the
    runtime's; ``auto`` without GPUs resolved from the CPU count), so the recipe judged here
    is the recipe the Torch plugin will pick.
    """
    spec = info.trainjob.spec
    assert spec is not None
    errors: list[FieldError] = []
    ref_name = spec.runtime_ref.name
    model = model_of(ref_name) or ""
    if model not in SUPPORTED_MODELS:
        errors.append(
            FieldError(
                PATH_RUNTIME_REF_NAME,
                INVALID,
                f"must have a supported pretrained model, invalid model configured: {model}",
                ref_name,
            )
        )
    if num_nodes > 1 and model not in MULTI_NODE_MODELS:
        errors.append(
            FieldError(PATH_NUM_NODES, INVALID, f"must be 1 for {model} model", num_nodes)
        )
    args = list(trainer.args or [])
    lora, qlora = uses_lora(args), uses_qlora(args)
    gpus = gpu_count(resources_per_node(info))
    config = recipe_for(num_nodes, nproc, gpus, lora, qlora).config_suffix
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
        if key in IMMUTABLE_KEYS:
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
