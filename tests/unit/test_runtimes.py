"""Every built-in runtime loads, passes the CRD checks and has the ML policy and the
steps its name promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.api import constants as c
from trainer.api.load import check_object, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_FILES = sorted((ROOT / "runtimes").glob("*.yaml"))

EXPECTED = {
    "torch-distributed": "torch",
    "deepspeed-distributed": "mpi",
    "mlx-distributed": "mpi",
    "jax-distributed": "jax",
    "xgboost-distributed": "xgboost",
    "torchtune-llama3.2-1b": "torch",
    "torchtune-llama3.2-3b": "torch",
    "torchtune-qwen2.5-1.5b": "torch",
    "torch-distributed-with-cache": "torch",
    "torch-local-cpu": "torch",
    "tensorflow-distributed": "tensorflow",
    "paddle-distributed": "paddle",
}


def load(name: str) -> ClusterTrainingRuntime:
    data = yaml.safe_load((ROOT / "runtimes" / f"{name}.yaml").read_text())
    runtime = parse_object(data)
    assert isinstance(runtime, ClusterTrainingRuntime)
    return runtime


def jobs(runtime: ClusterTrainingRuntime) -> dict[str, Any]:
    assert runtime.spec is not None and runtime.spec.template.spec is not None
    return {j.name: j for j in runtime.spec.template.spec.replicated_jobs or []}


def test_every_expected_runtime_is_shipped() -> None:
    assert sorted(p.stem for p in RUNTIME_FILES) == sorted(EXPECTED)


@pytest.mark.parametrize("path", RUNTIME_FILES, ids=lambda p: p.stem)
def test_runtime_is_valid(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    result = check_object(data)
    assert result.ok, [str(e) for e in result.errors]
    runtime = load(path.stem)
    assert runtime.metadata is not None and runtime.metadata.name == path.stem
    assert (runtime.metadata.labels or {}).get(c.LABEL_FRAMEWORK)
    assert runtime.spec is not None and runtime.spec.ml_policy is not None
    policy = runtime.spec.ml_policy
    assert policy.num_nodes == 1
    set_policies = [
        p
        for p in ("torch", "mpi", "jax", "xgboost", "flux", "tensorflow", "paddle")
        if getattr(policy, p) is not None
    ]
    assert set_policies == [EXPECTED[path.stem]]
    # Every known ancestor job has replicas 1 and its mapped container.
    for job in jobs(runtime).values():
        labels = (job.template.metadata.labels if job.template.metadata else None) or {}
        ancestor = labels.get(c.LABEL_ANCESTOR)
        if ancestor is None:
            continue
        assert job.replicas == 1
        pod = job.template.spec.template.spec
        names = [ctr.name for ctr in pod.containers or []]
        assert c.ANCESTOR_CONTAINER[ancestor] in names


def test_mpi_runtimes_run_the_launcher_as_a_node() -> None:
    for name in ("deepspeed-distributed", "mlx-distributed"):
        runtime = load(name)
        mpi = runtime.spec.ml_policy.mpi  # type: ignore[union-attr]
        assert mpi is not None and mpi.run_launcher_as_node
        assert mpi.ssh_auth_mount_path == "/home/mpiuser/.ssh"
        launcher = jobs(runtime)["launcher"]
        assert [(d.name, d.status) for d in launcher.depends_on or []] == [("node", "Ready")]


@pytest.mark.parametrize(
    ("name", "model_uri"),
    [
        ("torchtune-llama3.2-1b", "hf://meta-llama/Llama-3.2-1B-Instruct"),
        ("torchtune-llama3.2-3b", "hf://meta-llama/Llama-3.2-3B-Instruct"),
        ("torchtune-qwen2.5-1.5b", "hf://Qwen/Qwen2.5-1.5B-Instruct"),
    ],
)
def test_torchtune_runtimes(name: str, model_uri: str) -> None:
    runtime = load(name)
    by_name = jobs(runtime)
    assert list(by_name) == ["dataset-initializer", "model-initializer", "node"]
    model = by_name["model-initializer"].template.spec.template.spec.containers[0]
    assert {e.name: e.value for e in model.env} == {"STORAGE_URI": model_uri}
    node = by_name["node"]
    assert [(d.name, d.status) for d in node.depends_on] == [
        ("dataset-initializer", "Complete"),
        ("model-initializer", "Complete"),
    ]
    command = node.template.spec.template.spec.containers[0].command
    assert command[:2] == ["tune", "run"]


def test_data_cache_runtime() -> None:
    runtime = load("torch-distributed-with-cache")
    by_name = jobs(runtime)
    assert list(by_name) == ["cache-initializer", "node"]
    cache = by_name["cache-initializer"]
    labels = cache.template.metadata.labels
    assert labels[c.LABEL_ANCESTOR] == c.ANCESTOR_CACHE_INITIALIZER
    container = cache.template.spec.template.spec.containers[0]
    assert container.name == c.CONTAINER_CACHE_INITIALIZER
    assert container.readiness_probe is not None
    node = by_name["node"]
    assert [(d.name, d.status) for d in node.depends_on] == [("cache-initializer", "Ready")]
    success = runtime.spec.template.spec.success_policy  # type: ignore[union-attr]
    assert success is not None
    assert (success.operator, success.target_replicated_jobs) == ("All", ["node"])
