"""GPUs handed out like the NVIDIA device plugin (trainer/local/executor/node/devices.py): whole
devices per container, none twice, kept across an executor restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer.local.executor.node.devices import (
    AllocationError,
    DeviceManager,
    Gpu,
    device_env,
    plan_devices,
)

GPUS = [Gpu(i, f"GPU-{i}", "NVIDIA H100", 81559) for i in range(4)]


def pod(uid: str, *containers: tuple[str, int], init: tuple[str, int] | None = None) -> Any:
    def container(name: str, n: int) -> dict[str, Any]:
        return {"name": name, "resources": {"limits": {"nvidia.com/gpu": n}} if n else {}}

    spec: dict[str, Any] = {"containers": [container(n, g) for n, g in containers]}
    if init:
        spec["initContainers"] = [container(*init)]
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default"}, "spec": spec}


def test_containers_get_disjoint_devices_and_init_containers_reuse_the_pods() -> None:
    plan = plan_devices(pod("a", ("x", 2), ("y", 1), ("cpu", 0), init=("prep", 2)), ["a", "b", "c"])
    assert plan == {"x": ["a", "b"], "y": ["c"], "prep": ["a", "b"]}


def test_more_than_free_fails_with_the_kubelets_message() -> None:
    with pytest.raises(AllocationError) as err:
        plan_devices(pod("a", ("x", 3)), ["a", "b"])
    assert str(err.value) == (
        "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
        "Requested: 3, Available: 2, which is unexpected"
    )


def test_each_process_sees_only_its_devices_numbered_from_zero_or_none() -> None:
    assert device_env(["GPU-2", "GPU-3"]) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-2,GPU-3",
        "CUDA_VISIBLE_DEVICES": "GPU-2,GPU-3",
    }
    assert device_env([]) == {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}


def test_running_pods_never_share_a_device_and_release_frees_it(tmp_path: Path) -> None:
    devices = DeviceManager(GPUS, tmp_path / "checkpoint.json")
    first = devices.allocate(pod("a", ("x", 3)))
    assert first == {"x": ["GPU-0", "GPU-1", "GPU-2"]}
    with pytest.raises(AllocationError):
        devices.allocate(pod("b", ("x", 2)))
    assert devices.allocate(pod("a", ("x", 3))) == first  # a restart in place: the same ones
    devices.release("uid-unknown")
    devices.release("a")
    assert devices.allocate(pod("b", ("x", 2))) == {"x": ["GPU-0", "GPU-1"]}


def test_allocations_survive_an_executor_restart_without_double_allocation(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.json"
    before = DeviceManager(GPUS, checkpoint)
    held = before.allocate(pod("a", ("x", 2)))
    before.allocate(pod("gone", ("x", 1)))
    after = DeviceManager(GPUS, checkpoint)  # the executor restarted
    after.retain({"a"})  # "gone" ended while it was down
    assert after.allocate(pod("a", ("x", 2))) == held
    assert after.allocate(pod("b", ("x", 2))) == {"x": ["GPU-2", "GPU-3"]}
    assert checkpoint.stat().st_mode & 0o777 == 0o600


def test_an_unreadable_checkpoint_starts_empty(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.json"
    checkpoint.write_text("{not json")
    assert DeviceManager(GPUS, checkpoint).free() == [g.uuid for g in GPUS]
