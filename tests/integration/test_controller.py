"""The controller against the embedded API server: every controller flow that does not
need pods to run (the JobSet's status is written here the way JobSet would write it)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from tests.builders import trainjob
from tests.integration.harness import GROUP, VERSION, Plane, local_plane, report_jobset_status
from trainer.controller.manager import Controller
from trainer.kube import resources as r
from trainer.runtime.info import SSHKeyPair

KEYS = SSHKeyPair(b"-----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----\n", b"k")


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC).replace(microsecond=0)

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
async def env() -> AsyncIterator[tuple[Plane, Controller, Clock]]:
    async with local_plane() as plane:
        clock = Clock()
        controller = Controller(plane.kube, ssh_keygen=lambda: KEYS, now=clock)
        await controller.start_caches()
        controller.start_workers()
        try:
            yield plane, controller, clock
        finally:
            await controller.stop()


def state_of(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("state")


def conditions(obj: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return {x["type"]: (x["status"], x["reason"]) for x in conds}


async def set_jobset_status(plane: Plane, name: str, status: dict[str, Any]) -> None:
    await plane.kube.patch_status(r.JOBSETS, "default", name, {"status": status})


async def test_torch_trainjob_gets_its_jobset_snapshot_and_status(
    env: tuple[Plane, Controller, Clock],
) -> None:
    plane, _, _ = env
    await plane.kube.create(
        trainjob("mnist", trainer={"numNodes": 3, "command": ["torchrun", "t.py"]})
    )
    jobset = await plane.until(lambda: plane.jobset("default", "mnist"), what="JobSet")
    node = jobset["spec"]["replicatedJobs"][0]
    assert node["template"]["spec"]["parallelism"] == 3
    env_vars = {
        e["name"]: e.get("value")
        for e in node["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env_vars["PET_NNODES"] == "3"
    assert env_vars["PET_MASTER_ADDR"] == "mnist-node-0-0.mnist"
    owner = jobset["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainJob", "mnist", True)
    assert plane.get("v1", "configmaps", "default", "mnist-runtime-snapshot") is not None
    await report_jobset_status(plane, "default", "mnist")
    job = await plane.until(
        lambda: (
            state_of(plane.trainjob("default", "mnist")) == "Pending"
            and plane.trainjob("default", "mnist")
        ),
        what="Pending",
    )
    assert "Pending" not in conditions(job)  # a state, not a condition (SDK compatibility)
    assert [j["name"] for j in job["status"]["jobsStatus"]] == ["node"]


async def test_jobset_status_is_mirrored_and_running_then_complete(
    env: tuple[Plane, Controller, Clock],
) -> None:
    plane, _, _ = env
    await plane.kube.create(trainjob("mirror"))
    await plane.until(lambda: plane.jobset("default", "mirror"), what="JobSet")
    await set_jobset_status(
        plane,
        "mirror",
        {
            "replicatedJobsStatus": [
                {
                    "name": "node",
                    "ready": 1,
                    "succeeded": 0,
                    "failed": 0,
                    "active": 1,
                    "suspended": 0,
                }
            ]
        },
    )
    job = await plane.until(
        lambda: (
            state_of(plane.trainjob("default", "mirror")) == "Running"
            and plane.trainjob("default", "mirror")
        ),
        what="Running",
    )
    assert job["status"]["jobsStatus"] == [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
    ]
    assert "conditions" not in job["status"]  # the SDK infers Running only without conditions
    done = {
        "type": "Completed",
        "status": "True",
        "reason": "AllJobsCompleted",
        "message": "jobset completed successfully",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await set_jobset_status(
        plane,
        "mirror",
        {
            "conditions": [done],
            "replicatedJobsStatus": [
                {
                    "name": "node",
                    "ready": 0,
                    "succeeded": 1,
                    "failed": 0,
                    "active": 0,
                    "suspended": 0,
                }
            ],
        },
    )
    job = await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "mirror")).get("Complete")
            and plane.trainjob("default", "mirror")
        ),
        what="Complete",
    )
    complete = next(x for x in job["status"]["conditions"] if x["type"] == "Complete")
    assert (complete["reason"], complete["message"]) == (
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    assert job["status"]["conditions"][0]["type"] == "Complete"
    assert state_of(job) == "Complete"


async def test_failed_jobset_fails_the_trainjob(env: tuple[Plane, Controller, Clock]) -> None:
    plane, _, _ = env
    await plane.kube.create(trainjob("boom"))
    await plane.until(lambda: plane.jobset("default", "boom"), what="JobSet")
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "FailedJobs",
        "message": "jobset failed due to one or more job failures (first failed job: boom-node-0)",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await set_jobset_status(plane, "boom", {"conditions": [failed]})
    job = await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "boom")).get("Failed")
            and plane.trainjob("default", "boom")
        ),
        what="Failed",
    )
    assert conditions(job)["Failed"] == ("True", "FailedJobs")


async def test_suspend_and_resume(env: tuple[Plane, Controller, Clock]) -> None:
    plane, _, _ = env
    await plane.kube.create(trainjob("queued", suspend=True))
    jobset = await plane.until(lambda: plane.jobset("default", "queued"), what="JobSet")
    assert jobset["spec"]["suspend"] is True
    await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "queued")).get("Suspended")
            == ("True", "Suspended")
        ),
        what="Suspended",
    )
    await plane.kube.patch(r.TRAINJOBS, "default", "queued", {"spec": {"suspend": False}})
    await plane.until(
        lambda: (plane.jobset("default", "queued") or {}).get("spec", {}).get("suspend") is False,
        what="JobSet resumed",
    )
    job = await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "queued")).get("Suspended") == ("False", "Resumed")
            and plane.trainjob("default", "queued")
        ),
        what="Resumed",
    )
    assert (
        job["status"]["conditions"][0]["type"] != "Suspended"
        or job["status"]["conditions"][0]["status"] == "False"
    )


async def test_runtime_patches_reach_a_suspended_jobset(
    env: tuple[Plane, Controller, Clock],
) -> None:
    plane, _, _ = env
    await plane.kube.create(trainjob("kueue", suspend=True))
    await plane.until(lambda: plane.jobset("default", "kueue"), what="JobSet")
    patch = [
        {
            "manager": "kueue.x-k8s.io/manager",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {
                                        "template": {"spec": {"nodeSelector": {"flavor": "a100"}}}
                                    }
                                },
                            }
                        ]
                    }
                }
            },
        }
    ]
    await plane.kube.patch(r.TRAINJOBS, "default", "kueue", {"spec": {"runtimePatches": patch}})

    def selector() -> Any:
        js = plane.jobset("default", "kueue") or {}
        return (
            js.get("spec", {})
            .get("replicatedJobs", [{}])[0]
            .get("template", {})
            .get("spec", {})
            .get("template", {})
            .get("spec", {})
            .get("nodeSelector")
        )

    assert await plane.until(selector, what="nodeSelector") == {"flavor": "a100"}
    await plane.kube.patch(
        r.TRAINJOBS,
        "default",
        "kueue",
        {
            "spec": {
                "runtimePatches": [
                    {
                        "manager": "kueue.x-k8s.io/manager",
                        "trainingRuntimeSpec": {"template": {"spec": {}}},
                    }
                ]
            }
        },
    )
    await plane.until(lambda: selector() is None, what="nodeSelector removed by server-side apply")


async def test_snapshot_pins_the_runtime_and_is_recreated(
    env: tuple[Plane, Controller, Clock],
) -> None:
    plane, _, _ = env
    await plane.kube.create(trainjob("pinned", suspend=True))
    await plane.until(
        lambda: plane.get("v1", "configmaps", "default", "pinned-runtime-snapshot"), what="snapshot"
    )
    runtime = plane.get(f"{GROUP}/{VERSION}", "clustertrainingruntimes", "", "torch-distributed")
    assert runtime is not None
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]["containers"][0]["image"] = "changed:latest"
    runtime["metadata"] = {"name": "torch-distributed"}
    await plane.kube.apply(runtime, "admin", force=True)
    await plane.kube.patch(
        r.TRAINJOBS, "default", "pinned", {"metadata": {"labels": {"poke": "1"}}}
    )

    def image() -> Any:
        js = plane.jobset("default", "pinned") or {}
        return js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "containers"
        ][0]["image"]

    assert image() == "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    await plane.kube.delete(r.CONFIGMAPS, "default", "pinned-runtime-snapshot")
    snapshot = await plane.until(
        lambda: plane.get("v1", "configmaps", "default", "pinned-runtime-snapshot"),
        what="snapshot recreated",
    )
    assert (
        "changed:latest" in snapshot["data"]["runtime"]
    )  # a new snapshot takes the runtime as it is now


async def test_unknown_runtime_kind_and_missing_runtime(
    env: tuple[Plane, Controller, Clock],
) -> None:
    plane, _, _ = env
    odd = trainjob("odd")
    odd["spec"]["runtimeRef"] = {"name": "x", "kind": "Pipeline", "apiGroup": "example.com"}
    await plane.kube.create(odd)
    job = await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "odd")).get("Failed")
            and plane.trainjob("default", "odd")
        ),
        what="Failed",
    )
    assert conditions(job)["Failed"] == ("True", "TrainingRuntimeNotSupported")
    missing = trainjob("waiting")
    missing["spec"]["runtimeRef"]["name"] = "later"
    await plane.kube.create(missing)
    job = await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "waiting")).get("BuildFailed")
            and plane.trainjob("default", "waiting")
        ),
        what="BuildFailed",
    )
    assert conditions(job)["BuildFailed"] == ("True", "RuntimeNotFound")
    assert job["status"]["conditions"][0]["type"] == "BuildFailed"
    runtime = yaml.safe_load(
        yaml.safe_dump(
            plane.get(f"{GROUP}/{VERSION}", "clustertrainingruntimes", "", "torch-distributed")
        )
    )
    runtime["metadata"] = {"name": "later"}
    await plane.kube.create(runtime)
    await plane.until(
        lambda: plane.jobset("default", "waiting"), what="JobSet once the runtime exists"
    )
    job = await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "waiting")).get("BuildFailed", ("", ""))[0]
            == "False"
            and plane.trainjob("default", "waiting")
        ),
        what="BuildFailed cleared",
    )
    assert conditions(job)["BuildFailed"] == ("False", "ResourcesCreated")


async def test_multikueue_trainjobs_are_left_alone(env: tuple[Plane, Controller, Clock]) -> None:
    plane, controller, _ = env
    await plane.kube.create(trainjob("remote", managedBy="kueue.x-k8s.io/multikueue"))
    await plane.kube.create(trainjob("local"))
    await plane.until(lambda: plane.jobset("default", "local"), what="the other TrainJob's JobSet")
    await plane.until(
        lambda: not controller.queue.processing and not len(controller.queue), what="idle"
    )
    assert plane.jobset("default", "remote") is None
    assert plane.get("v1", "configmaps", "default", "remote-runtime-snapshot") is None
    assert "status" not in (plane.trainjob("default", "remote") or {})


async def test_deadline_fails_and_deletes_the_jobset(env: tuple[Plane, Controller, Clock]) -> None:
    plane, controller, clock = env
    await plane.kube.create(trainjob("short", activeDeadlineSeconds=30))
    await plane.until(lambda: plane.jobset("default", "short"), what="JobSet")
    clock.now += dt.timedelta(seconds=31)
    controller.queue.add("default/short")
    job = await plane.until(
        lambda: (
            conditions(plane.trainjob("default", "short")).get("Failed")
            and plane.trainjob("default", "short")
        ),
        what="deadline",
    )
    assert conditions(job)["Failed"] == ("True", "DeadlineExceeded")
    await plane.until(lambda: plane.jobset("default", "short") is None, what="JobSet deleted")


async def test_mpi_secret_and_hostfile(env: tuple[Plane, Controller, Clock]) -> None:
    plane, _, _ = env
    job = trainjob("ds", trainer={"numNodes": 2, "command": ["deepspeed", "train.py"]})
    job["spec"]["runtimeRef"]["name"] = "deepspeed-distributed"
    await plane.kube.create(job)
    await plane.until(lambda: plane.jobset("default", "ds"), what="JobSet")
    secret = plane.get("v1", "secrets", "default", "ds-mpi-ssh-auth")
    hostfile = plane.get("v1", "configmaps", "default", "ds-mpi-hostfile")
    assert secret is not None and secret["type"] == "kubernetes.io/ssh-auth"
    assert (
        hostfile is not None
        and hostfile["data"]["hostfile"] == "ds-node-0-0.ds slots=1\nds-launcher-0-0.ds slots=1\n"
    )


async def test_a_settled_trainjob_costs_no_writes_on_resync(
    env: tuple[Plane, Controller, Clock],
) -> None:
    plane, controller, _ = env
    await plane.kube.create(trainjob("settled", suspend=True))
    await plane.until(
        lambda: conditions(plane.trainjob("default", "settled")).get("Suspended"), what="settled"
    )
    await plane.until(
        lambda: not controller.queue.processing and not len(controller.queue), what="idle"
    )
    before = len(plane.server.storage.hooks.writes())
    for _ in range(3):
        await controller.reconciler.reconcile("default/settled")
    assert len(plane.server.storage.hooks.writes()) == before


def _counts(active: int, ready: int, succeeded: int) -> list[dict[str, Any]]:
    return [
        {
            "name": "node",
            "ready": ready,
            "succeeded": succeeded,
            "failed": 0,
            "active": active,
            "suspended": 0,
        }
    ]


async def _cached(controller: Controller, name: str, counts: Any) -> None:
    """Until the controller's JobSet cache holds ``counts`` (re-checked on its every event)."""
    informer = controller.caches.jobsets
    changed = asyncio.Event()
    informer.add_handler(lambda *_: changed.set())

    def seen() -> bool:
        jobset = informer.get("default", name) or {}
        return bool((jobset.get("status") or {}).get("replicatedJobsStatus") == counts)

    async with asyncio.timeout(10):
        while not seen():
            changed.clear()
            await changed.wait()


