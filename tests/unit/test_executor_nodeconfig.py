"""--node-config: declared GPUs, reservations, labels and taints; every mistake named by field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainer.local.executor.node.config import NodeConfigError, load_node_config, parse_node_config
from trainer.local.executor.node.heartbeat import node_object
from trainer.local.executor.policy.podfields import Node

STAMP = "2026-11-27T09:00:00Z"


def test_declared_gpus_reservations_labels_and_taints_reach_the_node() -> None:
    config = parse_node_config(
        {
            "gpus": [
                {"product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559, "count": 3},
                {"uuid": "GPU-real-1", "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559},
            ],
            "reserved": {"cpu": "500m", "memory": "1Gi"},
            "labels": {"topology.kubernetes.io/zone": "desk"},
            "taints": [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}],
        }
    )
    assert config.gpus is not None
    assert [g.uuid for g in config.gpus] == ["GPU-fake-0", "GPU-fake-1", "GPU-fake-2", "GPU-real-1"]
    node = node_object(Node(cpus=2, memory=4 * 2**30), STAMP, gpus=config.gpus, config=config)
    status = node["status"]
    assert status["capacity"]["nvidia.com/gpu"] == "4"
    assert (status["allocatable"]["cpu"], status["allocatable"]["memory"]) == ("1500m", "3Gi")
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "desk"
    assert node["spec"]["taints"] == [
        {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    ]
    assert parse_node_config({"gpus": []}).gpus == ()
    declared = parse_node_config({"capacity": {"cpu": "16", "memory": "64Gi"}})
    big = node_object(Node(cpus=2, memory=1 << 30), STAMP, config=declared)
    assert (big["status"]["capacity"]["cpu"], big["status"]["allocatable"]["memory"]) == (
        "16",
        "64Gi",
    )
    assert parse_node_config({"scheduling": {"allOrNothing": False}}).all_or_nothing is False
    assert parse_node_config({}).gpus is None  # found with nvidia-smi


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"gpu": []},
            "gpu: unknown field; known: gpus, capacity, reserved, labels, taints, scheduling",
        ),
        ({"capacity": {"gpu": 2}}, "capacity.gpu: unknown resource; known: cpu, memory"),
        ({"capacity": {"cpu": "-1"}}, "capacity.cpu: must not be negative"),
        ({"scheduling": {"allOrNothing": "no"}}, "scheduling.allOrNothing: must be true or false"),
        ({"scheduling": {"gangs": True}}, "scheduling.gangs: unknown field; known: allOrNothing"),
        ({"gpus": {"count": 2}}, "gpus: must be a list of GPUs"),
        ({"gpus": [{"count": 0}]}, "gpus[0].count: must be an integer from 1 to 1024"),
        ({"gpus": [{"count": True}]}, "gpus[0].count: must be an integer"),
        ({"gpus": [{"memoryMiB": -1}]}, "gpus[0].memoryMiB: must be a non-negative integer"),
        ({"gpus": [{"uuid": "a", "count": 2}]}, "gpus[0]: give uuid (one GPU) or count"),
        ({"gpus": [{"uuid": "a"}, {"uuid": "a"}]}, "gpus[1].uuid: 'a' is declared twice"),
        ({"gpus": [{"colour": "red"}]}, "gpus[0].colour: unknown field"),
        ({"reserved": {"cpu": "lots"}}, "reserved.cpu: "),
        ({"labels": {"a": 1}}, "labels.a: must be a non-empty string"),
        ({"taints": [{"key": "k", "effect": "Sometimes"}]}, "taints[0].effect: must be one of"),
        ([1, 2], "the file: must be a mapping, got list"),
    ],
)
def test_a_mistake_is_one_error_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(NodeConfigError) as err:
        parse_node_config(data)
    assert message in str(err.value)


def test_trainer_up_refuses_a_bad_file_with_one_line_before_starting(tmp_path: Path) -> None:
    bad = tmp_path / "node.yaml"
    bad.write_text("gpus:\n  - count: 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", "up", "--node-config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"error: --node-config: {bad}: gpus[0].count: must be an integer from 1 to 1024\n"
    )
    with pytest.raises(NodeConfigError, match="cannot read"):
        load_node_config(tmp_path / "missing.yaml")
