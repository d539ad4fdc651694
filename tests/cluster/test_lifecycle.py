"""A TrainJob's life on real Kubernetes: the real scheduler binds its pods to KWOK nodes, the
real Job and JobSet controllers run them, and our controller mirrors what they say
(docs/testbed.md, "What the cluster tier checks")."""

from __future__ import annotations

import json
from typing import Any

from procs import wait_for

from tests.cluster.conftest import kubectl_json
from tests.cluster.kwokpods import dump, fail_fast_runtime, pod_annotations, trainjob


def create(bed: Any, namespace: str, obj: dict[str, Any]) -> None:
    bed.kubectl("create", "-n", namespace, "-f", "-", input=dump(obj))


def wait(bed: Any, namespace: str, what: str, condition: str, timeout: int = 60) -> None:
    """kubectl wait: a watch on the API server, no polling of ours."""
    done = bed.kubectl(
        "wait", "-n", namespace, *what.split(), f"--for={condition}", f"--timeout={timeout}s",
        check=False, timeout=timeout + 10,
    )  # fmt: skip
    if done.returncode != 0:
        state = bed.kubectl("get", "-n", namespace, *what.split(), "-o", "yaml", check=False).stdout
        raise AssertionError(f"{what}: {condition} not reached: {done.stderr}\n{state[-3000:]}")


def wait_pods(bed: Any, namespace: str, count: int, phase: str, timeout: float = 60) -> list[Any]:
    """Until ``count`` pods of the namespace are in ``phase`` (a list per poll: pods have no
    name to wait for before they exist)."""
    found: list[Any] = []

    def reached() -> bool:
        found[:] = kubectl_json(bed, "get", "pods", "-n", namespace)["items"]
        return bool(sum(p.get("status", {}).get("phase") == phase for p in found) == count)

    wait_for(f"{count} pods {phase} in {namespace}", reached, timeout, interval=0.3)
    return found


def condition(bed: Any, namespace: str, name: str, kind: str) -> dict[str, Any]:
    status = kubectl_json(bed, "get", "trainjob", name, "-n", namespace).get("status", {})
    found: dict[str, Any] = next(c for c in status.get("conditions", []) if c["type"] == kind)
    return found


def test_trainjob_runs_on_kwok_nodes_to_complete(bed: Any, namespace: str) -> None:
    create(bed, namespace, trainjob("done", annotations=pod_annotations(run_for="3s")))
    pods = wait_pods(bed, namespace, 2, "Running")
    assert all(p["spec"]["nodeName"].startswith("kwok-node-") for p in pods)
    wait(bed, namespace, "trainjob/done", "condition=Complete", 60)
    trainjob_ = kubectl_json(bed, "get", "trainjob", "done", "-n", namespace)
    assert trainjob_["status"].get("completionTime")
    jobset = kubectl_json(bed, "get", "jobset", "done", "-n", namespace)
    assert any(
        c["type"] == "Completed" and c["status"] == "True" for c in jobset["status"]["conditions"]
    )


def test_a_failing_pod_fails_the_trainjob_with_its_cause(bed: Any, namespace: str) -> None:
    annotations = pod_annotations(run_for="1s", exit_code=3, message="shard 7 is corrupt\n")
    create(bed, namespace, fail_fast_runtime())
    bad = trainjob(
        "bad", "fail-fast", num_nodes=1, annotations=annotations, runtime_kind="TrainingRuntime"
    )
    create(bed, namespace, bad)
    wait(bed, namespace, "trainjob/bad", "condition=Failed", 90)
    failed = condition(bed, namespace, "bad", "Failed")
    message = failed["message"]
    assert "exited with code 3 (Error)" in message, message
    assert "container node" in message and "pod bad-node-0-0-" in message, message
    assert "shard 7 is corrupt" in message, message


def test_suspended_trainjob_runs_once_resumed(bed: Any, namespace: str) -> None:
    create(
        bed, namespace, trainjob("later", suspend=True, annotations=pod_annotations(run_for="1s"))
    )
    wait(bed, namespace, "trainjob/later", "condition=Suspended", 30)
    wait(bed, namespace, "jobset/later", "jsonpath={.spec.suspend}=true", 30)
    assert kubectl_json(bed, "get", "pods", "-n", namespace)["items"] == []
    bed.kubectl(
        "patch", "trainjob", "later", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"suspend": False}}),
    )  # fmt: skip
    wait(bed, namespace, "trainjob/later", "condition=Complete", 60)


def test_active_deadline_fails_a_running_trainjob(bed: Any, namespace: str) -> None:
    slow = pod_annotations(run_for="10m")
    create(bed, namespace, trainjob("slow", num_nodes=1, annotations=slow, activeDeadlineSeconds=3))
    wait(bed, namespace, "trainjob/slow", "condition=Failed", 60)
    assert condition(bed, namespace, "slow", "Failed")["reason"] == "DeadlineExceeded"


def test_ttl_after_finished_deletes_everything_through_the_garbage_collector(
    bed: Any, namespace: str
) -> None:
    quick = pod_annotations(run_for="1s")
    create(
        bed, namespace, trainjob("brief", num_nodes=1, annotations=quick, ttlSecondsAfterFinished=1)
    )
    wait(bed, namespace, "trainjob/brief", "condition=Complete", 60)
    wait(bed, namespace, "trainjob/brief", "delete", 60)
    wait(bed, namespace, "jobset/brief", "delete", 60)
    label = "jobset.sigs.k8s.io/jobset-name=brief"
    assert kubectl_json(bed, "get", "jobs,pods", "-n", namespace, "-l", label)["items"] == []


def test_deleting_a_trainjob_deletes_what_it_owns(bed: Any, namespace: str) -> None:
    """An MPI TrainJob owns a JobSet (Jobs, pods), an SSH Secret and a hostfile ConfigMap."""
    mpi = trainjob(
        "owner", runtime="deepspeed-distributed", replicated_jobs=("node", "launcher"),
        annotations=pod_annotations(run_for="10m"),
    )  # fmt: skip
    create(bed, namespace, mpi)
    wait_pods(bed, namespace, 2, "Running")
    owned = kubectl_json(bed, "get", "secrets,configmaps", "-n", namespace)["items"]
    owned_names = {
        (o["kind"], o["metadata"]["name"])
        for o in owned
        if any(r["kind"] == "TrainJob" for r in o["metadata"].get("ownerReferences", []))
    }
    assert ("Secret", "owner-mpi-ssh-auth") in owned_names, owned_names
    assert ("ConfigMap", "owner-mpi-hostfile") in owned_names, owned_names
    before = kubectl_json(bed, "get", "jobs,pods,secrets,configmaps", "-n", namespace)["items"]
    ours = [
        f"{o['kind'].lower()}/{o['metadata']['name']}"
        for o in before
        if o["metadata"]["name"].startswith("owner")
    ]
    assert len(ours) >= 7, ours  # 2 Jobs, 2 pods, the Secret, the hostfile, the snapshot
    bed.kubectl("delete", "trainjob", "owner", "-n", namespace, "--wait=true", "--timeout=60s")
    # kube-controller-manager's garbage collector deletes the rest in the background.
    wait(bed, namespace, " ".join(ours), "delete", 60)
