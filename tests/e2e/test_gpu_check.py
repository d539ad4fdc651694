"""``hack/gpu-check.sh`` (docs/local-plane.md, "Checking a GPU machine") as its user runs it:
the driver with ``--fake-gpus`` on this CPU-only machine, a scenario subset that is quick; with
no ``nvidia-smi``; and with an ``nvidia-smi`` that lists two GPUs, whose node it checks and
whose CUDA scenarios it skips, saying why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "hack" / "gpu_check.py"
NVIDIA_SMI = """#!/bin/sh
echo "0, GPU-5c1e0b6e-0000-4000-8000-000000000000, NVIDIA H200, 143771"
echo "1, GPU-5c1e0b6e-0000-4000-8000-000000000001, NVIDIA H200, 143771"
"""


def gpu_check(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, str(DRIVER), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def test_fake_gpus_never_fitting_job_and_a_pod_without_gpus() -> None:
    done = gpu_check("--fake-gpus", "2", "--only", "more-gpus-than-node,no-gpu-container")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0] == (
        "gpu-check: 2 fake GPU(s) declared with --node-config: GPU-fake-0, GPU-fake-1"
    )
    assert lines[1] == "running scenario more-gpus-than-node..."
    assert lines[2].startswith(
        "PASS more-gpus-than-node: 3 nvidia.com/gpu on a node of 2: never fits, trainer run "
        "exited 2 after "
    ), done.stdout
    assert lines[2].endswith("Insufficient nvidia.com/gpu (needs 3, 2 free)"), done.stdout
    assert lines[3] == "running scenario no-gpu-container..."
    assert lines[4].startswith(
        'PASS no-gpu-container: a pod without a GPU request got CUDA_VISIBLE_DEVICES="", '
        "NVIDIA_VISIBLE_DEVICES=void"
    ), done.stdout
    assert lines[5:] == ["gpu-check: PASS 2, FAIL 0, SKIP 0"], done.stdout


def test_without_nvidia_smi_there_is_nothing_to_check(tmp_path: Path) -> None:
    done = gpu_check(path=str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "gpu-check: no nvidia-smi on PATH: no NVIDIA GPU to check (--fake-gpus N dry-runs "
        "the scheduling)"
    ]


def test_the_gpus_nvidia_smi_lists_are_the_nodes_and_cuda_parts_skip(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text(NVIDIA_SMI)
    tool.chmod(0o755)
    done = gpu_check("--only", "node,one-gpu", path=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0].startswith(
        "gpu-check: 2 GPU(s) from nvidia-smi: 0 NVIDIA H200 "
        "GPU-5c1e0b6e-0000-4000-8000-000000000000 143771 MiB; 1 NVIDIA H200 "
    ), done.stdout
    # The node the plane registers, from the same nvidia-smi.
    assert lines[2] == (
        "PASS node: node local advertises nvidia.com/gpu=2 (capacity and allocatable); labels "
        "product=NVIDIA-H200, count=2, memory=143771"
    ), done.stdout
    # This machine's torch sees no CUDA device, whatever its build.
    assert lines[4].startswith("SKIP one-gpu: torch "), done.stdout
    assert "sees no CUDA device" in lines[4], done.stdout
    assert lines[5:] == ["gpu-check: PASS 1, FAIL 0, SKIP 1"], done.stdout


# Long tests: make test starts the files marked slow first (pyproject.toml, markers).
pytestmark = pytest.mark.slow
