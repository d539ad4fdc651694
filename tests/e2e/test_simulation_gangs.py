"""Many gangs on simulated GPU nodes with failures injected (docs/simulation.md,
docs/local-plane.md "Scheduling"): 16 TrainJobs of 4 nodes x 2 GPUs queue for 6 nodes x 8 GPUs;
a tenth of the simulated runs fail, the Job fails (``backoffLimit: 0``) and the JobSet restarts
every Job (its ``failurePolicy``). At every write: no node holds more than its 8 GPUs, and no
pod of a JobSet is told it cannot be scheduled while a pod of the same attempt is bound (the
gang's room is held); in the end every TrainJob is Complete, some after restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests import builders as b
from tests.e2e.test_run import condition, until
from tests.e2e.test_simulation import GpuWatch, one_second_runtime, simulated_plane
from trainer.cli.localplane import LocalPlane
from trainer.jobset import contract as jc
from trainer.kube import resources as r
from trainer.local.apiserver.store import Event

GPU = "nvidia.com/gpu"
JOBS = 16
SIMULATION = {
    "withHostNode": False,
    "nodes": [{"count": 6, "namePrefix": "gpu", "gpus": {"count": 8}}],
    "stages": {"duration": "10m"},
}


class GangWatch:
    """Every time a pod is reported Unschedulable: whether a pod of the same JobSet attempt is
    bound and not finished (a gang bound in part)."""

    def __init__(self) -> None:
        self.bound: dict[str, tuple[str, str]] = {}  # pod uid -> (gang attempt, node)
        self.partial: list[str] = []

    def __call__(self, event: Event) -> None:
        if event.key != ("", "pods"):
            return
        pod = event.obj
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        gang = f"{labels.get(jc.LABEL_JOBSET_NAME)}/{labels.get(jc.LABEL_RESTART_ATTEMPT)}"
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if event.type == "DELETED" or phase in ("Succeeded", "Failed"):
            self.bound.pop(meta["uid"], None)
            return
        if node:
            self.bound[meta["uid"]] = (gang, node)
            return
        conditions = (pod.get("status") or {}).get("conditions") or []
        refused = any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in conditions
        )
        if refused and any(g == gang for g, _ in self.bound.values()):
            self.partial.append(meta["name"])


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    async with simulated_plane(tmp_path, SIMULATION) as p:
        yield p


def failing_runtime(plane: LocalPlane) -> dict[str, Any]:
    """One-second runs of which a tenth fail; a failed pod fails its Job, and the JobSet
    restarts (up to 30 times)."""
    runtime = one_second_runtime(plane)
    spec = runtime["spec"]["template"]["spec"]
    spec["failurePolicy"] = {"maxRestarts": 30}
    for job in spec["replicatedJobs"]:
        job_spec = job["template"]["spec"]
        job_spec["backoffLimit"] = 0
        job_spec["template"]["spec"]["restartPolicy"] = "Never"
        labels = job_spec["template"]["metadata"]["labels"]
        labels["trainer.kubeflow.org/sim-fail-probability"] = "0.1"
    return runtime


async def test_gangs_queue_restart_and_complete_without_overallocation(plane: LocalPlane) -> None:
    gpus, gangs = GpuWatch(), GangWatch()
    for hook in (gpus, gangs):
        plane.server.storage.store.subscribe(hook)
    try:
        await plane.kube.create(failing_runtime(plane), gvr=r.TRAINING_RUNTIMES)
        names = [f"g-{i}" for i in range(JOBS)]
        for name in names:
            job = b.trainjob(
                name,
                runtime="torch-sim",
                runtime_kind="TrainingRuntime",
                num_nodes=4,
                trainer={"command": ["never-run"], "resourcesPerNode": {"limits": {GPU: 2}}},
            )
            await plane.kube.create(job, gvr=r.TRAINJOBS)
        await until(plane, lambda: all(condition(plane, n, "Complete") for n in names), timeout=90)
    finally:
        for hook in (gpus, gangs):
            plane.server.storage.store.unsubscribe(hook)
    assert gpus.peak and max(gpus.peak.values()) <= 8, gpus.peak
    assert not gangs.partial, gangs.partial
    restarts = [
        int(
            (plane.server.storage.get_object(jc.API_VERSION, jc.PLURAL, "default", name) or {})
            .get("status", {})
            .get("restarts")
            or 0
        )
        for name in names
    ]
    assert sum(restarts) > 0, "no injected failure was retried"
