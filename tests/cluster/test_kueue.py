"""Kueue v0.17.0 queueing TrainJobs on real Kubernetes (docs/kueue.md, "Verified on the real
Kueue"): a ClusterQueue with GPU quota admits what fits, the rest waits suspended and is
admitted in creation order as quota frees; a higher WorkloadPriorityClass preempts a lower one,
which is suspended and admitted again later; the JobSet our controller writes for an admitted
TrainJob is what `trainer render` makes of the TrainJob as Kueue left it.

Kueue runs as its Deployment would (hack/testbed/addons.py), started after our CRDs. Each test
has a ClusterQueue of its own (selecting only its namespace), so no test sees another's quota.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import addons
import pytest
import yaml
from procs import wait_for

from tests.cluster.conftest import ROOT, kubectl_json, render
from tests.cluster.kwokpods import dump, pod_annotations, trainjob
from tests.cluster.test_examples import missing
from tests.cluster.test_lifecycle import create, wait

FLAVOR = "kwok-gpu"
# The flavor's placement, which Kueue writes into the TrainJob on admission: the KWOK nodes'
# label and a toleration (the nodes have no taint; the toleration only has to reach the pods).
NODE_LABELS = {"type": "kwok"}
TOLERATION = {"key": "example.com/gpu-pool", "operator": "Exists", "effect": "NoSchedule"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_MANAGER = "kueue.x-k8s.io/manager"


@pytest.fixture(scope="module")
def kueue(bed: Any) -> Iterator[None]:
    """Kueue on the shared bed for this module, then removed so later modules see the bed as
    it was (its webhooks would otherwise be called for every TrainJob)."""
    addons.install_kueue(bed)
    try:
        # Discovery through kube-apiserver, the aggregated visibility API included: kubectl
        # says "unable to retrieve the complete list of server APIs" (and exits 1) otherwise.
        found = bed.kubectl("api-resources", check=False)
        assert found.returncode == 0 and not found.stderr, found.stderr
        assert "clusterqueues" in found.stdout and "trainjobs" in found.stdout
        bed.apply(
            [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ResourceFlavor",
                    "metadata": {"name": FLAVOR},
                    "spec": {"nodeLabels": NODE_LABELS, "tolerations": [TOLERATION]},
                },
                *(
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "WorkloadPriorityClass",
                        "metadata": {"name": name},
                        "value": value,
                    }
                    for name, value in (("low", 100), ("high", 1000))
                ),
            ]
        )
        yield
    finally:
        addons.remove_kueue(bed)


def make_queue(bed: Any, namespace: str, gpus: int) -> None:
    """A ClusterQueue named like the namespace, selecting only it, with ``gpus`` GPUs (and
    ample CPU and memory) on the KWOK flavor, preempting lower priorities within itself; and
    its LocalQueue ``user-queue``."""
    bed.apply(
        [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": namespace},
                "spec": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": FLAVOR,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "64"},
                                        {"name": "memory", "nominalQuota": "256Gi"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "user-queue", "namespace": namespace},
                "spec": {"clusterQueue": namespace},
            },
        ]
    )
    wait(bed, namespace, "localqueue/user-queue", "condition=Active", 30)


@pytest.fixture
def queued(bed: Any, kueue: None, namespace: str) -> Iterator[str]:
    """The test's namespace; afterwards its TrainJobs are deleted while Kueue still runs (it
    holds a finalizer on each Workload) and its ClusterQueue goes."""
    yield namespace
    bed.kubectl("delete", "trainjobs", "--all", "-n", namespace, "--timeout=60s", check=False)
    bed.kubectl("delete", "clusterqueue", namespace, "--wait=false", check=False)


def gpu_job(name: str, run_for: str, priority: str | None = None, **spec: Any) -> dict[str, Any]:
    """A queued TrainJob of 2 nodes x 4 GPUs (8 GPUs, a CPU and 1Gi per node) whose pods KWOK
    completes after ``run_for``."""
    job = trainjob(name, num_nodes=2, annotations=pod_annotations(run_for=run_for), **spec)
    job["metadata"]["labels"] = {QUEUE_LABEL: "user-queue"}
    if priority:
        job["metadata"]["labels"][PRIORITY_LABEL] = priority
    job["spec"]["trainer"]["resourcesPerNode"] = {
        "requests": {"nvidia.com/gpu": "4", "cpu": "1", "memory": "1Gi"},
        "limits": {"nvidia.com/gpu": "4"},
    }
    return job


def after_second(bed: Any, namespace: str, what: str) -> None:
    """Until the API server's clock is past the second ``what`` was created in (read from the
    creation time of a dry-run object: the server's clock, not ours)."""
    created = kubectl_json(bed, "get", what, "-n", namespace)["metadata"]["creationTimestamp"]

    def later() -> bool:
        now = bed.kubectl(
            "create", "configmap", "clock", "-n", namespace, "--dry-run=server",
            "-o", "jsonpath={.metadata.creationTimestamp}",
        ).stdout  # fmt: skip
        return bool(now > created)  # RFC 3339 in UTC: the text sorts as the time

    wait_for(f"the API server's clock past {created}", later, 5, interval=0.1)