def _status_writes(plane: Plane, name: str) -> int:
    return sum(
        1
        for w in plane.server.storage.hooks.writes()
        if w.resource == "trainjobs/status" and w.name == name
    )


async def test_a_change_of_counts_alone_waits_a_moment_and_goes_with_what_follows(
    env: tuple[Plane, Controller, Clock],
) -> None:
    """A Job whose pods all finished moves its counts, and completes a moment later: the
    TrainJob gets one write (Complete, with the final counts), not two."""
    plane, controller, _ = env
    await plane.kube.create(trainjob("held"))
    await plane.until(lambda: plane.jobset("default", "held"), what="JobSet")
    await set_jobset_status(plane, "held", {"replicatedJobsStatus": _counts(1, 1, 0)})
    await plane.until(
        lambda: state_of(plane.trainjob("default", "held")) == "Running", what="Running"
    )
    before = _status_writes(plane, "held")

    await set_jobset_status(plane, "held", {"replicatedJobsStatus": _counts(0, 1, 0)})
    await _cached(controller, "held", _counts(0, 1, 0))
    result = await controller.reconciler.reconcile("default/held")
    assert result.requeue_after == 1.0  # the clock stands: the hold has its whole second left
    assert _status_writes(plane, "held") == before
    assert (plane.trainjob("default", "held") or {})["status"]["jobsStatus"] == _counts(1, 1, 0)

    done = {
        "type": "Completed",
        "status": "True",
        "reason": "AllJobsCompleted",
        "message": "jobset completed successfully",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await set_jobset_status(
        plane, "held", {"conditions": [done], "replicatedJobsStatus": _counts(0, 0, 1)}
    )
    job = await plane.until(
        lambda: (
            state_of(plane.trainjob("default", "held")) == "Complete"
            and plane.trainjob("default", "held")
        ),
        what="Complete",
    )
    assert job["status"]["jobsStatus"] == _counts(0, 0, 1)
    assert _status_writes(plane, "held") == before + 1


async def test_a_change_of_counts_alone_is_written_once_the_hold_passed(
    env: tuple[Plane, Controller, Clock],
) -> None:
    plane, controller, clock = env
    await plane.kube.create(trainjob("counts"))
    await plane.until(lambda: plane.jobset("default", "counts"), what="JobSet")
    await set_jobset_status(plane, "counts", {"replicatedJobsStatus": _counts(0, 0, 0)})
    await plane.until(
        lambda: state_of(plane.trainjob("default", "counts")) == "Pending", what="Pending"
    )
    await set_jobset_status(plane, "counts", {"replicatedJobsStatus": _counts(1, 0, 0)})
    await _cached(controller, "counts", _counts(1, 0, 0))
    assert (await controller.reconciler.reconcile("default/counts")).requeue_after == 1.0
    clock.now += dt.timedelta(seconds=1)
    job = await plane.until(
        lambda: (
            (plane.trainjob("default", "counts") or {}).get("status", {}).get("jobsStatus")
            == _counts(1, 0, 0)
            and plane.trainjob("default", "counts")
        ),
        what="the counts written",
    )
    assert state_of(job) == "Pending"
    assert "default/counts" not in controller.reconciler.status_held
