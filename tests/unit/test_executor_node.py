"""The local plane's Node: what a kubelet on this host registers, and how kubectl prints it."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from trainer.local.apiserver.http.table.printers import BUILTIN_PRINTERS
from trainer.local.executor.node.devices import Gpu, discover_gpus, parse_gpus
from trainer.local.executor.node.heartbeat import (
    LEASE_NAMESPACE,
    kept_taints,
    lease_object,
    node_object,
)
from trainer.local.executor.policy.podfields import Node

STAMP = "2026-11-27T09:00:00Z"
NOW = dt.datetime(2026, 11, 27, 9, 5, tzinfo=dt.UTC)


def test_the_node_reports_this_hosts_capacity_as_allocatable_and_is_ready() -> None:
    node = node_object(Node(cpus=8, memory=32 * 2**30, ephemeral_storage=100 * 2**30), STAMP)
    status = node["status"]
    assert status["capacity"] == {
        "cpu": "8",
        "memory": "33554432Ki",
        "ephemeral-storage": "104857600Ki",
        "pods": "110",
    }
    assert status["allocatable"] == status["capacity"]
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert [(c["status"], c["reason"]) for c in ready] == [("True", "KubeletReady")]
    assert node["metadata"]["name"] == "local"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "local"


def test_kubectl_get_nodes_prints_status_roles_age_and_version() -> None:
    columns, printer = BUILTIN_PRINTERS[("", "Node")]
    node = node_object(Node(cpus=2), STAMP)
    node["metadata"]["creationTimestamp"] = STAMP
    row = printer(node, NOW)
    names = [c["name"] for c in columns]
    assert dict(zip(names, row, strict=True))["Status"] == "Ready"
    assert row[:4] == ["local", "Ready", "<none>", "5m"]
    node["spec"]["unschedulable"] = True
    node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    node["status"]["conditions"][-1]["status"] = "False"
    assert printer(node, NOW)[1:3] == ["NotReady,SchedulingDisabled", "control-plane"]


def test_the_lease_is_held_by_the_node_in_kube_node_lease() -> None:
    lease = lease_object("local", "2026-11-27T09:00:00.000000Z")
    assert lease["metadata"] == {"name": "local", "namespace": LEASE_NAMESPACE}
    assert lease["spec"]["holderIdentity"] == "local"
    assert lease["spec"]["leaseDurationSeconds"] == 40


FOUR_H100 = "\n".join(f"{i}, GPU-{i:08d}-fake, NVIDIA H100 80GB HBM3, 81559" for i in (3, 0, 1, 2))


def fake_nvidia_smi(directory: Path, body: str) -> None:
    """An ``nvidia-smi`` on PATH that runs ``body`` (a shell script) whatever it is asked."""
    tool = directory / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)


def test_nvidia_smi_output_gives_the_gpus_in_driver_order_and_gfd_labels() -> None:
    gpus = parse_gpus(FOUR_H100 + "\n")
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert gpus[0] == Gpu(0, "GPU-00000000-fake", "NVIDIA H100 80GB HBM3", 81559)
    node = node_object(Node(cpus=2), STAMP, gpus=gpus)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.memory"]) == ("4", "81559")
    assert "nvidia.com/gpu" not in node_object(Node(cpus=2), STAMP)["status"]["capacity"]
    with pytest.raises(ValueError, match="unexpected nvidia-smi line 'oops'"):
        parse_gpus("oops")


async def test_gpus_are_found_with_the_hosts_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    fake_nvidia_smi(tmp_path, f"cat <<'END'\n{FOUR_H100}\nEND")
    assert [g.uuid for g in await discover_gpus()] == [f"GPU-{i:08d}-fake" for i in range(4)]
    fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert await discover_gpus() == []
    assert "NVIDIA-SMI has failed" in caplog.text
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert await discover_gpus() == []


MARK = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
NOT_READY = {
    "key": "node.kubernetes.io/not-ready",
    "effect": "NoSchedule",
    "timeAdded": "2026-01-01T00:00:00Z",
}


def test_registering_again_keeps_the_taints_others_added_when_ours_are_there() -> None:
    # kube-apiserver's NodeRestriction refused "node ... is not allowed to modify taints" when
    # the agent applied only its own taints over the node lifecycle controller's.
    existing = {"spec": {"taints": [MARK, NOT_READY]}}
    assert kept_taints([MARK], existing) == [MARK, NOT_READY]
    assert kept_taints([], existing) == [MARK, NOT_READY]
    # A node first registered, or whose declared taints changed: ours are applied.
    assert kept_taints([MARK], {"spec": {}}) is None
    assert kept_taints([{**MARK, "value": "other"}], existing) is None
