"""Kueue's admission on simulated nodes (docs/simulation.md, docs/kueue.md): a queued TrainJob
stays suspended with no pod while no flavor has room; admitted, Kueue's runtimePatch places
each replicated job on its flavor's node pool (nodeSelector and toleration of the spot
taint), the trainer resumes only once the initializer it ``dependsOn`` is Complete, and the
TrainJob completes, with no process run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests import builders as b
from tests.e2e.kueue import KueueEmulator
from tests.e2e.test_kueue import FLAVORS, RUNTIME, SPOT
from tests.e2e.test_run import condition, until
from tests.e2e.test_simulation import simulated_plane
from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube

SIMULATION = {
    "withHostNode": False,
    "nodes": [
        {
            "count": 2,
            "namePrefix": "small",
            "capacity": {"cpu": "1"},
            "labels": FLAVORS[0].node_labels,
            "taints": [{"key": SPOT["key"], "value": "true", "effect": "NoSchedule"}],
        },
        {
            "count": 2,
            "namePrefix": "big",
            "capacity": {"cpu": "4"},
            "labels": FLAVORS[1].node_labels,
        },
    ],
    "stages": {"duration": "1s"},
}


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[LocalPlane, KueueEmulator, Kube]]:
    async with simulated_plane(tmp_path, SIMULATION) as plane:
        api = await new_api_client(str(tmp_path / "state" / "kubeconfig"), qps_user_agent="kueue")
        kube = Kube(api)
        kueue = KueueEmulator(kube, FLAVORS, local_queues={"user-queue": False})
        try:
            await plane.kube.create(RUNTIME, gvr=r.CLUSTER_TRAINING_RUNTIMES)
            await kueue.start()
            yield plane, kueue, kube
        finally:
            await kueue.stop()
            await api.close()


def pods_of(plane: LocalPlane, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in plane.server.storage.objects("v1", "pods", "default")
        if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == name
    ]


async def test_kueue_admits_onto_simulated_node_pools_and_the_trainjob_completes(
    env: tuple[LocalPlane, KueueEmulator, Kube],
) -> None:
    plane, kueue, kube = env
    for flavor in ("small", "big"):
        kueue.cordon(flavor)  # no room anywhere: the TrainJob waits, suspended
    job = b.trainjob(
        "queued-sim", runtime="queued", labels={c.LABEL_KUEUE_QUEUE_NAME: "user-queue"}
    )
    await kube.create(job, gvr=r.TRAINJOBS)
    workload = await kueue.until(lambda: kueue.workloads.get("default/queued-sim"))
    stored = plane.server.storage.get_object(
        c.API_VERSION, c.PLURAL_TRAINJOBS, "default", job["metadata"]["name"]
    )
    assert workload.admitted is None and stored is not None and stored["spec"]["suspend"] is True
    assert not pods_of(plane, "queued-sim")

    for flavor in ("small", "big"):
        kueue.cordon(flavor, cordoned=False)
    await until(plane, lambda: condition(plane, "queued-sim", "Complete"), timeout=60)
    assert kueue.workloads["default/queued-sim"].admitted == {"prep": "small", "node": "big"}

    pods = pods_of(plane, "queued-sim")
    by_job: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_job.setdefault(
            pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"], []
        ).append(pod)
    assert len(by_job["prep"]) == 1 and len(by_job["node"]) == 2
    for pod in by_job["prep"]:
        assert pod["spec"]["nodeName"].startswith("small-"), pod["spec"]["nodeName"]
        assert SPOT in pod["spec"]["tolerations"]
    for pod in by_job["node"]:
        assert pod["spec"]["nodeName"].startswith("big-"), pod["spec"]["nodeName"]
    # dependsOn: the trainer's Jobs, created suspended with the JobSet, were resumed only once
    # the initializer was Complete, so its pods started after the initializer's ended.
    prep_done = by_job["prep"][0]["status"]["containerStatuses"][0]["state"]["terminated"]
    for pod in by_job["node"]:
        assert pod["status"]["startTime"] >= prep_done["finishedAt"], (pod["status"], prep_done)
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
