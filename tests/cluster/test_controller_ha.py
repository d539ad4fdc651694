"""The controller killed mid-run on real Kubernetes: nothing lost, nothing created twice
(docs/high-availability.md, docs/testbed.md). Two replicas with leader election, the leader
killed, are the controller Deployment's own pods on the bed's node agent
(tests/cluster/test_node_agent.py), which uses these helpers."""

from __future__ import annotations

import os
import signal
from typing import Any

import trainer_install
from addons import route_service
from procs import wait_for

from tests.cluster.conftest import kubectl_json
from tests.cluster.kwokpods import dump, pod_annotations, trainjob
from tests.cluster.test_lifecycle import wait

LEASE = "trainer.kubeflow.org"


def create_many(bed: Any, namespace: str, prefix: str, count: int, run_for: str) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    annotations = pod_annotations(run_for=run_for)
    text = "\n---\n".join(dump(trainjob(n, num_nodes=1, annotations=annotations)) for n in names)
    bed.kubectl("create", "-n", namespace, "-f", "-", input=text)
    return names


def jobset_uids(bed: Any, namespace: str, names: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}

    def all_there() -> bool:
        items = kubectl_json(bed, "get", "jobsets", "-n", namespace)["items"]
        found.clear()
        found.update({j["metadata"]["name"]: j["metadata"]["uid"] for j in items})
        return set(names) <= set(found)

    wait_for(f"JobSets of {names}", all_there, 60, interval=0.3)
    return found


def kill(bed: Any, name: str, graceful: bool = False) -> None:
    """SIGKILL, as a node or the OOM killer ends a pod (SIGTERM with ``graceful``, as a
    kubelet stops a pod), and its endpoint taken out."""
    proc = bed.procs.pop(name)
    if graceful:
        proc.stop()
    else:
        os.killpg(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait()
    route_service(
        bed, trainer_install.NAMESPACE, trainer_install.SERVICE, proc.ports["webhook"],
        "webhook", replica=name, ready=False,
    )  # fmt: skip


def assert_once_each(bed: Any, namespace: str, names: list[str]) -> None:
    """Each TrainJob Complete, with one JobSet and one runtime snapshot: nothing twice."""
    for name in names:
        wait(bed, namespace, f"trainjob/{name}", "condition=Complete", 90)
    jobsets = kubectl_json(bed, "get", "jobsets", "-n", namespace)["items"]
    assert sorted(j["metadata"]["name"] for j in jobsets) == sorted(names)
    snapshots = [
        c["metadata"]["name"]
        for c in kubectl_json(bed, "get", "configmaps", "-n", namespace)["items"]
        if c["metadata"]["name"].endswith("-runtime-snapshot")
    ]
    assert sorted(snapshots) == sorted(f"{n}-runtime-snapshot" for n in names)


def holder(bed: Any) -> str:
    lease = kubectl_json(bed, "get", "lease", LEASE, "-n", trainer_install.NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "")


def test_controller_killed_mid_run_loses_and_duplicates_nothing(bed: Any, namespace: str) -> None:
    # The replica leads with a 5 s Lease (with_short_lease), not the install's 15 s: the
    # restarted one below waits out the Lease the killed one last wrote (its duration is
    # the record's, as client-go reads it). Stopped gracefully, the old one released it.
    objects = trainer_install.manifests()
    short = trainer_install.with_short_lease(objects)
    kill(bed, "trainer", graceful=True)
    trainer_install.start_controller(bed, short, "trainer")
    try:
        names = create_many(bed, namespace, "crash", 4, run_for="4s")
        before = jobset_uids(bed, namespace, names)
        kill(bed, "trainer")
        # While it is down the pods finish and JobSet completes; the new process must see it.
        trainer_install.start_controller(bed, short, "trainer")
        assert_once_each(bed, namespace, names)
        assert jobset_uids(bed, namespace, names) == before, "a JobSet was created again"
    finally:
        # The install's own Lease again for the tests after this one.
        if "trainer" in bed.procs:
            kill(bed, "trainer", graceful=True)
        trainer_install.start_controller(bed, objects, "trainer")
