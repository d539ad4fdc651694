"""The executor's JobSet and Job controllers against the embedded API server (pods are
finished by hand here: the kubelet has its own tests)."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import Plane, local_plane
from trainer.local.executor.api import executor_kube
from trainer.local.executor.runner import Executor

JS = "jobset.x-k8s.io/v1alpha2"


@pytest.fixture
async def env() -> AsyncIterator[tuple[Plane, Executor]]:
    async with local_plane(runtimes=False) as plane:
        with tempfile.TemporaryDirectory() as tmp:
            plane.server.write_kubeconfig(str(Path(tmp) / "kubeconfig"))
            kube = await executor_kube(str(Path(tmp) / "kubeconfig"))
            executor = Executor(
                kube,
                workdir=Path(tmp),
                state_dir=Path(tmp),
                kubelet=False,
            )
            await executor.start()
            try:
                yield plane, executor
            finally:
                await executor.stop()
                await kube.api.close()


def rjob(name: str, parallelism: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "template": {
                    "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}
                },
            }
        },
        **extra,
    }


async def create_jobset(plane: Plane, name: str, rjobs: list[dict[str, Any]], **spec: Any) -> None:
    await plane.kube.create(
        {
            "apiVersion": JS,
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicatedJobs": rjobs, **spec},
        }
    )


def pods_of(plane: Plane, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in plane.server.storage.objects("v1", "pods", "default")
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job
    ]


async def finish_pods(plane: Plane, job: str, phase: str = "Succeeded") -> None:
    from trainer.kube import resources as r  # noqa: PLC0415

    for pod in pods_of(plane, job):
        await plane.kube.patch_status(
            r.GVR("", "v1", "pods", True, "Pod"),
            "default",
            pod["metadata"]["name"],
            {"status": {"phase": phase}},
        )


def events_about(plane: Plane, kind: str, name: str) -> list[tuple[str, str, str, str]]:
    """(type, reason, message, source component) of the Events about one object, in order."""
    return [
        (e["type"], e["reason"], e["message"], e["source"]["component"])
        for e in plane.server.storage.objects("v1", "events", "default")
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


def jobset_status(plane: Plane, name: str) -> dict[str, Any]:
    return (plane.get(JS, "jobsets", "default", name) or {}).get("status") or {}


async def test_jobs_pods_labels_service_and_completion(env: tuple[Plane, Executor]) -> None:
    plane, _ = env
    await create_jobset(plane, "train", [rjob("node", parallelism=2)])
    job = await plane.until(
        lambda: plane.get("batch/v1", "jobs", "default", "train-node-0"), what="Job"
    )
    labels = job["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "train"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert len(labels["jobset.sigs.k8s.io/job-key"]) == 40
    pods = await plane.until(
        lambda: len(pods_of(plane, "train-node-0")) == 2 and pods_of(plane, "train-node-0"),
        what="pods",
    )
    hostnames = sorted(p["spec"]["hostname"] for p in pods)
    assert hostnames == ["train-node-0-0", "train-node-0-1"]
    assert all(p["spec"]["subdomain"] == "train" for p in pods)
    assert sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods
    ) == ["0", "1"]
    service = plane.get("v1", "services", "default", "train")
    assert service is not None and service["spec"]["clusterIP"] == "None"
    await finish_pods(plane, "train-node-0")
    status = await plane.until(
        lambda: (
            jobset_status(plane, "train").get("terminalState") and jobset_status(plane, "train")
        ),
        what="Completed",
    )
    assert status["terminalState"] == "Completed"
    done = next(c for c in status["conditions"] if c["type"] == "Completed")
    assert (done["reason"], done["message"]) == (
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    assert status["replicatedJobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}
    ]
    # kubectl describe tells the same story, as on a cluster.
    job_events = await plane.until(
        lambda: (
            len(events_about(plane, "Job", "train-node-0")) >= 3
            and events_about(plane, "Job", "train-node-0")
        ),
        what="Job events",
    )
    created = sorted(m for _, reason, m, _ in job_events if reason == "SuccessfulCreate")
    assert created == [
        f"Created pod: {p['metadata']['name']}"
        for p in sorted(pods, key=lambda p: p["metadata"]["name"])
    ]
    assert ("Normal", "Completed", "Job completed", "job-controller") in job_events
    jobset_events = await plane.until(
        lambda: events_about(plane, "JobSet", "train"), what="JobSet event"
    )
    assert jobset_events == [
        ("Normal", "AllJobsCompleted", "jobset completed successfully", "jobset-controller")
    ]


async def test_depends_on_waits_for_completion(env: tuple[Plane, Executor]) -> None:
    plane, _ = env
    await create_jobset(
        plane,
        "seq",
        [rjob("init"), rjob("node", dependsOn=[{"name": "init", "status": "Complete"}])],
    )
    await plane.until(lambda: pods_of(plane, "seq-init-0"), what="initializer pod")
    assert plane.get("batch/v1", "jobs", "default", "seq-node-0") is None
    await finish_pods(plane, "seq-init-0")
    await plane.until(
        lambda: plane.get("batch/v1", "jobs", "default", "seq-node-0"), what="node Job after init"
    )


async def test_failure_without_policy_fails_the_jobset(env: tuple[Plane, Executor]) -> None:
    plane, _ = env
    await create_jobset(plane, "bad", [rjob("node")])
    await plane.until(lambda: pods_of(plane, "bad-node-0"), what="pod")
    job = plane.get("batch/v1", "jobs", "default", "bad-node-0")
    assert job is not None
    from trainer.kube import resources as r  # noqa: PLC0415

    await plane.kube.patch(
        r.GVR("batch", "v1", "jobs", True, "Job"),
        "default",
        "bad-node-0",
        {"spec": {"backoffLimit": 0}},
    )
    await finish_pods(plane, "bad-node-0", "Failed")
    status = await plane.until(
        lambda: jobset_status(plane, "bad").get("terminalState") and jobset_status(plane, "bad"),
        what="Failed",
    )
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailedJobs"
    assert "first failed job: bad-node-0" in failed["message"]
    job_events = await plane.until(
        lambda: [e for e in events_about(plane, "Job", "bad-node-0") if e[0] == "Warning"],
        what="Job warning",
    )
    assert job_events == [
        (
            "Warning",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            "job-controller",
        )
    ]
    jobset_events = await plane.until(
        lambda: events_about(plane, "JobSet", "bad"), what="JobSet event"
    )
    assert [(t, r) for t, r, _, _ in jobset_events] == [("Warning", "FailedJobs")]


async def test_max_restarts_recreates_the_jobs(env: tuple[Plane, Executor]) -> None:
    plane, _ = env
    template = rjob("node")
    template["template"]["spec"]["backoffLimit"] = 0
    await create_jobset(plane, "retry", [template], failurePolicy={"maxRestarts": 1})
    await plane.until(lambda: pods_of(plane, "retry-node-0"), what="pod")
    await finish_pods(plane, "retry-node-0", "Failed")
    await plane.until(lambda: jobset_status(plane, "retry").get("restarts") == 1, what="restart")
    new_job = await plane.until(
        lambda: (
            (j := plane.get("batch/v1", "jobs", "default", "retry-node-0"))
            and j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
            and j
        ),
        what="recreated Job",
    )
    assert new_job is not None
    await plane.until(
        lambda: [
            p
            for p in pods_of(plane, "retry-node-0")
            if p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
        ],
        what="new pod",
    )
    await finish_pods(plane, "retry-node-0", "Failed")
    status = await plane.until(
        lambda: (
            jobset_status(plane, "retry").get("terminalState") and jobset_status(plane, "retry")
        ),
        what="Failed",
    )
    assert (
        next(c for c in status["conditions"] if c["type"] == "Failed")["reason"]
        == "ReachedMaxRestarts"
    )


async def test_suspend_and_resume(env: tuple[Plane, Executor]) -> None:
    plane, _ = env
    await create_jobset(plane, "held", [rjob("node")], suspend=True)
    job = await plane.until(
        lambda: plane.get("batch/v1", "jobs", "default", "held-node-0"), what="suspended Job"
    )
    assert job["spec"]["suspend"] is True
    status = await plane.until(
        lambda: jobset_status(plane, "held").get("conditions") and jobset_status(plane, "held"),
        what="Suspended",
    )
    assert status["conditions"][0]["reason"] == "SuspendedJobs"
    assert pods_of(plane, "held-node-0") == []
    from trainer.kube import resources as r  # noqa: PLC0415

    await plane.kube.patch(r.JOBSETS, "default", "held", {"spec": {"suspend": False}})
    await plane.until(lambda: pods_of(plane, "held-node-0"), what="pods after resume")
    status = await plane.until(
        lambda: (
            (
                c := next(
                    (
                        c
                        for c in jobset_status(plane, "held").get("conditions", [])
                        if c["type"] == "Suspended"
                    ),
                    None,
                )
            )
            and c["status"] == "False"
            and jobset_status(plane, "held")
        ),
        what="Resumed",
    )
    assert any(c["reason"] == "ResumeJobs" for c in status["conditions"])


async def test_jobset_webhook_rules_are_enforced(env: tuple[Plane, Executor]) -> None:
    from trainer.kube import resources as r  # noqa: PLC0415
    from trainer.kube.rest import APIError  # noqa: PLC0415

    long_name = "a" * 50  # a-...-node-0-0-abcde is longer than 63
    with pytest.raises(APIError) as err:
        await create_jobset(plane := env[0], long_name, [rjob("node")])
    assert err.value.status == 422
    assert 'admission webhook "vjobset.kb.io" denied the request' in err.value.message
    assert "pod names generated for this JobSet will exceed 63 characters" in err.value.message
    await create_jobset(plane, "frozen", [rjob("node")], suspend=True)
    # While suspended, nodeSelector may change; the image may not. Each patch edits the
    # replicated jobs as stored (with JobSet's defaults), as a client that read them would.
    stored = plane.get(JS, "jobsets", "default", "frozen")
    assert stored is not None
    patch_ok = {"spec": {"replicatedJobs": copy.deepcopy(stored["spec"]["replicatedJobs"])}}
    patch_ok["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "nodeSelector"
    ] = {"pool": "a"}
    await plane.kube.patch(r.JOBSETS, "default", "frozen", patch_ok)
    patch_bad = copy.deepcopy(patch_ok)
    patch_bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] = "other"
    with pytest.raises(APIError) as immutable:
        await plane.kube.patch(r.JOBSETS, "default", "frozen", patch_bad)
    assert immutable.value.status == 422  # JobSet answers NewInvalid on update
    assert "field is immutable" in immutable.value.message


def job_status(plane: Plane, name: str) -> dict[str, Any]:
    return (plane.get("batch/v1", "jobs", "default", name) or {}).get("status") or {}


async def test_backoff_limit_with_on_failure_counts_the_deleted_pods_as_failed(
    env: tuple[Plane, Executor],
) -> None:
    """restartPolicy OnFailure: the kubelet restarts containers in place; once their restarts
    reach backoffLimit the Job controller deletes the pods and counts them as failed, and that
    count stays once they are gone (``kubectl get job`` must not say 0 failed)."""
    from trainer.kube import resources as r  # noqa: PLC0415

    plane, _ = env
    template = rjob("node")
    template["template"]["spec"]["backoffLimit"] = 2
    template["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    await create_jobset(plane, "crash", [template])
    pods = await plane.until(lambda: pods_of(plane, "crash-node-0"), what="pod")
    name = pods[0]["metadata"]["name"]
    restarted = {"containerStatuses": [{"name": "c", "restartCount": 1, "ready": False}]}
    await plane.kube.patch_status(
        r.PODS, "default", name, {"status": {"phase": "Running", **restarted}}
    )
    assert job_status(plane, "crash-node-0").get("failed", 0) == 0  # one restart: below 2
    restarted["containerStatuses"][0]["restartCount"] = 2
    await plane.kube.patch_status(r.PODS, "default", name, {"status": restarted})
    status = await plane.until(
        lambda: (s := job_status(plane, "crash-node-0")).get("conditions") and s, what="Failed"
    )
    assert [(c["type"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    ]
    assert (status["failed"], status["active"], status["succeeded"]) == (1, 0, 0)
    await plane.until(lambda: not pods_of(plane, "crash-node-0"), what="the pod deleted")
    await plane.until(lambda: jobset_status(plane, "crash").get("terminalState"), what="JobSet")
    assert job_status(plane, "crash-node-0")["failed"] == 1


async def test_backoff_limit_with_never_counts_each_failed_pod(
    env: tuple[Plane, Executor],
) -> None:
    plane, _ = env
    template = rjob("node")
    template["template"]["spec"]["backoffLimit"] = 1
    await create_jobset(plane, "never", [template])
    from trainer.kube import resources as r  # noqa: PLC0415

    for attempt in (1, 2):

        def created(n: int = attempt) -> bool:
            return len(pods_of(plane, "never-node-0")) == n

        await plane.until(created, what=f"pod {attempt}")
        for pod in pods_of(plane, "never-node-0"):
            if (pod.get("status") or {}).get("phase") != "Failed":
                await plane.kube.patch_status(
                    r.PODS, "default", pod["metadata"]["name"], {"status": {"phase": "Failed"}}
                )
    status = await plane.until(
        lambda: (s := job_status(plane, "never-node-0")).get("conditions") and s, what="Failed"
    )
    assert status["conditions"][0]["reason"] == "BackoffLimitExceeded"
    assert (status["failed"], status["active"]) == (2, 0)
    assert len(pods_of(plane, "never-node-0")) == 2  # failed pods are kept, as on a cluster
