"""Why a TrainJob failed, on the TrainJob (docs/troubleshooting.md, "Why a TrainJob failed"):
the controller against the embedded API server, pods and the JobSet's status written the way
the kubelet and JobSet write them. The first failed container (node index, pod, container,
exit code, reason, last output) follows JobSet's own message in the ``Failed`` condition,
also when the pod was deleted before the JobSet failed; a ``ContainerFailed`` Event records
each failure once; a controller that starts after the pod is gone says JobSet's message and
nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders import trainjob
from tests.integration.harness import Plane, local_plane
from tests.integration.test_controller import KEYS
from trainer.controller.manager import Controller
from trainer.jobset import contract as jsc
from trainer.kube import resources as r

JOBSET_FAILED = "jobset failed due to one or more job failures (first failed job: bad-node-0)"


@pytest.fixture
async def plane() -> AsyncIterator[Plane]:
    async with local_plane() as p:
        yield p


async def start(plane: Plane) -> Controller:
    controller = Controller(plane.kube, ssh_keygen=lambda: KEYS)
    await controller.start_caches()
    controller.start_workers()
    return controller


def pod(jobset: dict[str, Any], index: int, state: dict[str, Any], **status: Any) -> Any:
    name = jobset["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-node-0-{index}-abcde",
            "namespace": "default",
            "labels": {
                jsc.LABEL_JOBSET_NAME: name,
                jsc.LABEL_JOBSET_UID: jobset["metadata"]["uid"],
                jsc.LABEL_REPLICATED_JOB: "node",
                jsc.LABEL_JOB_INDEX: "0",
                jsc.LABEL_RESTART_ATTEMPT: "0",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "spec": {"containers": [{"name": "node", "image": "img"}]},
        "status": {"containerStatuses": [{"name": "node", **state}], **status},
    }


def terminated(code: int, message: str, finished: str, reason: str = "Error") -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason,
            "message": message,
            "startedAt": "2026-01-01T00:00:00Z",
            "finishedAt": finished,
        }
    }


async def create_pod(plane: Plane, body: dict[str, Any]) -> None:
    status = body.pop("status")
    created = await plane.kube.create(body)
    await plane.kube.patch_status(
        r.PODS, "default", created["metadata"]["name"], {"status": status}
    )


async def fail_jobset(plane: Plane, name: str) -> None:
    cond = {
        "type": "Failed",
        "status": "True",
        "reason": "FailedJobs",
        "message": JOBSET_FAILED.replace("bad", name),
        "lastTransitionTime": "2026-01-01T00:01:00Z",
    }
    await plane.kube.patch_status(r.JOBSETS, "default", name, {"status": {"conditions": [cond]}})


def failed_message(plane: Plane, name: str) -> str | None:
    conds = ((plane.trainjob("default", name) or {}).get("status") or {}).get("conditions") or []
    failed = next((x for x in conds if x["type"] == "Failed" and x["status"] == "True"), None)
    return None if failed is None else str(failed["message"])


def events(plane: Plane, name: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in plane.server.storage.objects("v1", "events", "default")
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


async def test_the_first_failed_container_of_a_deleted_pod_is_in_the_failed_message(
    plane: Plane,
) -> None:
    controller = await start(plane)
    try:
        await plane.kube.create(trainjob("bad", num_nodes=2))
        jobset = await plane.until(lambda: plane.jobset("default", "bad"), what="JobSet")
        # Node 1 failed first (restarted in place: lastState), node 0 later.
        output = "loading shards\nshard 7 is corrupt\n"
        await create_pod(
            plane,
            pod(
                jobset,
                1,
                {
                    "restartCount": 1,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:20Z"}},
                    "lastState": terminated(3, output, "2026-01-01T00:00:10Z"),
                },
            ),
        )
        await create_pod(
            plane, pod(jobset, 0, {"state": terminated(137, "", "2026-01-01T00:00:30Z")})
        )
        await plane.until(lambda: len(events(plane, "bad", "ContainerFailed")) == 2, what="Events")
        # The Job controller deletes the pods it gave up on, before JobSet fails.
        for index in (0, 1):
            await plane.kube.delete(r.PODS, "default", f"bad-node-0-{index}-abcde")
        await fail_jobset(plane, "bad")
        message = await plane.until(lambda: failed_message(plane, "bad"), what="Failed")
        assert message == (
            f"{JOBSET_FAILED}; first failure: replicated job node, node index 1, "
            "pod bad-node-0-1-abcde, container node exited with code 3 (Error); last output:\n"
            "loading shards\nshard 7 is corrupt"
        )
        job = plane.trainjob("default", "bad") or {}
        failed = next(x for x in job["status"]["conditions"] if x["type"] == "Failed")
        assert failed["reason"] == "FailedJobs"  # JobSet's, for Kueue and the SDK
        assert sorted(events(plane, "bad", "ContainerFailed")) == [
            "replicated job node, node index 0, pod bad-node-0-0-abcde, "
            "container node exited with code 137 (Error)",
            "replicated job node, node index 1, pod bad-node-0-1-abcde, "
            "container node exited with code 3 (Error); last output:\n"
            "loading shards\nshard 7 is corrupt",
        ]
    finally:
        await controller.stop()


async def test_a_controller_started_after_the_pod_was_deleted_says_only_jobsets_message(
    plane: Plane,
) -> None:
    controller = await start(plane)
    await plane.kube.create(trainjob("gone", num_nodes=2))
    jobset = await plane.until(lambda: plane.jobset("default", "gone"), what="JobSet")
    await controller.stop()
    # While no controller runs: node 1 fails and its pod is deleted, then the JobSet fails.
    await create_pod(
        plane, pod(jobset, 1, {"state": terminated(3, "boom", "2026-01-01T00:00:10Z")})
    )
    await plane.kube.delete(r.PODS, "default", "gone-node-0-1-abcde")
    await fail_jobset(plane, "gone")
    controller = await start(plane)
    try:
        message = await plane.until(lambda: failed_message(plane, "gone"), what="Failed")
        assert message == JOBSET_FAILED.replace("bad", "gone")
    finally:
        await controller.stop()


async def test_a_cause_seen_after_the_jobsets_failure_is_added_and_then_kept(
    plane: Plane,
) -> None:
    controller = await start(plane)
    try:
        await plane.kube.create(trainjob("late", num_nodes=1))
        jobset = await plane.until(lambda: plane.jobset("default", "late"), what="JobSet")
        await fail_jobset(plane, "late")
        await plane.until(lambda: failed_message(plane, "late"), what="Failed")
        await create_pod(
            plane,
            pod(
                jobset,
                0,
                {"state": terminated(137, "", "2026-01-01T00:00:10Z", reason="OOMKilled")},
            ),
        )
        message = await plane.until(
            lambda: (
                "first failure" in (failed_message(plane, "late") or "")
                and failed_message(plane, "late")
            ),
            what="cause added",
        )
        assert message.endswith(
            "first failure: replicated job node, node index 0, pod late-node-0-0-abcde, "
            "container node exited with code 137 (OOMKilled)"
        )
        # Frozen from now on: a later failure does not replace it.
        await create_pod(
            plane, pod(jobset, 1, {"state": terminated(1, "x", "2026-01-01T00:00:01Z")})
        )
        await plane.until(lambda: len(events(plane, "late", "ContainerFailed")) == 2, what="Event")
        assert failed_message(plane, "late") == message
    finally:
        await controller.stop()
