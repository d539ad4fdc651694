"""The Kueue queueing contract end to end (docs/kueue.md), on the local control plane:
the real API server, admission webhook, controller and executor (pods are local processes),
with :mod:`tests.e2e.kueue` doing what Kueue v0.17+ does to a TrainJob.

The ClusterQueue has two flavors: ``small`` (1 CPU, spot nodes: a nodeSelector key and a
toleration of its own) and ``big`` (4 CPUs). The runtime has two replicated jobs: ``prep`` (one
pod, 1 CPU) and the trainer ``node`` (2 pods, 1 CPU each, dependsOn prep Complete), so one job
takes ``small`` for prep and 2 of ``big``'s CPUs for node; a second identical job does not fit
until the first has finished. The trainer's command waits for a file the test creates, which
keeps a job running for as long as a test needs without sleeping in the test.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import builders as b
from tests.e2e.kueue import Flavor, KueueEmulator, pod_sets_of_jobset, queued_template
from tests.e2e.test_run import condition, until
from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError, Kube
from trainer.local.executor.node.config import parse_node_config

PY = sys.executable
JOBSET = "jobset.x-k8s.io/v1alpha2"
SPOT = {"key": "example.com/spot", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = [
    Flavor(
        "small",
        {"example.com/pool-small": "true", "example.com/spot": "true"},
        {"cpu": "1"},
        [SPOT],
    ),
    Flavor("big", {"example.com/pool-big": "true"}, {"cpu": "4"}),
]
# The local plane is one node: it carries both flavors' labels (a cluster would have a node
# pool per flavor), and the CPUs of the bigger flavor whatever this machine has.
NODE = parse_node_config(
    {
        "labels": {label: value for f in FLAVORS for label, value in f.node_labels.items()},
        "capacity": {"cpu": "8"},
    }
)
WAIT = (
    "import os, time\n"
    "release = os.environ.get('RELEASE')\n"
    "while release and not os.path.exists(release):\n"
    "    time.sleep(0.05)\n"
    "print('trained on', os.environ.get('HOSTNAME_X', 'node'))\n"
)


def container(name: str, script: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "python:3.11-slim",
        "command": [PY, "-c", script],
        "resources": {"requests": {"cpu": "1"}},
    }


RUNTIME = {
    "apiVersion": c.API_VERSION,
    "kind": c.KIND_CLUSTER_TRAINING_RUNTIME,
    "metadata": {"name": "queued"},
    "spec": {
        "mlPolicy": {"numNodes": 2},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "prep",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {"containers": [container("prep", "print('prep')")]}
                                }
                            }
                        },
                    },
                    {
                        "name": "node",
                        "dependsOn": [{"name": "prep", "status": "Complete"}],
                        "template": {
                            "metadata": {"labels": {c.LABEL_ANCESTOR: c.ANCESTOR_TRAINER}},
                            "spec": {
                                "template": {"spec": {"containers": [container("node", WAIT)]}}
                            },
                        },
                    },
                ]
            }
        },
    },
}


@dataclass
class Env:
    plane: LocalPlane
    kueue: KueueEmulator
    kube: Kube  # the emulator's client (its own user agent)
    tmp: Path

    def release(self, name: str) -> Path:
        return self.tmp / f"release-{name}"

    def trainjob_body(self, name: str, queue: str = "user-queue", **spec: Any) -> dict[str, Any]:
        trainer = {"env": [{"name": "RELEASE", "value": str(self.release(name))}]}
        return b.trainjob(
            name,
            namespace=spec.pop("namespace", "default"),
            runtime="queued",
            labels={c.LABEL_KUEUE_QUEUE_NAME: queue},
            **{"trainer": trainer, **spec},
        )

    def get(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return (
            self.plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, namespace, name)
            or {}
        )

    def jobset(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.plane.server.storage.get_object(JOBSET, "jobsets", namespace, name)

    def pods(self, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        return [
            p
            for p in self.plane.server.storage.objects("v1", "pods", namespace)
            if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == name
            and not p["metadata"].get("deletionTimestamp")
        ]

    def running_pods(self, name: str, job: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods(name)
            if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == job
            and (p.get("status") or {}).get("phase") == "Running"
        ]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    plane = await start_local_plane(
        work_dir=tmp_path, state_dir=tmp_path / "state", node_config=NODE
    )
    api = await new_api_client(str(tmp_path / "state" / "kubeconfig"), qps_user_agent="kueue")
    kube = Kube(api)
    kueue = KueueEmulator(kube, FLAVORS, local_queues={"user-queue": False, "multi": True})
    try:
        await plane.kube.create(RUNTIME, gvr=r.CLUSTER_TRAINING_RUNTIMES)
        await kueue.start()
        yield Env(plane, kueue, kube, tmp_path)
    finally:
        await kueue.stop()
        await api.close()
        await plane.close()


def kueue_entry(job: dict[str, Any]) -> dict[str, Any]:
    patches = (job.get("spec") or {}).get("runtimePatches") or []
    entry: dict[str, Any] = next(p for p in patches if p["manager"] == c.KUEUE_PATCH_MANAGER)
    return entry


def pod_placement(pod: dict[str, Any]) -> tuple[dict[str, str], list[Any], str | None]:
    spec = pod["spec"]
    return (
        spec.get("nodeSelector") or {},
        spec.get("tolerations") or [],
        pod["metadata"]["labels"].get(c.LABEL_KUEUE_PODSET),
    )


def controller_writes(plane: LocalPlane, namespace: str, name: str) -> list[Any]:
    """Writes the controller made to TrainJob ``name`` or objects named like it."""
    return [
        rec
        for rec in plane.server.storage.hooks.writes()
        if rec.user_agent.startswith("trainer") and rec.namespace == namespace and rec.name == name
    ]


# --- queued ---------------------------------------------------------------------------------


async def test_a_queued_trainjob_waits_suspended_with_its_jobset(env: Env) -> None:
    for flavor in ("small", "big"):
        env.kueue.cordon(flavor)  # no quota anywhere: the job stays queued
    await env.kube.create(env.trainjob_body("waiting"), gvr=r.TRAINJOBS)

    stored = env.get("waiting")
    assert stored["spec"]["suspend"] is True
    entry = kueue_entry(stored)
    assert entry["trainingRuntimeSpec"] == queued_template("user-queue")
    # Mutating webhooks run in configuration-name order: Trainer's defaulter ran before
    # Kueue's appended the entry, so it has no time yet (as on a cluster).
    assert "time" not in entry
    jobset = await until(env.plane, lambda: env.jobset("waiting"))
    assert jobset["spec"]["suspend"] is True
    await until(env.plane, lambda: (env.get("waiting").get("status") or {}).get("state"))
    assert env.get("waiting")["status"]["state"] == "Suspended"
    wl = await env.kueue.until(lambda: env.kueue.workloads.get("default/waiting"))
    assert wl.admitted is None
    assert not [p for p in env.pods("waiting") if (p.get("status") or {}).get("phase") == "Running"]

    # What Kueue computes from the runtime is what the controller created, job by job.
    assert [(p.name, p.count, p.requests) for p in wl.pod_sets] == [
        (p.name, p.count, p.requests) for p in pod_sets_of_jobset(jobset)
    ]
    assert [(p.name, p.count) for p in wl.pod_sets] == [("prep", 1), ("node", 2)]


# --- admitted on two flavors, quota, finish --------------------------------------------------


async def test_admission_on_two_flavors_quota_and_finish(env: Env) -> None:
    await env.kube.create(env.trainjob_body("first"), gvr=r.TRAINJOBS)
    wl = await env.kueue.until(
        lambda: (w := env.kueue.workloads.get("default/first")) and w.admitted and w
    )
    assert wl.admitted == {"prep": "small", "node": "big"}
    # Kueue's admission Update changed its entry: the Trainer defaulter stamped the time.
    assert kueue_entry(env.get("first")).get("time")
    await until(env.plane, lambda: len(env.running_pods("first", "node")) == 2)

    # Each replicated job's pods carry their own flavor's placement and podset label.
    prep_pods = [
        p
        for p in env.plane.server.storage.objects("v1", "pods", "default")
        if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == "first"
        and p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "prep"
    ]
    assert prep_pods and all(
        pod_placement(p) == (FLAVORS[0].node_labels, [SPOT], "prep") for p in prep_pods
    )
    for pod in env.running_pods("first", "node"):
        assert pod_placement(pod) == ({"example.com/pool-big": "true"}, [], "node")

    # The second job does not fit while the first holds the quota.
    await env.kube.create(env.trainjob_body("second"), gvr=r.TRAINJOBS)
    second = await env.kueue.until(lambda: env.kueue.workloads.get("default/second"))
    assert second.admitted is None
    assert env.get("second")["spec"]["suspend"] is True
    assert not env.running_pods("second", "prep") and not env.running_pods("second", "node")

    env.release("first").touch()
    await until(env.plane, lambda: condition(env.plane, "first", "Complete"), timeout=60)
    done = await env.kueue.until(lambda: env.kueue.workloads["default/first"].finished)
    assert done == "Succeeded"
    # ...and then the second is admitted and runs to Complete too.
    env.release("second").touch()
    await env.kueue.until(lambda: env.kueue.workloads["default/second"].admitted)
    await until(env.plane, lambda: condition(env.plane, "second", "Complete"), timeout=60)
    # The Complete condition's message is what Kueue puts on the Workload's Finished.
    assert env.kueue.workloads["default/first"].finished_message == (
        "jobset completed successfully"
    )


# --- preemption and re-admission on another flavor --------------------------------------------


async def test_preempted_job_is_readmitted_without_stale_placement(env: Env) -> None:
    await env.kube.create(env.trainjob_body("victim"), gvr=r.TRAINJOBS)
    await until(env.plane, lambda: len(env.running_pods("victim", "node")) == 2)
    await env.kueue.until(lambda: env.kueue.workloads["default/victim"].pods_ready)
    # Settled: prep done, node running (the JobSet's counts can lag its Jobs for a moment).
    await until(
        env.plane,
        lambda: (
            [
                (s["name"], s["active"], s["succeeded"])
                for s in env.get("victim")["status"]["jobsStatus"]
            ]
            == [("prep", 0, 1), ("node", 1, 0)]
        ),
    )
    first_jobset_uid = (env.jobset("victim") or {})["metadata"]["uid"]

    # While a replicated job is active, runtimePatches cannot change (the TrainJob webhook).
    live = await env.kube.get(r.TRAINJOBS, "default", "victim")
    assert live is not None
    kueue_entry(live)["trainingRuntimeSpec"] = {"template": {"spec": {}}}
    live["spec"]["suspend"] = True
    with pytest.raises(APIError) as denied:
        await env.kube.replace(live, gvr=r.TRAINJOBS)
    assert denied.value.status == 403
    assert (
        "RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active"
        in denied.value.message
    )

    env.kueue.cordon("small")
    env.kueue.preempt("default/victim")
    # Suspended, pods stopped, jobsStatus.active down to 0, Kueue's patch cleared.
    await env.kueue.until(lambda: env.kueue.workloads["default/victim"].admissions == 2)
    statuses = env.get("victim")["status"]["jobsStatus"]
    assert statuses  # kept current through the stop
    # Re-admitted on big only: no pod carries small's spot key or toleration.
    await until(env.plane, lambda: len(env.running_pods("victim", "node")) == 2, timeout=60)
    assert env.kueue.workloads["default/victim"].admitted == {"prep": "big", "node": "big"}
    for pod in env.pods("victim"):
        assert pod_placement(pod)[:2] == ({"example.com/pool-big": "true"}, []), pod["metadata"][
            "name"
        ]
    assert (env.jobset("victim") or {})["metadata"]["uid"] != first_jobset_uid
    env.release("victim").touch()
    await until(env.plane, lambda: condition(env.plane, "victim", "Complete"), timeout=60)


async def test_stop_waits_until_jobs_status_shows_no_active_pods(env: Env) -> None:
    """Kueue clears its patch only once every jobsStatus active is 0: the controller must
    keep copying the JobSet's counts while the pods stop."""
    await env.kube.create(env.trainjob_body("stopping"), gvr=r.TRAINJOBS)
    await until(env.plane, lambda: len(env.running_pods("stopping", "node")) == 2)
    first_uid = (env.jobset("stopping") or {})["metadata"]["uid"]
    env.kueue.cordon("small")
    env.kueue.cordon("big")  # nowhere to go: it stays stopped
    env.kueue.preempt("default/stopping")
    await env.kueue.until(
        lambda: (
            env.kueue.workloads["default/stopping"].admitted is None
            and not env.kueue.workloads["default/stopping"].evicting
        )
    )
    job = env.get("stopping")
    assert job["spec"]["suspend"] is True
    assert all(s["active"] == 0 for s in job["status"]["jobsStatus"])
    assert kueue_entry(job)["trainingRuntimeSpec"] == queued_template("user-queue")
    await until(env.plane, lambda: not env.pods("stopping"))

    # The cleared patch leaves the JobSet (recreated while idle) without Kueue's placement.
    def placed(js: dict[str, Any]) -> bool:
        return any(
            {"nodeSelector", "tolerations"} & set(rjob["template"]["spec"]["template"]["spec"])
            for rjob in js["spec"]["replicatedJobs"]
        )

    js = await until(
        env.plane,
        lambda: (j := env.jobset("stopping")) and j["spec"]["suspend"] and not placed(j) and j,
    )
    assert js["metadata"]["uid"] != first_uid


