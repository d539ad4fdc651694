"""The workstation as a one-node cluster with GPUs (docs/local-plane.md, "The node" and
"Scheduling"), with 4 GPUs declared through ``--node-config`` so that it runs anywhere: two
TrainJobs of 2 nodes x 1 GPU run at once on disjoint devices, a third waits Unschedulable with
kube-scheduler's message until one finishes, and kubectl shows the node's allocation."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import builders as b
from tests.e2e.test_run import condition, until
from tests.e2e.test_run_flows import KUBECTL, kubectl
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.kube import resources as r
from trainer.local.executor.node.config import parse_node_config

GPU = "nvidia.com/gpu"
NODE_CONFIG = {"gpus": [{"product": "NVIDIA H100 80GB HBM3", "count": 4}], "capacity": {"cpu": 16}}
# Each pod writes what it sees, then holds its GPU until the test releases its TrainJob.
HOLD = (
    "import os, pathlib, time\n"
    "out = pathlib.Path(os.environ['OUT'])\n"
    "seen = os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>') + '|' + "
    "os.environ.get('NVIDIA_VISIBLE_DEVICES', '<unset>')\n"
    "(out / ('seen-' + os.environ['HOSTNAME'])).write_text(seen)\n"
    "release = out / ('release-' + os.environ['JOB'])\n"
    "while not release.exists():\n"
    "    time.sleep(0.05)\n"
)


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    p = await start_local_plane(
        work_dir=tmp_path,
        state_dir=tmp_path / "state",
        node_config=parse_node_config(NODE_CONFIG),
    )
    try:
        yield p
    finally:
        await p.close()


def gpu_job(name: str, out: Path, *, gpus: int = 1, nodes: int = 2) -> dict[str, Any]:
    trainer = {
        "command": [sys.executable, "-c", HOLD],
        "env": [{"name": "OUT", "value": str(out)}, {"name": "JOB", "value": name}],
        "resourcesPerNode": {"limits": {GPU: gpus}},
    }
    return b.trainjob(name, runtime="torch-local-cpu", num_nodes=nodes, trainer=trainer)


def seen(out: Path, job: str) -> dict[str, str]:
    """What each pod of ``job`` saw: pod hostname -> CUDA_VISIBLE_DEVICES."""
    return {
        f.name.removeprefix("seen-"): f.read_text().split("|")[0]
        for f in out.glob(f"seen-{job}-node-*")
    }


def pods_of(plane: LocalPlane, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in plane.server.storage.objects("v1", "pods", "default")
        if p["metadata"]["name"].startswith(f"{job}-node-")
    ]


def scheduled(pod: dict[str, Any]) -> dict[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled"), {})


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_two_jobs_share_four_gpus_and_a_third_waits_its_turn(
    plane: LocalPlane, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("one", "two"):
        await plane.kube.create(gpu_job(name, out), gvr=r.TRAINJOBS)
    await until(plane, lambda: len(seen(out, "one")) == 2 and len(seen(out, "two")) == 2)
    await plane.kube.create(gpu_job("three", out), gvr=r.TRAINJOBS)

    def waiting() -> bool:
        pods = pods_of(plane, "three")
        return len(pods) == 2 and all(scheduled(p).get("reason") == "Unschedulable" for p in pods)

    def failed_scheduling() -> list[dict[str, Any]]:
        return [
            e
            for e in plane.server.storage.objects("v1", "events", "default")
            if e["reason"] == "FailedScheduling"
            and e["involvedObject"]["name"].startswith("three-node-")
        ]

    # The Event is posted in the background after the pod's status, as the scheduler's
    # recorder does.
    await until(plane, lambda: waiting() and bool(failed_scheduling()))
    devices = {**seen(out, "one"), **seen(out, "two")}
    # Each process sees exactly one device, and no two processes the same one.
    assert sorted(devices.values()) == [f"GPU-fake-{i}" for i in range(4)], devices
    for pod in pods_of(plane, "three"):
        assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
        assert scheduled(pod)["message"] == (
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        )
    events = failed_scheduling()
    assert events and events[0]["type"] == "Warning"

    kubeconfig = tmp_path / "state" / "kubeconfig"
    described = await kubectl(kubeconfig, "describe", "node", "local")
    allocated = described.split("Allocated resources:", 1)[1]
    assert re.search(r"nvidia\.com/gpu\s+4\s+4", allocated), described
    for name in ("one", "two"):
        assert f"{name}-node-0-0" in described and f"{name}-node-0-1" in described
    nodes = await kubectl(kubeconfig, "get", "nodes", "-o", "wide")
    assert nodes.splitlines()[1].split()[:2] == ["local", "Ready"], nodes

    (out / "release-one").touch()
    await until(plane, lambda: condition(plane, "one", "Complete"))
    await until(plane, lambda: len(seen(out, "three")) == 2)
    three = seen(out, "three")
    assert set(three.values()) == set(seen(out, "one").values()), (three, devices)
    for name in ("two", "three"):
        (out / f"release-{name}").touch()
    for name in ("two", "three"):
        await until(plane, lambda name=name: condition(plane, name, "Complete"))


async def test_a_job_larger_than_the_node_never_fits(plane: LocalPlane, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    await plane.kube.create(gpu_job("huge", out, gpus=3), gvr=r.TRAINJOBS)

    def refused() -> str:
        pods = pods_of(plane, "huge")
        return str(scheduled(pods[0]).get("message") or "") if len(pods) == 2 else ""

    message = await until(plane, refused)
    assert message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert not seen(out, "huge")


def run_cli(tmp_path: Path, *jobs: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``trainer run`` of ``jobs`` on a node declaring :data:`NODE_CONFIG`."""
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump_all(jobs))
    (tmp_path / "node.yaml").write_text(yaml.safe_dump(NODE_CONFIG))
    argv = ["run", "-f", "jobs.yaml", "--node-config", "node.yaml", "--timeout", "120"]
    return subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_trainer_run_says_why_a_job_waits_and_runs_it_when_the_gpus_free(tmp_path: Path) -> None:
    holder = b.trainjob(
        "holder",
        runtime="torch-local-cpu",
        num_nodes=2,
        trainer={
            "command": [sys.executable, "-c", "import time; time.sleep(3)"],
            "resourcesPerNode": {"limits": {GPU: 2}},
        },
    )
    after = b.trainjob(
        "after",
        runtime="torch-local-cpu",
        num_nodes=1,
        trainer={
            "command": [
                sys.executable,
                "-c",
                "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])",
            ],
            "resourcesPerNode": {"limits": {GPU: 1}},
        },
    )
    done = run_cli(tmp_path, holder, after)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "TrainJob default/after waiting: 1 pod(s) Pending: 0/1 nodes are available: "
        "1 Insufficient nvidia.com/gpu. (needs 1 nvidia.com/gpu, 0 free)"
    ) in done.stdout, done.stdout
    assert re.search(r"after-node-0-0-\w+ \| GPU-fake-\d\n", done.stdout), done.stdout


def test_trainer_run_ends_with_exit_2_for_a_job_that_can_never_fit(tmp_path: Path) -> None:
    huge = b.trainjob(
        "huge",
        runtime="torch-local-cpu",
        num_nodes=2,
        trainer={
            "command": [sys.executable, "-c", "print(1)"],
            "resourcesPerNode": {"limits": {GPU: 3}},
        },
    )
    done = run_cli(tmp_path, huge)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "(needs 6 nvidia.com/gpu, 4 free)" in done.stdout, done.stdout
    assert "TrainJob default/huge can never run on this node" in done.stdout, done.stdout


# Long tests: make test starts the files marked slow first (pyproject.toml, markers).
pytestmark = pytest.mark.slow
