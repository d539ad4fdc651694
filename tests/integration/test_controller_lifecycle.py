"""The controller's lifecycle clocks against the embedded API server (docs/lifecycle.md):
``status.startTime`` / ``completionTime``, ``ttlSecondsAfterFinished`` from the TrainJob or its
runtime's ``runPolicy`` (also the active deadline), deletion at expiry (0: at once), a new
controller that finds what expired while none ran, and a finished TrainJob whose JobSet is
deleted never getting a new one. The controller's clock is the test's; the JobSet's status is
written the way JobSet writes it."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders import trainjob
from tests.integration.harness import Plane, local_plane, report_jobset_status
from tests.integration.test_controller import KEYS, Clock
from trainer.controller.manager import Controller
from trainer.kube import resources as r
from trainer.machinery.times import format_time, parse_time


class Env:
    def __init__(self, plane: Plane, clock: Clock) -> None:
        self.plane = plane
        self.clock = clock
        self.deleted_late: list[float] = []
        self.controller: Controller | None = None

    async def start_controller(self) -> Controller:
        controller = Controller(
            self.plane.kube,
            ssh_keygen=lambda: KEYS,
            now=self.clock,
            on_ttl_deletion=self.deleted_late.append,
        )
        await controller.start_caches()
        controller.start_workers()
        self.controller = controller
        return controller

    async def stop_controller(self) -> None:
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with local_plane() as plane:
        e = Env(plane, Clock())
        await e.start_controller()
        try:
            yield e
        finally:
            await e.stop_controller()


def status_of(obj: dict[str, Any] | None) -> dict[str, Any]:
    return dict((obj or {}).get("status") or {})


async def complete(env: Env, name: str, at: dt.datetime) -> dict[str, Any]:
    """JobSet ``name`` completes at ``at``; returns the TrainJob once it reads Complete."""
    plane = env.plane
    await plane.until(lambda: plane.jobset("default", name), what=f"JobSet {name}")
    cond = {
        "type": "Completed",
        "status": "True",
        "reason": "AllJobsCompleted",
        "message": "jobset completed successfully",
        "lastTransitionTime": format_time(at),
    }
    await plane.kube.patch_status(r.JOBSETS, "default", name, {"status": {"conditions": [cond]}})
    done: dict[str, Any] = await plane.until(
        lambda: (
            status_of(plane.trainjob("default", name)).get("state") == "Complete"
            and plane.trainjob("default", name)
        ),
        what=f"{name} Complete",
    )
    return done


async def idle(env: Env, timeout: float = 10.0) -> None:
    """Until the controller's queue is empty and no reconcile runs. The queue signals no such
    moment and a reconcile that changes nothing writes nothing (so ``plane.until``, woken by
    writes, would sit out its timeout): poll it, bounded."""
    controller = env.controller
    assert controller is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while controller.queue.processing or len(controller.queue):
        if loop.time() > deadline:
            raise TimeoutError("the controller's queue did not drain")
        await asyncio.sleep(0.02)


async def test_start_and_completion_times_and_deletion_after_the_ttl(env: Env) -> None:
    plane, clock = env.plane, env.clock
    created = await plane.kube.create(trainjob("ttl", ttlSecondsAfterFinished=60))
    await report_jobset_status(plane, "default", "ttl")  # the first status write comes with it
    job = await plane.until(
        lambda: (
            status_of(plane.trainjob("default", "ttl")).get("startTime")
            and plane.trainjob("default", "ttl")
        ),
        what="startTime",
    )
    assert status_of(job)["startTime"] == created["metadata"]["creationTimestamp"]
    assert "completionTime" not in status_of(job)

    finished_at = clock.now + dt.timedelta(seconds=5)
    clock.now = finished_at
    job = await complete(env, "ttl", finished_at)
    completion = parse_time(status_of(job)["completionTime"])
    assert completion is not None and abs((completion - finished_at).total_seconds()) <= 1

    clock.now = completion + dt.timedelta(seconds=59)
    assert env.controller is not None
    env.controller.queue.add("default/ttl")
    await idle(env)
    assert plane.trainjob("default", "ttl") is not None  # a second before expiry: kept

    clock.now = completion + dt.timedelta(seconds=61)
    env.controller.queue.add("default/ttl")
    await plane.until(lambda: plane.trainjob("default", "ttl") is None, what="TTL deletion")
    await plane.until(lambda: plane.jobset("default", "ttl") is None, what="JobSet cascaded")
    assert len(env.deleted_late) == 1 and 0 <= env.deleted_late[0] <= 2


async def test_a_ttl_of_zero_deletes_the_trainjob_as_soon_as_it_finishes(env: Env) -> None:
    plane = env.plane
    await plane.kube.create(trainjob("gone", ttlSecondsAfterFinished=0))
    await plane.until(lambda: plane.jobset("default", "gone"), what="JobSet")
    cond = {
        "type": "Failed",
        "status": "True",
        "reason": "FailedJobs",
        "message": "jobset failed due to one or more job failures (first failed job: gone-node-0)",
        "lastTransitionTime": format_time(env.clock.now),
    }
    await plane.kube.patch_status(r.JOBSETS, "default", "gone", {"status": {"conditions": [cond]}})
    await plane.until(lambda: plane.trainjob("default", "gone") is None, what="deleted at once")
    assert env.deleted_late == [0.0]


async def with_run_policy(plane: Plane, name: str, policy: dict[str, Any]) -> None:
    """A ClusterTrainingRuntime ``name``: the built-in torch-distributed with ``runPolicy``."""
    base = plane.get(
        "trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes", "", "torch-distributed"
    )
    assert base is not None
    runtime = {
        "apiVersion": base["apiVersion"],
        "kind": base["kind"],
        "metadata": {"name": name},
        "spec": {**copy.deepcopy(base["spec"]), "runPolicy": policy},
    }
    await plane.kube.create(runtime)


async def test_the_runtimes_run_policy_is_the_default_and_the_trainjob_overrides_it(
    env: Env,
) -> None:
    plane, clock = env.plane, env.clock
    await with_run_policy(plane, "torch-ttl", {"ttlSecondsAfterFinished": 30})
    await plane.kube.create(trainjob("defaulted", runtime="torch-ttl"))
    await plane.kube.create(trainjob("own", runtime="torch-ttl", ttlSecondsAfterFinished=300))
    finished = clock.now
    await complete(env, "defaulted", finished)
    await complete(env, "own", finished)

    clock.now = finished + dt.timedelta(seconds=31)
    assert env.controller is not None
    env.controller.queue.add("default/defaulted")
    env.controller.queue.add("default/own")
    await plane.until(lambda: plane.trainjob("default", "defaulted") is None, what="runtime TTL")
    await idle(env)
    assert plane.trainjob("default", "own") is not None  # its own 300 s win over the runtime's

    # The TTL is mutable: lowering it deletes the TrainJob at the next reconcile.
    await plane.kube.patch(r.TRAINJOBS, "default", "own", {"spec": {"ttlSecondsAfterFinished": 5}})
    await plane.until(lambda: plane.trainjob("default", "own") is None, what="lowered TTL")


async def test_the_runtimes_default_deadline_fails_a_trainjob_without_its_own(env: Env) -> None:
    plane, clock = env.plane, env.clock
    await with_run_policy(plane, "torch-deadline", {"activeDeadlineSeconds": 30})
    await plane.kube.create(trainjob("slow", runtime="torch-deadline"))
    await plane.until(lambda: plane.jobset("default", "slow"), what="JobSet")
    clock.now += dt.timedelta(seconds=31)
    assert env.controller is not None
    env.controller.queue.add("default/slow")
    job = await plane.until(
        lambda: (
            status_of(plane.trainjob("default", "slow")).get("state") == "Failed"
            and plane.trainjob("default", "slow")
        ),
        what="deadline",
    )
    failed = next(x for x in status_of(job)["conditions"] if x["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == (
        "DeadlineExceeded",
        "TrainJob exceeded its active deadline",
    )
    assert status_of(job)["completionTime"] == failed["lastTransitionTime"]
    await plane.until(lambda: plane.jobset("default", "slow") is None, what="JobSet deleted")


async def test_a_controller_started_after_expiry_deletes_at_once_and_one_before_waits(
    env: Env,
) -> None:
    plane, clock = env.plane, env.clock
    await plane.kube.create(trainjob("expired", ttlSecondsAfterFinished=60))
    await plane.kube.create(trainjob("pending", ttlSecondsAfterFinished=600))
    finished = clock.now
    await complete(env, "expired", finished)
    await complete(env, "pending", finished)
    await idle(env)
    await env.stop_controller()

    clock.now = finished + dt.timedelta(seconds=120)  # while no controller ran
    await env.start_controller()
    await plane.until(lambda: plane.trainjob("default", "expired") is None, what="expired")
    await idle(env)
    assert plane.trainjob("default", "pending") is not None
    assert len(env.deleted_late) == 1 and 59 <= env.deleted_late[0] <= 62


async def test_a_complete_trainjob_never_recreates_its_deleted_jobset(env: Env) -> None:
    """Upstream re-created a JobSet that JobSet's own TTL had deleted (kubeflow/trainer#3779,
    fixed upstream for Failed only)."""
    plane = env.plane
    await plane.kube.create(trainjob("done"))
    await complete(env, "done", env.clock.now)
    await plane.kube.delete(r.JOBSETS, "default", "done", propagation="Foreground")
    await plane.until(lambda: plane.jobset("default", "done") is None, what="JobSet deleted")
    assert env.controller is not None
    env.controller.queue.add("default/done")
    await idle(env)
    assert plane.jobset("default", "done") is None
    job = plane.trainjob("default", "done")
    assert status_of(job)["state"] == "Complete"