# --- MultiKueue ---------------------------------------------------------------------------------


async def test_multikueue_manager_copy_is_left_to_the_worker(env: Env) -> None:
    await env.plane.kube.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "worker"}},
        gvr=r.GVR("", "v1", "namespaces", False, "Namespace"),
    )
    await env.kube.create(env.trainjob_body("remote", queue="multi"), gvr=r.TRAINJOBS)
    manager = env.get("remote")
    assert manager["spec"]["managedBy"] == c.MANAGED_BY_MULTIKUEUE
    assert manager["spec"]["suspend"] is True

    worker_key = await env.kueue.dispatch("default/remote", "worker")
    env.release("remote").touch()
    await until(
        env.plane,
        lambda: any(
            x["type"] == "Complete" and x["status"] == "True"
            for x in (env.get("remote", "worker").get("status") or {}).get("conditions") or []
        ),
        timeout=60,
    )
    worker = env.get("remote", "worker")
    assert "managedBy" not in worker["spec"] or worker["spec"]["managedBy"] == c.MANAGED_BY_TRAINER
    assert (
        len([p for p in worker["spec"]["runtimePatches"] if p["manager"] == c.KUEUE_PATCH_MANAGER])
        == 1
    )

    await env.kueue.sync_status("default/remote", worker_key)
    assert condition(env.plane, "remote", "Complete") is not None
    # The manager copy got nothing from the controller: no JobSet, no snapshot, no status.
    assert env.jobset("remote") is None
    assert controller_writes(env.plane, "default", "remote") == []
    assert controller_writes(env.plane, "default", "remote-runtime-snapshot") == []


# --- names too long are refused before Kueue sees a job ------------------------------------------


async def test_a_name_too_long_for_the_runtime_is_rejected_at_admission(env: Env) -> None:
    name = "a-very-long-trainjob-name-that-jobset-cannot-fit-12345"
    with pytest.raises(APIError) as denied:
        await env.kube.create(env.trainjob_body(name), gvr=r.TRAINJOBS)
    assert denied.value.status == 403
    assert "63" in denied.value.message
    assert env.get(name) == {}
    # Its mutating webhook ran (mutation precedes validation), but no Workload ever exists.
    assert name in env.kueue.seen_by_webhook
    await env.kube.create(env.trainjob_body("marker"), gvr=r.TRAINJOBS)
    await env.kueue.until(lambda: "default/marker" in env.kueue.workloads)
    assert f"default/{name}" not in env.kueue.workloads
