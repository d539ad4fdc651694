"""A cluster on one machine (docs/simulation.md): 5 simulated nodes x 8 GPUs and no host node;
ten TrainJobs of 2 nodes x 4 GPUs go through admission, the controller, JobSet, the scheduler
and the simulated kubelet to Complete, and at no moment does a node hold more than its 8 GPUs.
A runtime's pod template label sets the simulated run to 1 s (the file's default is 10 min)."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import builders as b
from tests.e2e.test_run import condition, until
from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.kube import resources as r
from trainer.local.apiserver.store import Event
from trainer.local.executor.simulation.config import parse_simulation

GPU = "nvidia.com/gpu"
SIMULATION = {
    "withHostNode": False,
    "nodes": [
        {
            "count": 5,
            "namePrefix": "sim-gpu",
            "zones": ["a", "b"],
            "gpus": {"count": 8, "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559},
        }
    ],
    "stages": {"duration": "10m"},
}


def gpus_requested(pod: dict[str, Any]) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        total += int(
            max(
                int((resources.get("limits") or {}).get(GPU, 0)),
                int((resources.get("requests") or {}).get(GPU, 0)),
            )
        )
    return total


class GpuWatch:
    """On every pod write: the GPUs that bound, unfinished pods request on each node, and the
    most any node ever held."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[str, int]] = {}
        self.peak: dict[str, int] = {}

    def __call__(self, event: Event) -> None:
        if event.key != ("", "pods"):
            return
        pod = event.obj
        uid = pod["metadata"]["uid"]
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if event.type == "DELETED" or not node or phase in ("Succeeded", "Failed"):
            self.held.pop(uid, None)
        else:
            self.held[uid] = (node, gpus_requested(pod))
        use = sum(g for n, g in self.held.values() if n == node)
        if node:
            self.peak[node] = max(self.peak.get(node, 0), use)


@contextlib.asynccontextmanager
async def simulated_plane(tmp_path: Path, simulation: dict[str, Any]) -> AsyncIterator[LocalPlane]:
    """A local plane with ``simulation``'s nodes (closed on exit)."""
    p = await start_local_plane(
        work_dir=tmp_path,
        state_dir=tmp_path / "state",
        simulation=parse_simulation(simulation),
    )
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    async with simulated_plane(tmp_path, SIMULATION) as p:
        yield p


def one_second_runtime(plane: LocalPlane) -> dict[str, Any]:
    """``torch-local-cpu`` as a namespaced runtime whose pods carry ``sim-duration: 1s``."""
    base = plane.server.storage.get_object(
        c.API_VERSION, c.PLURAL_CLUSTER_TRAINING_RUNTIMES, "", "torch-local-cpu"
    )
    assert base is not None
    runtime = {
        "apiVersion": c.API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": {"name": "torch-sim", "namespace": "default"},
        "spec": copy.deepcopy(base["spec"]),
    }
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        meta = job["template"]["spec"]["template"].setdefault("metadata", {})
        meta.setdefault("labels", {})["trainer.kubeflow.org/sim-duration"] = "1s"
    return runtime


