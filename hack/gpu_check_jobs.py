"""The objects ``hack/gpu_check.py`` hands to ``trainer run``: its own TrainingRuntime and the
TrainJobs of its scenarios (docs/local-plane.md, "Checking a GPU machine"), as JSON documents
in one YAML stream (JSON is YAML; the driver stays on the standard library)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

GPU = "nvidia.com/gpu"
POD_PROGRAM = Path(__file__).resolve().parent / "gpu_check_pod.py"
API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "gpu-check"
MEET_TIMEOUT_S = 60
"""How long a pod of ``two-nodes-one-gpu-each`` waits for its peer before it fails."""


def runtime() -> dict[str, Any]:
    """A torch runtime like ``torch-local-cpu`` without its CPU and memory requests and limits:
    pods then ask the node for GPUs only (the scheduling under check), and a CUDA process is
    not held to one core (the steps/s compared with bare torchrun)."""
    container = {
        "name": "node",
        "image": "python:3.11-slim",
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
    }
    job = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"backoffLimit": 0, "template": {"spec": {"containers": [container]}}},
        },
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": {"name": RUNTIME, "namespace": "default"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [job]}},
        },
    }


def train_command() -> list[str]:
    """torchrun, as the interpreter running the check has it."""
    return [sys.executable, "-m", "torch.distributed.run"]


def trainjob(
    name: str, *, nodes: int, gpus: int, command: list[str], env: dict[str, str]
) -> dict[str, Any]:
    trainer: dict[str, Any] = {
        "numNodes": nodes,
        "command": command,
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }
    if gpus:
        trainer["resourcesPerNode"] = {"limits": {GPU: gpus}}
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "TrainingRuntime",
                "name": RUNTIME,
            },
            "trainer": trainer,
        },
    }


def train_job(name: str, out: Path, steps: int, *, nodes: int) -> dict[str, Any]:
    """``nodes`` x 1 GPU of DDP over NCCL; ``numProcPerNode`` is left to torchrun's ``auto``,
    which counts the GPUs the pod sees."""
    env = {"GPU_CHECK_OUT": str(out), "GPU_CHECK_GROUP": name, "GPU_CHECK_STEPS": str(steps)}
    command = [*train_command(), str(POD_PROGRAM), "train"]
    return trainjob(name, nodes=nodes, gpus=1, command=command, env=env)


def probe_job(
    name: str,
    out: Path,
    *,
    nodes: int,
    gpus: int,
    meet: int = 0,
    hold: float = 0,
    torch: bool = False,
) -> dict[str, Any]:
    """``nodes`` x ``gpus`` pods reporting what they see (``gpu_check_pod.py probe``)."""
    env = {
        "GPU_CHECK_OUT": str(out),
        "GPU_CHECK_GROUP": name,
        "GPU_CHECK_MEET": str(meet),
        "GPU_CHECK_MEET_TIMEOUT": str(MEET_TIMEOUT_S),
        "GPU_CHECK_HOLD": f"{hold:g}",
        "GPU_CHECK_TORCH": "1" if torch else "0",
    }
    command = [sys.executable, str(POD_PROGRAM), "probe"]
    return trainjob(name, nodes=nodes, gpus=gpus, command=command, env=env)


def stream(docs: list[dict[str, Any]]) -> str:
    """A YAML stream of ``docs``."""
    return "".join(f"---\n{json.dumps(doc, indent=1)}\n" for doc in docs)
