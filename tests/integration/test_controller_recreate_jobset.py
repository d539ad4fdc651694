"""The controller recreates a suspended JobSet it cannot update, on the local plane: a pod
template field taken away that JobSet does not let change (what Kueue v0.17 does to a runtime
patch's v2.3 fields, docs/kueue.md), and never applies to a JobSet that is being deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders import trainjob
from tests.integration.harness import Plane, local_plane
from trainer.controller.manager import Controller
from trainer.kube import resources as r
from trainer.runtime.info import SSHKeyPair

KEYS = SSHKeyPair(b"-----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----\n", b"k")


@pytest.fixture
async def plane() -> AsyncIterator[Plane]:
    async with local_plane() as plane:
        controller = Controller(plane.kube, ssh_keygen=lambda: KEYS)
        await controller.start_caches()
        controller.start_workers()
        try:
            yield plane
        finally:
            await controller.stop()


def patch(manager: str, pod_spec: dict[str, Any] | None) -> dict[str, Any]:
    """A runtime patch of ``manager`` that sets ``pod_spec`` on the node pods (none: empty)."""
    spec: dict[str, Any] = {}
    if pod_spec is not None:
        template = {"spec": {"template": {"spec": pod_spec}}}
        spec["replicatedJobs"] = [{"name": "node", "template": template}]
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": spec}}}


def pod_spec(jobset: dict[str, Any] | None) -> dict[str, Any]:
    jobs = ((jobset or {}).get("spec") or {}).get("replicatedJobs") or [{}]
    found: dict[str, Any] = (
        jobs[0].get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
    )
    return found


async def test_a_field_jobset_keeps_is_taken_away_by_recreating_it(plane: Plane) -> None:
    """A runtime patch's terminationGracePeriodSeconds removed while suspended: JobSet refuses
    the update ("field is immutable"), so the idle JobSet is made anew, then resumed."""
    grace = patch("tool", {"terminationGracePeriodSeconds": 5})
    await plane.kube.create(trainjob("grace", suspend=True, runtime_patches=[grace]))
    first = await plane.until(
        lambda: (
            pod_spec(plane.jobset("default", "grace")).get("terminationGracePeriodSeconds")
            and plane.jobset("default", "grace")
        ),
        what="JobSet with the grace period",
    )
    await plane.kube.patch(
        r.TRAINJOBS, "default", "grace", {"spec": {"runtimePatches": [patch("tool", None)]}}
    )
    await plane.kube.patch(r.TRAINJOBS, "default", "grace", {"spec": {"suspend": False}})
    second = await plane.until(
        lambda: (
            (js := plane.jobset("default", "grace"))
            and js["metadata"]["uid"] != first["metadata"]["uid"]
            and js["spec"]["suspend"] is False
            and js
        ),
        what="a new JobSet, resumed",
    )
    assert "terminationGracePeriodSeconds" not in pod_spec(second)
    status = plane.trainjob("default", "grace") or {}
    assert not [c for c in status["status"]["conditions"] if c["type"] == "BuildFailed"]


async def test_a_jobset_being_deleted_is_waited_for_not_updated(plane: Plane) -> None:
    """Kueue clears its placement (the JobSet is recreated: deleted in the foreground), then
    admits again at once: the JobSet still being deleted is not resumed; its successor is."""
    kueue = "kueue.x-k8s.io/manager"
    placed = patch(kueue, {"nodeSelector": {"pool": "a"}})
    await plane.kube.create(trainjob("held", suspend=True, runtime_patches=[placed]))
    old = await plane.until(
        lambda: (
            pod_spec(plane.jobset("default", "held")).get("nodeSelector")
            and plane.jobset("default", "held")
        ),
        what="JobSet with the placement",
    )
    # A finalizer of the test's keeps the JobSet in deletion for as long as the test wants.
    hold = {"metadata": {"finalizers": ["test.kubeflow.org/hold"]}}
    await plane.kube.patch(r.JOBSETS, "default", "held", hold)
    await plane.kube.patch(
        r.TRAINJOBS, "default", "held", {"spec": {"runtimePatches": [patch(kueue, None)]}}
    )
    await plane.until(
        lambda: (plane.jobset("default", "held") or {})["metadata"].get("deletionTimestamp"),
        what="the JobSet in deletion",
    )
    await plane.kube.patch(r.TRAINJOBS, "default", "held", {"spec": {"runtimePatches": [placed]}})
    await plane.kube.patch(r.TRAINJOBS, "default", "held", {"spec": {"suspend": False}})
    # The controller saw the resume (its status says so) and left the JobSet alone.
    await plane.until(
        lambda: (
            any(
                c["type"] == "Suspended" and c["status"] == "False"
                for c in (plane.trainjob("default", "held") or {})["status"]["conditions"]
            )
            or (plane.jobset("default", "held") or {})["spec"]["suspend"] is False
        ),
        what="the resume seen",
    )
    dying = plane.jobset("default", "held") or {}
    assert dying["metadata"]["uid"] == old["metadata"]["uid"]
    assert dying["spec"]["suspend"] is True
    await plane.kube.patch(r.JOBSETS, "default", "held", {"metadata": {"finalizers": None}})
    new = await plane.until(
        lambda: (
            (js := plane.jobset("default", "held"))
            and js["metadata"]["uid"] != old["metadata"]["uid"]
            and js["spec"]["suspend"] is False
            and js
        ),
        what="a new JobSet, resumed",
    )
    assert pod_spec(new)["nodeSelector"] == {"pool": "a"}