async def test_ten_gang_jobs_complete_on_simulated_gpu_nodes_without_overallocation(
    plane: LocalPlane,
) -> None:
    watch = GpuWatch()
    plane.server.storage.store.subscribe(watch)
    try:
        await plane.kube.create(one_second_runtime(plane), gvr=r.TRAINING_RUNTIMES)
        names = [f"sim-{i}" for i in range(10)]
        for name in names:
            job = b.trainjob(
                name,
                runtime="torch-sim",
                runtime_kind="TrainingRuntime",
                num_nodes=2,
                trainer={
                    "command": ["never-run"],
                    "resourcesPerNode": {"limits": {GPU: 4}},
                },
            )
            await plane.kube.create(job, gvr=r.TRAINJOBS)
        await until(plane, lambda: all(condition(plane, n, "Complete") for n in names), timeout=20)
    finally:
        plane.server.storage.store.unsubscribe(watch)
    nodes = {n["metadata"]["name"]: n for n in plane.server.storage.objects("v1", "nodes", "")}
    assert sorted(nodes) == [f"sim-gpu-{i}" for i in range(5)]
    zones = [
        nodes[f"sim-gpu-{i}"]["metadata"]["labels"][r"topology.kubernetes.io/zone"]
        for i in range(5)
    ]
    assert zones == ["a", "b", "a", "b", "a"]
    assert nodes["sim-gpu-0"]["status"]["allocatable"][GPU] == "8"
    assert watch.peak and max(watch.peak.values()) <= 8, watch.peak
    # Ten jobs of 8 GPUs on 40 GPUs: some waited, so every node was full at least once.
    assert max(watch.peak.values()) == 8, watch.peak
    pods = plane.server.storage.objects("v1", "pods", "default")
    assert len(pods) == 20
    for pod in pods:
        status = pod["status"]
        assert pod["spec"]["nodeName"].startswith("sim-gpu-")
        assert status["phase"] == "Succeeded", status
        terminated = status["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    leases = plane.server.storage.objects("coordination.k8s.io/v1", "leases", "kube-node-lease")
    assert sorted(x["metadata"]["name"] for x in leases) == sorted(nodes)


@pytest.mark.parametrize("command", [["run", "-f", "job.yaml"], ["up", "--no-dashboard"]])
def test_a_bad_simulation_file_is_refused_before_anything_starts(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump({"nodes": [{"count": -1}]}))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(b.trainjob("x")))
    done = subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", *command, "--simulate", "sim.yaml"],
        cwd=tmp_path,
        # This checkout's trainer, whatever the venv's editable install points at.
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: --simulate: sim.yaml: nodes[0].count: must be an integer from 0 to 10000" in (
        done.stderr
    )
    assert "local control plane" not in done.stdout


def bare_pod(name: str, *, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A pod bound to a simulated node at creation (no scheduler, no controller)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "nodeName": "sim-gpu-0",
            "containers": [{"name": "main", "image": "img", "command": ["never-run"]}],
            **spec,
        },
    }


def stored_pod(plane: LocalPlane, name: str) -> dict[str, Any]:
    return plane.server.storage.get_object("v1", "pods", "default", name) or {}


def pod_events(plane: LocalPlane, name: str) -> list[str]:
    return [
        e["reason"]
        for e in plane.server.storage.objects("v1", "events", "default")
        if e["involvedObject"]["name"] == name
    ]


async def test_restarts_deadlines_and_deletion_of_simulated_pods(plane: LocalPlane) -> None:
    await plane.kube.create(
        bare_pod(
            "flaky",
            labels={
                "trainer.kubeflow.org/sim-duration": "100ms",
                "trainer.kubeflow.org/sim-fail-probability": "1",
                "trainer.kubeflow.org/sim-exit-code": "7",
            },
            restartPolicy="OnFailure",
        ),
        gvr=r.PODS,
    )
    await plane.kube.create(
        bare_pod("slow", labels={}, restartPolicy="Never", activeDeadlineSeconds=1),
        gvr=r.PODS,
    )

    def restarted() -> bool:
        statuses = stored_pod(plane, "flaky").get("status", {}).get("containerStatuses") or []
        return bool(statuses) and statuses[0]["restartCount"] >= 2

    await until(plane, restarted, timeout=10)
    flaky = stored_pod(plane, "flaky")
    assert flaky["status"]["phase"] == "Running"
    last = flaky["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 7 and last["reason"] == "Error"
    assert "Started" in pod_events(plane, "flaky")

    await until(plane, lambda: stored_pod(plane, "slow")["status"]["phase"] == "Failed")
    slow = stored_pod(plane, "slow")["status"]
    assert slow["reason"] == "DeadlineExceeded", slow
    assert "deadline (1s)" in slow["message"]

    # A finalizer keeps the deleted pod readable: the kubelet sees its deletionTimestamp.
    await plane.kube.patch(
        r.PODS, "default", "flaky", {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    await plane.kube.delete(r.PODS, "default", "flaky")
    await until(plane, lambda: stored_pod(plane, "flaky")["status"]["phase"] == "Failed")
    ended = stored_pod(plane, "flaky")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert ended["exitCode"] == 143
    await until(plane, lambda: "Killing" in pod_events(plane, "flaky"))
    await plane.kube.patch(r.PODS, "default", "flaky", {"metadata": {"finalizers": None}})
    await until(plane, lambda: not stored_pod(plane, "flaky"))
