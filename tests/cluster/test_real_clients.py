"""The real programs against the local plane (docs/local-plane.md, "Running the real programs
against the plane"): ``trainer up`` with its JobSet controller, Job controller, scheduler and
kubelet switched off; JobSet v0.12.0's controller and webhooks, kube-controller-manager's Job
and garbage-collector controllers, kube-scheduler and KWOK started against its kubeconfig; a
TrainJob of the built-in torch-distributed runtime runs on two KWOK nodes with GPUs to
Complete. Needs only the bed's programs (not the bed itself): skipped, saying why, without
them."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import realclients
from procs import wait_for

from tests.cluster.kwokpods import dump, pod_annotations, trainjob


@pytest.fixture(scope="module")
def plane() -> Iterator[realclients.Plane]:
    reason = realclients.missing_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="trainer-realclients-"))
    running = realclients.start_plane(root, say=lambda line: print(f"realclients: {line}"))
    try:
        realclients.add_nodes(running, 2, 8)
        yield running
    finally:
        # What each program failed on first, if anything (docs/local-plane.md, "Running the
        # real programs against the plane"), read before they stop and log their shutdown.
        for name in ("kube-scheduler", "kube-controller-manager", "jobset", "kwok"):
            errors = "\n".join(running.errors(name)[:5]) if name in running.procs else ""
            print(f"--- {name}: first errors of {root}/logs/{name}.log\n{errors or '(none)'}")
        running.stop()
        if not os.environ.get("TRAINER_TESTBED_KEEP"):  # as the bed's folder (docs/testbed.md)
            shutil.rmtree(root, ignore_errors=True)


def get(plane: realclients.Plane, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(plane.kubectl("get", *args, "-o", "json").stdout)
    return data


def wait(plane: realclients.Plane, what: str, condition: str, timeout: int = 60) -> None:
    """kubectl wait: a watch on the local API server, no polling of ours."""
    done = plane.kubectl(
        "wait", what, f"--for={condition}", f"--timeout={timeout}s", check=False,
        timeout=timeout + 10,
    )  # fmt: skip
    if done.returncode != 0:
        state = plane.kubectl("get", what, "-o", "yaml", check=False).stdout
        raise AssertionError(f"{what}: {condition} not reached: {done.stderr}\n{state[-3000:]}")


def test_a_trainjob_completes_through_the_real_programs(plane: realclients.Plane) -> None:
    job = trainjob("real", annotations=pod_annotations(run_for="2s"))
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": "2"}}
    plane.kubectl("create", "-n", "default", "-f", "-", input=dump(job))
    wait(plane, "trainjob/real", "condition=Complete")

    pods = get(plane, "pods", "-n", "default", "-l", "jobset.sigs.k8s.io/jobset-name=real")
    assert len(pods["items"]) == 2
    for pod in pods["items"]:
        # bound by kube-scheduler to a KWOK node, run to Succeeded by KWOK
        assert pod["spec"]["nodeName"].startswith("kwok-node-")
        assert pod["status"]["phase"] == "Succeeded"
        # created by kube-controller-manager's Job controller (its tracking finalizer, gone
        # once it counted the pod)
        assert "batch.kubernetes.io/job-tracking" not in pod["metadata"].get("finalizers", [])
    jobset = get(plane, "jobset", "real", "-n", "default")
    assert any(
        c["type"] == "Completed" and c["status"] == "True" for c in jobset["status"]["conditions"]
    )
    events = get(plane, "events.v1.events.k8s.io", "-n", "default")["items"]
    reporters = {e.get("reportingController") for e in events}
    assert "default-scheduler" in reporters
    for name in ("kube-scheduler", "kube-controller-manager", "jobset", "kwok"):
        assert plane.procs[name].alive(), f"{name} exited"


def test_the_garbage_collector_deletes_what_a_deleted_trainjob_owned(
    plane: realclients.Plane,
) -> None:
    # kube-controller-manager's garbage collector lists and watches every resource discovery
    # names, metadata only; it says when its graph is synced
    kcm = plane.procs["kube-controller-manager"]
    wait_for(
        "its garbage collector synced (its log)",
        lambda: "synced garbage collector" in kcm.log.read_text(errors="replace"),
        60, kcm, 0.2,
    )  # fmt: skip
    job = trainjob("gone", annotations=pod_annotations(run_for="600s"))
    plane.kubectl("create", "-n", "default", "-f", "-", input=dump(job))
    wait(plane, "jobset/gone", "jsonpath={.status.replicatedJobsStatus[0].active}=1")
    plane.kubectl("delete", "trainjob", "gone", "-n", "default", "--wait=false")
    wait(plane, "jobset/gone", "delete")
    selector = "jobset.sigs.k8s.io/jobset-name=gone"
    plane.kubectl(
        "wait", "pods", "-n", "default", "-l", selector, "--for=delete", "--timeout=60s",
        timeout=70,
    )  # fmt: skip
    # its watches (metadata only) saw the owners go and it took up their dependents; the local
    # API server's own collector, part of the server, may delete some first (the Job, once in
    # CI), so any of the deleted TrainJob's dependents taken up is the evidence
    taken = [
        'Processing item" item="[jobset.x-k8s.io/v1alpha2/JobSet, namespace: default, name: gone,',
        'Processing item" item="[batch/v1/Job, namespace: default, name: gone-node-0',
        'Processing item" item="[v1/Pod, namespace: default, name: gone-node-0-',
    ]
    wait_for(
        "its garbage collector took up a dependent of the deleted TrainJob (its log)",
        lambda: any(line in kcm.log.read_text(errors="replace") for line in taken),
        30, kcm, 0.2,
    )  # fmt: skip