def workload(bed: Any, namespace: str, name: str) -> str:
    """The name of the Workload Kueue made for TrainJob ``name`` (polled: a Workload's name
    has a hash in it, and there is nothing to wait on before it exists)."""
    uid = kubectl_json(bed, "get", "trainjob", name, "-n", namespace)["metadata"]["uid"]
    found: list[str] = []

    def made() -> bool:
        items = kubectl_json(
            bed, "get", "workloads", "-n", namespace, "-l", f"kueue.x-k8s.io/job-uid={uid}"
        )["items"]
        found[:] = [w["metadata"]["name"] for w in items]
        return bool(found)

    wait_for(f"the Workload of TrainJob {namespace}/{name}", made, 30, interval=0.3)
    assert len(found) == 1, found
    return f"workload/{found[0]}"


def running_pods(bed: Any, namespace: str, count: int) -> list[dict[str, Any]]:
    """Once exactly ``count`` pods of the namespace run, those pods (polled: pods have no name
    to wait for before they exist). A pod being deleted is not counted: its phase stays
    Running until KWOK deletes it."""
    found: list[dict[str, Any]] = []

    def reached() -> bool:
        pods = kubectl_json(bed, "get", "pods", "-n", namespace)["items"]
        found[:] = [
            p
            for p in pods
            if p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        return len(found) == count

    wait_for(f"{count} pods running in {namespace}", reached, 60, interval=0.3)
    return found


def quick_stop_runtime(tmp: Path) -> tuple[dict[str, Any], Path]:
    """The installed torch-distributed runtime as a TrainingRuntime whose pods have a grace
    period of 1 s. KWOK deletes a pod being deleted at a random time before its
    deletionTimestamp (its pod-delete stage), which the default 30 s would make up to 30 s; a
    preempted TrainJob's JobSet is recreated only once its pods are gone. Returns it and its
    file (for `trainer render`)."""
    runtime: dict[str, Any] = yaml.safe_load(
        (ROOT / "manifests/base/runtimes/torch-distributed.yaml").read_text()
    )
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "quick-stop"}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        job["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    path = tmp / "quick-stop.yaml"
    path.write_text(dump(runtime))
    return runtime, path


def trainjob_of(bed: Any, namespace: str, name: str) -> dict[str, Any]:
    return kubectl_json(bed, "get", "trainjob", name, "-n", namespace)


def kueue_patch(job: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(
        p for p in job["spec"].get("runtimePatches", []) if p["manager"] == KUEUE_MANAGER
    )
    return found


def assert_matches_render(
    bed: Any, namespace: str, name: str, tmp: Path, runtimes: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """The JobSet on the cluster holds every field `trainer render` makes of the TrainJob as it
    is now (Kueue's runtime patch included); returns the JobSet."""
    job = trainjob_of(bed, namespace, name)
    job["metadata"] = {
        k: v for k, v in job["metadata"].items() if k in ("name", "namespace", "labels")
    }
    job.pop("status", None)
    path = tmp / f"{name}.yaml"
    path.write_text(dump(job))
    want = next(d for d in render([path], namespace, list(runtimes)) if d["kind"] == "JobSet")
    want["metadata"].pop("ownerReferences", None)
    jobset = kubectl_json(bed, "get", "jobset", name, "-n", namespace)
    problems = missing(want, jobset)
    assert not problems, f"{name}: the JobSet differs from trainer render:\n" + "\n".join(problems)
    return jobset


def test_quota_admits_what_fits_and_the_rest_in_creation_order(
    bed: Any, queued: str, tmp_path: Path
) -> None:
    """16 GPUs of quota on 32 GPUs of nodes: two 8-GPU TrainJobs run, two more wait suspended;
    when the first finishes, the older of the two waiting is admitted and runs, the other
    still waits (the second holds its quota)."""
    ns = queued
    make_queue(bed, ns, gpus=16)
    # first: a runtime patch field Kueue v0.17 (Trainer API v2.2) does not know, and a TTL
    # (docs/kueue.md, "Kueue built on an older Trainer API").
    first = gpu_job("first", "3s", ttlSecondsAfterFinished=600)
    pod = first["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] = {
        "terminationGracePeriodSeconds": 5
    }
    create(bed, ns, first)
    create(bed, ns, gpu_job("second", "10m"))  # holds its quota to the end
    for name in ("first", "second"):
        wait(bed, ns, f"trainjob/{name}", "jsonpath={.spec.suspend}=false", 30)
    # Kueue's webhook suspended the later ones on create, with its runtime patch (the queue
    # label for the JobSet).
    for name in ("third", "fourth"):
        if name == "fourth":
            # Kueue queues equal priorities by their Workloads' creation time, which has whole
            # seconds: fourth's must come a second after third's for the order to be defined.
            after_second(bed, ns, workload(bed, ns, "third"))
        made = json.loads(
            bed.kubectl("create", "-n", ns, "-f", "-", "-o", "json", input=dump(
                gpu_job(name, "2s"))).stdout
        )  # fmt: skip
        assert made["spec"]["suspend"] is True
        assert kueue_patch(made)["trainingRuntimeSpec"] == {
            "template": {"metadata": {"labels": {QUEUE_LABEL: "user-queue"}}, "spec": {}}
        }
    # They wait: their Workloads have no quota, their JobSets (made suspended) no pods.
    for name in ("third", "fourth"):
        wl = workload(bed, ns, name)
        wait(bed, ns, wl, "jsonpath={.status.conditions[?(@.type=='QuotaReserved')].reason}"
             "=Pending", 30)  # fmt: skip
        wait(bed, ns, f"jobset/{name}", "jsonpath={.spec.suspend}=true", 30)
    pending = json.loads(
        bed.kubectl(
            "get", "--raw",
            f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{ns}/pendingworkloads",
        ).stdout
    )  # fmt: skip
    owners = [w["metadata"]["ownerReferences"][0]["name"] for w in pending["items"]]
    assert owners == ["third", "fourth"], pending  # through the aggregated visibility API

    # What runs runs on KWOK nodes with the flavor's placement and 4 GPUs a pod.
    running = running_pods(bed, ns, 4)
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] for p in running} == {
        "first", "second",
    }  # fmt: skip
    for p in running:
        assert p["spec"]["nodeName"].startswith("kwok-node-")
        assert p["spec"]["nodeSelector"] == NODE_LABELS
        assert TOLERATION in p["spec"]["tolerations"]
        assert p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    jobset = assert_matches_render(bed, ns, "first", tmp_path)
    assert_matches_render(bed, ns, "second", tmp_path)
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "node"
    assert template["metadata"]["annotations"]["kueue.x-k8s.io/workload"]
    assert jobset["metadata"]["labels"][QUEUE_LABEL] == "user-queue"
    # Kueue wrote the TrainJob back through its v2.2 types: the fields v2.2 lacks are gone,
    # and the JobSet lost the patch's grace period with them (recreated while suspended).
    kept = trainjob_of(bed, ns, "first")["spec"]
    assert "ttlSecondsAfterFinished" not in kept
    assert "terminationGracePeriodSeconds" not in template["spec"]
    # Kueue does not queue the JobSet on its own: one Workload per TrainJob, none for JobSets.
    workloads = kubectl_json(bed, "get", "workloads", "-n", ns)["items"]
    assert (
        sorted(w["metadata"]["ownerReferences"][0]["kind"] for w in workloads) == ["TrainJob"] * 4
    )

    # first finishes: its 8 GPUs go to third, the older of the two waiting; fourth still waits.
    wait(bed, ns, "trainjob/first", "condition=Complete", 60)
    wait(bed, ns, workload(bed, ns, "first"), "condition=Finished", 30)
    wait(bed, ns, "trainjob/third", "jsonpath={.spec.suspend}=false", 30)
    wait(bed, ns, "trainjob/third", "condition=Complete", 60)
    fourth = trainjob_of(bed, ns, "fourth")
    assert fourth["spec"]["suspend"] is True and fourth["status"]["state"] == "Suspended"
    assert trainjob_of(bed, ns, "second")["status"]["state"] == "Running"


def test_higher_priority_preempts_and_the_preempted_is_admitted_again(
    bed: Any, queued: str, tmp_path: Path
) -> None:
    """8 GPUs of quota: a high-priority TrainJob preempts the running low-priority one, which
    is suspended (its pods stopped, Kueue's placement taken back) and, once the high one has
    finished, admitted again and runs on a JobSet made anew."""
    ns = queued
    make_queue(bed, ns, gpus=8)
    runtime, runtime_file = quick_stop_runtime(tmp_path)
    create(bed, ns, runtime)
    quick = {"runtime": "quick-stop", "runtime_kind": "TrainingRuntime"}
    create(bed, ns, gpu_job("low", "10m", priority="low", **quick))
    wait(bed, ns, "trainjob/low", "jsonpath={.status.state}=Running", 30)
    running_pods(bed, ns, 2)
    first_jobset = kubectl_json(bed, "get", "jobset", "low", "-n", ns)["metadata"]["uid"]
    low_workload = workload(bed, ns, "low")

    create(bed, ns, gpu_job("high", "2s", priority="high", **quick))
    wait(bed, ns, low_workload, "jsonpath={.status.conditions[?(@.type=='Evicted')].reason}"
         "=Preempted", 30)  # fmt: skip
    wait(bed, ns, "trainjob/low", "condition=Suspended", 30)
    # Kueue releases the quota once it has taken its placement back, which it does only when
    # our status shows no active pods.
    wait(bed, ns, low_workload, "jsonpath={.status.conditions[?(@.type=='QuotaReserved')]"
         ".status}=False", 30)  # fmt: skip
    wait(bed, ns, "trainjob/high", "jsonpath={.spec.suspend}=false", 30)
    low = trainjob_of(bed, ns, "low")
    assert low["spec"]["suspend"] is True
    assert all(s.get("active", 0) == 0 for s in low["status"]["jobsStatus"])
    assert "replicatedJobs" not in kueue_patch(low)["trainingRuntimeSpec"]["template"]["spec"]

    wait(bed, ns, "trainjob/high", "condition=Complete", 60)
    wait(bed, ns, "trainjob/low", "jsonpath={.spec.suspend}=false", 30)
    # The JobSet is made anew (none of the first run's Jobs kept): our controller deleted the
    # idle one in the foreground when Kueue took its placement back, and waits until the
    # garbage collector is done with it.
    running = running_pods(bed, ns, 2)
    placed = {
        p["metadata"]["name"]: (p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"],
                                p["spec"].get("nodeSelector"))
        for p in running
    }  # fmt: skip
    assert all(v == ("low", NODE_LABELS) for v in placed.values()), placed
    jobset = assert_matches_render(bed, ns, "low", tmp_path, (runtime_file,))
    assert jobset["metadata"]["uid"] != first_jobset
    evictions = kubectl_json(bed, "get", low_workload, "-n", ns)["status"]["schedulingStats"]
    assert [(e["reason"], e["count"]) for e in evictions["evictions"]] == [("Preempted", 1)]
