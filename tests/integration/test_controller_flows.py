"""More controller flows against the embedded API server, each asserting what a user sees in the
API: the env of the JAX and XGBoost runtimes, a runtime without an mlPolicy, dataset and model
initializers, coscheduling and Volcano PodGroups (their CRDs installed through the API), a
TrainJob deleted while it is reconciled, and the number of writes one TrainJob costs."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.builders import trainjob
from tests.integration.harness import Plane, local_plane, report_jobset_status
from tests.integration.test_controller import KEYS, conditions
from trainer.controller.manager import Controller
from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.rest import Kube
from trainer.local.apiserver.hooks import RequestRecord
from trainer.machinery.gvr import GVR

PODGROUP_CRDS = {
    "coscheduling": ("scheduling.x-k8s.io", "v1alpha1"),
    "volcano": ("scheduling.volcano.sh", "v1beta1"),
}


class Observer:
    """The controller's ReconcileMetrics: counts each reconcile's outcome (success, requeue,
    error) and wakes :meth:`Running.until` after each one."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.changed = asyncio.Event()

    def observe_reconcile(self, result: str, seconds: float) -> None:
        self.counts[result] += 1
        self.changed.set()

    def poke(self, *_: Any) -> None:
        self.changed.set()


async def until(changed: asyncio.Event, check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Wait until ``check()`` is truthy, re-checking each time ``changed`` is set."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if result:
            return result
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"timed out waiting for {what}")
        changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), remaining)


@dataclass
class Running:
    """A started controller (caches synced, workers running) and a way to wait on its state."""

    plane: Plane
    ctl: Controller
    observer: Observer
    marks: int = 0

    async def until(
        self, check: Callable[[], Any], timeout: float = 10.0, what: str = "condition"
    ) -> Any:
        """Wait until ``check()`` is truthy, re-checking after every API write, every finished
        reconcile and every change the controller's caches see (no sleeping)."""
        store = self.plane.server.storage.store
        store.subscribe(self.observer.poke)
        try:
            return await until(self.observer.changed, check, timeout, what)
        finally:
            store.unsubscribe(self.observer.poke)

    def idle(self) -> bool:
        """Nothing queued, delayed or being reconciled."""
        q = self.ctl.queue
        return not q.processing and not len(q) and not q.waiting

    async def settle(self, *informers: Informer) -> None:
        """Wait until each of ``informers`` has received every watch event issued so far, then
        until the controller is idle: a reconcile those events trigger has then run.

        A fresh marker object written to each informer's resource is delivered after every
        earlier event of that resource; its arrival in the cache proves the rest arrived.
        Markers own nothing and are owned by nothing (a TrainJob marker is MultiKueue's, so
        reconciling it writes nothing)."""
        markers = []
        for informer in informers:
            self.marks += 1
            obj = marker(informer, f"marker-{self.marks}")
            await self.plane.kube.create(obj, gvr=informer.gvr)
            markers.append((informer, obj["metadata"]["name"]))
        await self.until(
            lambda: all(inf.get("default", name) is not None for inf, name in markers),
            what="markers cached",
        )
        await self.until(self.idle, what="idle")


def marker(informer: Informer, name: str) -> dict[str, Any]:
    """An object for ``informer`` that causes the controller no work (see Running.settle)."""
    gvr = informer.gvr
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if informer.label_selector:
        meta["labels"] = {informer.label_selector: name}  # an existence selector
    obj: dict[str, Any] = {"apiVersion": gvr.api_version, "kind": gvr.kind, "metadata": meta}
    if gvr == r.TRAINJOBS:
        obj["spec"] = {"runtimeRef": {"name": "none"}, "managedBy": "kueue.x-k8s.io/multikueue"}
    elif gvr.kind not in ("ConfigMap", "Secret"):
        obj["spec"] = {}
    return obj


def pod_group_informers(ctl: Controller) -> list[Informer]:
    """The caches of the two gang plugins' PodGroup watches (coscheduling, Volcano)."""
    return [ctl.caches.watched["coscheduling-podgroups"], ctl.caches.watched["volcano-podgroups"]]


def new_controller(plane: Plane, kube: Kube | None = None) -> tuple[Controller, Observer]:
    """A controller (on ``kube``, else the plane's client) whose reconciles and cache changes
    wake :meth:`Running.until`."""
    observer = Observer()
    ctl = Controller(kube or plane.kube, ssh_keygen=lambda: KEYS, reconcile_metrics=observer)
    for informer in ctl.informers():
        informer.add_handler(observer.poke)
    return ctl, observer


@asynccontextmanager
async def running(
    plane: Plane, ctl_observer: tuple[Controller, Observer] | None = None
) -> AsyncIterator[Running]:
    """Start a controller (a new one unless given), stop it on exit."""
    ctl, observer = ctl_observer or new_controller(plane)
    await ctl.start_caches()
    ctl.start_workers()
    try:
        yield Running(plane, ctl, observer)
    finally:
        await ctl.stop()


@pytest.fixture
async def plane() -> AsyncIterator[Plane]:
    async with local_plane() as p:
        yield p


@pytest.fixture
async def env(plane: Plane) -> AsyncIterator[Running]:
    async with running(plane) as run:
        yield run


def node_job(jobset: dict[str, Any], name: str = "node") -> dict[str, Any]:
    job: dict[str, Any] = next(j for j in jobset["spec"]["replicatedJobs"] if j["name"] == name)
    return job


def container(jobset: dict[str, Any], job: str, name: str) -> dict[str, Any]:
    pod = node_job(jobset, job)["template"]["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == name)
    return found


def env_of(ctr: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or the fieldRef path for downward-API env."""
    return {
        e["name"]: e.get("value", (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath"))
        for e in ctr.get("env") or []
    }


async def pending_job(plane: Plane, name: str) -> dict[str, Any]:
    """The TrainJob once its status says Pending (JobSet created, no pod running): its JobSet
    reports its status as JobSet's controller would (none runs here), which the controller
    mirrors with ``state: Pending``."""
    await report_jobset_status(plane, "default", name)
    job: dict[str, Any] = await plane.until(
        lambda: (
            ((plane.trainjob("default", name) or {}).get("status") or {}).get("state") == "Pending"
            and plane.trainjob("default", name)
        ),
        what=f"{name} Pending",
    )
    return job


async def create_runtime(plane: Plane, text: str) -> None:
    await plane.kube.create(yaml.safe_load(text))


COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


# --- JAX and XGBoost --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "trainer", "expected"),
    [
        (
            "jax-distributed",
            {"numNodes": 2},
            {
                "JAX_NUM_PROCESSES": "2",
                "JAX_PROCESS_ID": COMPLETION_INDEX,
                "JAX_COORDINATOR_ADDRESS": "{job}-node-0-0.{job}:29500",
            },
        ),
        (
            "jax-distributed",  # GPUs do not multiply JAX processes
            {"numNodes": 3, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},
            {"JAX_NUM_PROCESSES": "3"},
        ),
        (
            "xgboost-distributed",
            {"numNodes": 3},
            {
                "DMLC_TRACKER_URI": "{job}-node-0-0.{job}",
                "DMLC_TRACKER_PORT": "29500",
                "DMLC_TASK_ID": COMPLETION_INDEX,
                "DMLC_NUM_WORKER": "3",
            },
        ),
        (
            "xgboost-distributed",  # one worker per GPU
            {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},
            {"DMLC_NUM_WORKER": "8"},
        ),
    ],
    ids=["jax", "jax-gpu", "xgboost", "xgboost-gpu"],
)
async def test_jax_and_xgboost_trainjobs_get_their_env(
    env: Running, runtime: str, trainer: dict[str, Any], expected: dict[str, str]
) -> None:
    plane = env.plane
    name = runtime.split("-", maxsplit=1)[0]
    job = trainjob(name, trainer={"env": [{"name": "USER_SET", "value": "1"}], **trainer})
    job["spec"]["runtimeRef"]["name"] = runtime
    await plane.kube.create(job)
    jobset = await plane.until(lambda: plane.jobset("default", name), what="JobSet")
    node = container(jobset, "node", "node")
    got = env_of(node)
    for key, value in expected.items():
        assert got[key] == value.format(job=name), key
    assert got["USER_SET"] == "1"
    assert {"containerPort": 29500, "protocol": "TCP"} in [
        {k: p.get(k) for k in ("containerPort", "protocol")} for p in node["ports"]
    ]
    assert node_job(jobset)["template"]["spec"]["parallelism"] == trainer["numNodes"]
    assert not any(k.startswith("PET_") for k in got)
    await pending_job(plane, name)


# --- a runtime without an mlPolicy (PlainML) ---------------------------------------------------

PLAIN_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: plain
spec:
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              parallelism: 2
              template:
                spec:
                  containers:
                    - name: node
                      image: busybox:1.36
                      command: [sh, -c, "echo from runtime"]
                      env:
                        - {name: MODE, value: runtime}
"""


async def test_plain_runtime_without_ml_policy(env: Running) -> None:
    plane = env.plane
    await create_runtime(plane, PLAIN_RUNTIME)
    job = trainjob(
        "plain",
        trainer={
            "numNodes": 3,
            "image": "python:3.12",
            "command": ["python", "-c", "print(1)"],
            "env": [{"name": "MODE", "value": "trainjob"}, {"name": "EXTRA", "value": "x"}],
        },
    )
    job["spec"]["runtimeRef"]["name"] = "plain"
    await plane.kube.create(job)
    jobset = await plane.until(lambda: plane.jobset("default", "plain"), what="JobSet")
    spec = node_job(jobset)["template"]["spec"]
    assert (spec["parallelism"], spec["completions"]) == (3, 3)  # numNodes wins over the runtime
    node = container(jobset, "node", "node")
    assert (node["image"], node["command"]) == ("python:3.12", ["python", "-c", "print(1)"])
    assert env_of(node) == {"MODE": "trainjob", "EXTRA": "x"}  # no framework env at all
    assert not node.get("ports")
    await pending_job(plane, "plain")


# --- dataset and model initializers --------------------------------------------------------------

LLM_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata:
  name: llm
  namespace: default
spec:
  mlPolicy:
    numNodes: 1
    torch: {}
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer
            spec:
              template:
                spec:
                  containers:
                    - name: dataset-initializer
                      image: ghcr.io/kubeflow/trainer/dataset-initializer
                      env:
                        - {name: STORAGE_URI, value: "hf://runtime/dataset"}
                      volumeMounts:
                        - {name: initializer, mountPath: /workspace}
        - name: model-initializer
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: model-initializer
            spec:
              template:
                spec:
                  containers:
                    - name: model-initializer
                      image: ghcr.io/kubeflow/trainer/model-initializer
                      env:
                        - {name: STORAGE_URI, value: "hf://runtime/model"}
                      volumeMounts:
                        - {name: initializer, mountPath: /workspace}
        - name: node
          dependsOn:
            - {name: dataset-initializer, status: Complete}
            - {name: model-initializer, status: Complete}
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: ghcr.io/kubeflow/trainer/torchtune-trainer
                      volumeMounts:
                        - {name: initializer, mountPath: /workspace}
"""


async def test_dataset_and_model_initializers(env: Running) -> None:
    plane = env.plane
    await create_runtime(plane, LLM_RUNTIME)
    job = trainjob(
        "llm",
        initializer={
            "dataset": {
                "storageUri": "hf://tatsu-lab/alpaca",
                "env": [{"name": "SPLIT", "value": "train[:10]"}],
            },
            "model": {
                "storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct",
                "secretRef": {"name": "hf-token"},
            },
        },
        trainer={"numNodes": 1},
    )
    job["spec"]["runtimeRef"] = {"name": "llm", "kind": "TrainingRuntime"}
    await plane.kube.create(job)
    jobset = await plane.until(lambda: plane.jobset("default", "llm"), what="JobSet")
    dataset = container(jobset, "dataset-initializer", "dataset-initializer")
    model = container(jobset, "model-initializer", "model-initializer")
    assert env_of(dataset) == {"STORAGE_URI": "hf://tatsu-lab/alpaca", "SPLIT": "train[:10]"}
    assert env_of(model) == {"STORAGE_URI": "hf://meta-llama/Llama-3.2-1B-Instruct"}
    assert model["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert "envFrom" not in dataset
    for step in ("dataset-initializer", "model-initializer", "node"):
        assert node_job(jobset, step)["replicas"] == 1
    assert node_job(jobset)["dependsOn"] == [
        {"name": "dataset-initializer", "status": "Complete"},
        {"name": "model-initializer", "status": "Complete"},
    ]
    assert [j["name"] for j in jobset["spec"]["replicatedJobs"]] == [
        "dataset-initializer",
        "model-initializer",
        "node",
    ]
    snapshot = plane.get("v1", "configmaps", "default", "llm-runtime-snapshot")
    assert snapshot is not None
    assert yaml.safe_load(snapshot["data"]["runtime"])["kind"] == "TrainingRuntime"
    await pending_job(plane, "llm")


# --- PodGroups -------------------------------------------------------------------------------


def podgroup_crd(group: str, version: str) -> dict[str, Any]:
    """A minimal PodGroup CRD: any content accepted, a status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "podgroups",
                "singular": "podgroup",
                "kind": "PodGroup",
                "listKind": "PodGroupList",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


async def install_podgroup_crds(plane: Plane) -> None:
    for group, version in PODGROUP_CRDS.values():
        await plane.kube.create(podgroup_crd(group, version), gvr=r.CRDS)


GANG_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: gang-{scheduler}
  annotations: {annotations}
spec:
  mlPolicy:
    numNodes: 1
    torch: {{}}
  podGroupPolicy:
    {policy}
  template:
    metadata:
      annotations: {annotations}
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  priorityClassName: {priority}
                  containers:
                    - name: node
                      image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
                      resources:
                        requests: {{cpu: "1", memory: 4Gi}}
"""

GANG = {
    "coscheduling": {
        "policy": "coscheduling: {scheduleTimeoutSeconds: 100}",
        "annotations": "{}",
        "priority": '""',
    },
    "volcano": {
        "policy": "volcano: {}",
        "annotations": "{scheduling.volcano.sh/queue-name: research}",
        "priority": "high",
    },
}


def gang_runtime(scheduler: str) -> str:
    return GANG_RUNTIME.format(scheduler=scheduler, **GANG[scheduler])


def rv(obj: dict[str, Any] | None) -> int:
    return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)


@pytest.mark.parametrize("scheduler", ["coscheduling", "volcano"])
async def test_podgroups_with_crds_installed_first(plane: Plane, scheduler: str) -> None:
    await install_podgroup_crds(plane)
    async with running(plane) as run:
        coscheduling_inf, volcano_inf = pod_group_informers(run.ctl)
        assert coscheduling_inf.served and volcano_inf.served  # the optional informers see them
        await create_runtime(plane, gang_runtime(scheduler))
        job = trainjob("gang", trainer={"numNodes": 3})
        job["spec"]["runtimeRef"]["name"] = f"gang-{scheduler}"
        await plane.kube.create(job)
        group, version = PODGROUP_CRDS[scheduler]
        pod_group = await plane.until(
            lambda: plane.get(f"{group}/{version}", "podgroups", "default", "gang"),
            what="PodGroup",
        )
        jobset = await plane.until(lambda: plane.jobset("default", "gang"), what="JobSet")
        await pending_job(plane, "gang")
        # The controller's own cache of the PodGroup follows the API.
        informer = coscheduling_inf if scheduler == "coscheduling" else volcano_inf
        other = volcano_inf if scheduler == "coscheduling" else coscheduling_inf
        await run.until(
            lambda: rv(informer.get("default", "gang")) == rv(pod_group), what="PodGroup cached"
        )
        assert other.get("default", "gang") is None

    owner = pod_group["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainJob", "gang", True)
    spec = pod_group["spec"]
    assert spec["minMember"] == 3
    assert spec["minResources"] == {"cpu": "3", "memory": "12Gi"}
    pod_meta = node_job(jobset)["template"]["spec"]["template"]["metadata"]
    if scheduler == "coscheduling":
        assert spec["scheduleTimeoutSeconds"] == 100
        assert pod_meta["labels"]["scheduling.x-k8s.io/pod-group"] == "gang"
    else:
        assert (spec["queue"], spec["priorityClassName"]) == ("research", "high")
        assert pod_meta["annotations"]["scheduling.k8s.io/group-name"] == "gang"


async def test_podgroup_crds_installed_after_the_controller_started(plane: Plane) -> None:
    """The PodGroup informers are optional: started without the CRDs they report the resource
    as not served and list it again only once an apply of the controller's own shows it is
    served, never on a timer. A TrainJob that needs a PodGroup meanwhile says why it waits,
    and converges once the CRD exists; the PodGroup kind no TrainJob needs is never listed
    again."""

    def lists(group: str) -> int:
        """Lists of PodGroups of ``group`` (the 404 of a path not routed yet reads as a get)."""
        return sum(
            1
            for x in plane.server.storage.hooks.log
            if x.verb in ("list", "get") and x.path.startswith(f"/apis/{group}/") and not x.name
        )

    ctl, observer = new_controller(plane)
    assert all(inf.discovery_interval is None for inf in pod_group_informers(ctl))
    async with running(plane, (ctl, observer)) as run:
        assert not any(inf.served for inf in pod_group_informers(ctl))
        assert (lists("scheduling.x-k8s.io"), lists("scheduling.volcano.sh")) == (1, 1)
        await create_runtime(plane, gang_runtime("coscheduling"))
        job = trainjob("early", trainer={"numNodes": 2})
        job["spec"]["runtimeRef"]["name"] = "gang-coscheduling"
        await plane.kube.create(job)
        failed = await plane.until(
            lambda: conditions(plane.trainjob("default", "early")).get("BuildFailed"),
            what="BuildFailed",
        )
        assert failed == ("True", "ApplyFailed")
        await install_podgroup_crds(plane)
        pod_group = await plane.until(
            lambda: plane.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "default", "early"),
            what="PodGroup",
        )
        await plane.until(lambda: plane.jobset("default", "early"), what="JobSet")
        await plane.until(
            lambda: (
                conditions(plane.trainjob("default", "early")).get("BuildFailed")
                == ("False", "ResourcesCreated")
            ),
            what="BuildFailed cleared",
        )
        await pending_job(plane, "early")
        coscheduling, volcano = pod_group_informers(ctl)
        await run.settle(coscheduling)  # it serves its PodGroups now
        assert coscheduling.served
        assert rv(coscheduling.get("default", "early")) == rv(pod_group)
        assert lists("scheduling.x-k8s.io") == 2  # at start, and once the apply succeeded
        assert not volcano.served and lists("scheduling.volcano.sh") == 1  # nothing needs it


async def test_suspended_gang_follows_limit_ranges_and_runtime_classes(plane: Plane) -> None:
    """A suspended TrainJob's PodGroup reserves what its pods will request once admitted: a
    LimitRange created in its namespace adds the container default, a RuntimeClass its
    runtime uses adds the pod overhead, each re-applied without touching the TrainJob. Once
    the job runs its PodGroup is left alone."""
    await install_podgroup_crds(plane)
    runtime = yaml.safe_load(gang_runtime("coscheduling"))
    runtime["metadata"]["name"] = "gang-kata"
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod["template"]["spec"]["runtimeClassName"] = "kata"
    await plane.kube.create(runtime)
    podgroups = "scheduling.x-k8s.io/v1alpha1"

    def min_resources() -> dict[str, str]:
        pg = plane.get(podgroups, "podgroups", "default", "queued") or {}
        return dict((pg.get("spec") or {}).get("minResources") or {})

    async with running(plane) as run:
        job = trainjob("queued", trainer={"numNodes": 2}, suspend=True)
        job["spec"]["runtimeRef"]["name"] = "gang-kata"
        await plane.kube.create(job)
        await plane.until(lambda: min_resources() == {"cpu": "2", "memory": "8Gi"}, what="PG")

        await plane.kube.create(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": "defaults", "namespace": "default"},
                "spec": {
                    "limits": [
                        {"type": "Container", "defaultRequest": {"ephemeral-storage": "1Gi"}}
                    ]
                },
            },
            gvr=r.LIMIT_RANGES,
        )
        await plane.until(
            lambda: min_resources().get("ephemeral-storage") == "2Gi", what="LimitRange default"
        )
        await plane.kube.create(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "kata"},
                "handler": "kata",
                "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}},
            },
            gvr=r.RUNTIME_CLASSES,
        )
        await plane.until(
            lambda: (
                min_resources() == {"cpu": "2500m", "ephemeral-storage": "2Gi", "memory": "8512Mi"}
            ),
            what="RuntimeClass overhead",
        )

        # Resumed, the PodGroup no longer follows: a new default does not reach it.
        await plane.kube.patch(r.TRAINJOBS, "default", "queued", {"spec": {"suspend": False}})
        await plane.until(
            lambda: (
                (plane.jobset("default", "queued") or {}).get("spec", {}).get("suspend") is False
            ),
            what="JobSet resumed",
        )
        before = rv(plane.get(podgroups, "podgroups", "default", "queued"))
        await plane.kube.create(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": "more", "namespace": "default"},
                "spec": {
                    "limits": [{"type": "Container", "defaultRequest": {"hugepages-2Mi": "2Mi"}}]
                },
            },
            gvr=r.LIMIT_RANGES,
        )
        # A change to the TrainJob makes the controller reconcile it with the new default.
        await plane.kube.patch(
            r.TRAINJOBS, "default", "queued", {"metadata": {"labels": {"touched": "yes"}}}
        )
        limit_ranges = run.ctl.caches.watched["limit-ranges"]
        await run.settle(limit_ranges, run.ctl.caches.trainjobs)
        assert rv(plane.get(podgroups, "podgroups", "default", "queued")) == before
        assert "hugepages-2Mi" not in min_resources()


# --- a TrainJob deleted while it is reconciled ---------------------------------------------------


@pytest.mark.parametrize("when", ["right-after-create", "after-the-first-controller-write"])
async def test_trainjob_deleted_mid_reconcile_leaves_nothing_behind(
    plane: Plane, when: str
) -> None:
    deleting: list[asyncio.Task[bool]] = []

    def delete_on_first_write(rec: RequestRecord) -> None:
        if not deleting and rec.field_manager == "trainer" and rec.name.startswith("gone"):
            deleting.append(
                asyncio.get_running_loop().create_task(
                    plane.kube.delete(r.TRAINJOBS, "default", "gone")
                )
            )

    async with running(plane) as run:
        ctl = run.ctl
        if when == "right-after-create":
            await plane.kube.create(trainjob("gone", trainer={"numNodes": 2}))
            await plane.kube.delete(r.TRAINJOBS, "default", "gone")
        else:
            plane.server.storage.hooks.on_request.append(delete_on_first_write)
            await plane.kube.create(trainjob("gone", trainer={"numNodes": 2}))
            await plane.until(lambda: deleting, what="the controller's first write")
            assert await deleting[0]
        await plane.kube.create(trainjob("kept"))  # the controller keeps working
        await plane.until(lambda: plane.jobset("default", "kept"), what="the next JobSet")
        await run.until(
            lambda: (
                run.idle()
                and ctl.caches.trainjobs.get("default", "gone") is None
                and ctl.caches.trainjobs.get("default", "kept") is not None
            ),
            what="queue drained",
        )
        await plane.server.storage.gc.idle()
        assert plane.trainjob("default", "gone") is None
        assert plane.jobset("default", "gone") is None
        assert plane.get("v1", "configmaps", "default", "gone-runtime-snapshot") is None
        assert ctl.queue.num_requeues("default/gone") == 0
        assert run.observer.counts["error"] == 0  # no error loop


# --- what one TrainJob costs -------------------------------------------------------------------


def controller_writes(records: list[RequestRecord]) -> Counter[tuple[str, str]]:
    """(verb, resource) of the controller's object writes: its server-side applies (field
    manager ``trainer``) and its status patches."""
    return Counter(
        (x.verb, x.resource)
        for x in records
        if x.is_write and (x.field_manager == "trainer" or x.resource == "trainjobs/status")
    )


def events(records: list[RequestRecord]) -> int:
    return sum(1 for x in records if x.is_write and x.resource == "events")


TORCH_WRITES = {
    ("patch", "configmaps"): 1,  # the runtime snapshot
    ("patch", "jobsets"): 1,
}
MPI_WRITES = {
    ("patch", "configmaps"): 2,  # the snapshot and the hostfile
    ("patch", "secrets"): 1,  # the SSH keys
    ("patch", "jobsets"): 1,
}


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [("torch-distributed", TORCH_WRITES), ("deepspeed-distributed", MPI_WRITES)],
    ids=["torch", "mpi"],
)
async def test_a_trainjob_costs_the_minimum_writes_and_a_resync_none(
    env: Running, runtime: str, expected: dict[tuple[str, str], int]
) -> None:
    """The build costs one apply per object; the status costs one write, made once JobSet
    reports its status, which carries ``jobsStatus`` and our additive fields together (no
    write of ``state`` and ``startTime`` alone before it, which upstream does not make)."""
    plane, ctl = env.plane, env.ctl
    caches = ctl.caches
    informers = (caches.trainjobs, caches.jobsets, caches.config_maps, caches.secrets)
    start = len(plane.server.storage.hooks.log)
    job = trainjob("cost", trainer={"numNodes": 2})
    job["spec"]["runtimeRef"]["name"] = runtime
    await plane.kube.create(job)
    await plane.until(lambda: plane.jobset("default", "cost"), what="JobSet")
    await env.settle(*informers)
    records = [x for x in plane.server.storage.hooks.log[start:] if "marker" not in x.name]
    assert controller_writes(records) == Counter(expected)
    assert not (plane.trainjob("default", "cost") or {}).get("status")
    assert events(records) == 0  # no Normal Event: upstream records none
    assert all(x.code < 300 for x in records if x.is_write)
    # One reconcile did it all (plus one of the TrainJob marker, which writes nothing).
    assert env.observer.counts == {"success": 2}

    reported = len(plane.server.storage.hooks.log)
    await pending_job(plane, "cost")
    await env.settle(*informers)
    records = [x for x in plane.server.storage.hooks.log[reported:] if "marker" not in x.name]
    assert controller_writes(records) == Counter({("patch", "trainjobs/status"): 1})
    status = (plane.trainjob("default", "cost") or {})["status"]
    assert {"jobsStatus", "state", "startTime"} <= set(status), status

    before = len(plane.server.storage.hooks.log)
    for key in [f"{ns}/{name}" for ns, name in ctl.caches.trainjobs.keys()]:  # noqa: SIM118
        await ctl.reconciler.reconcile(key)
    assert [x for x in plane.server.storage.hooks.log[before:] if x.is_write] == []


async def test_a_status_written_by_upstreams_controller_gets_our_additive_fields(
    plane: Plane,
) -> None:
    """A TrainJob whose status upstream's controller wrote (``jobsStatus``, none of our
    additive fields), then reconciled by ours, gets ``state`` and ``startTime`` at once: only a
    TrainJob without any status waits for upstream's fields before they are written."""
    created = await plane.kube.create(trainjob("adopted", trainer={"numNodes": 2}))
    jobs = [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]
    await plane.kube.patch_status(
        r.TRAINJOBS, "default", "adopted", {"status": {"jobsStatus": jobs}}
    )
    async with running(plane) as run:
        job = await run.until(
            lambda: (
                ((plane.trainjob("default", "adopted") or {}).get("status") or {}).get("state")
                and plane.trainjob("default", "adopted")
            ),
            what="state written",
        )
    status = job["status"]
    assert status["state"] == "Pending"
    assert status["startTime"] == created["metadata"]["creationTimestamp"]
    assert status["jobsStatus"] == jobs


def events_about(plane: Plane, name: str) -> list[tuple[str, str]]:
    """(type, reason) of the Events about TrainJob ``name``."""
    return [
        (e["type"], e["reason"])
        for e in plane.server.storage.objects("v1", "events", "default")
        if e["involvedObject"]["kind"] == "TrainJob" and e["involvedObject"]["name"] == name
    ]


async def test_only_failures_are_worth_an_event(env: Running) -> None:
    """No Normal Event through a TrainJob's life (its JobSet created, suspended, resumed,
    completed: upstream's controller records none, and each is a write); a failure gets its
    Warning."""
    plane, caches = env.plane, env.ctl.caches

    def condition(name: str, type_: str) -> tuple[str, str] | None:
        return conditions(plane.trainjob("default", name)).get(type_)

    await plane.kube.create(trainjob("quiet", suspend=True))
    await env.until(lambda: condition("quiet", "Suspended") == ("True", "Suspended"))
    await plane.kube.patch(r.TRAINJOBS, "default", "quiet", {"spec": {"suspend": False}})
    await env.until(lambda: condition("quiet", "Suspended") == ("False", "Resumed"))
    done = {
        "type": "Completed",
        "status": "True",
        "reason": "AllJobsCompleted",
        "message": "jobset completed successfully",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await plane.kube.patch_status(r.JOBSETS, "default", "quiet", {"status": {"conditions": [done]}})
    await env.until(lambda: condition("quiet", "Complete"), what="Complete")

    await plane.kube.create(trainjob("loud"))
    await plane.until(lambda: plane.jobset("default", "loud"), what="JobSet")
    failed = {**done, "type": "Failed", "reason": "FailedJobs", "message": "jobset failed"}
    await plane.kube.patch_status(
        r.JOBSETS, "default", "loud", {"status": {"conditions": [failed]}}
    )
    await env.until(lambda: condition("loud", "Failed"), what="Failed")
    await env.settle(caches.trainjobs, caches.jobsets)
    assert events_about(plane, "quiet") == []
    assert events_about(plane, "loud") == [("Warning", "Failed")]


OLD_HASH = "trainer.kubeflow.org/applied-config-hash"
"""The annotation earlier versions wrote on every object they applied."""


class EarlierVersion(Kube):
    """The controller's client as an earlier version used it: every applied object carries
    :data:`OLD_HASH`."""

    async def apply(
        self,
        obj: dict[str, Any],
        field_manager: str,
        force: bool = True,
        dry_run: bool = False,
        *,
        subresource: str | None = None,
        gvr: GVR | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        stamped = copy.deepcopy(obj)
        stamped["metadata"].setdefault("annotations", {})[OLD_HASH] = "0123456789abcdef0123"
        return await super().apply(
            stamped,
            field_manager,
            force,
            dry_run,
            subresource=subresource,
            gvr=gvr,
            timeout=timeout,
        )


def annotations_of(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


async def test_nothing_is_stamped_and_an_earlier_versions_stamp_goes_without_a_loop(
    plane: Plane,
) -> None:
    """What the controller applies carries no annotation of its own (upstream's objects carry
    none): what it last applied is kept in its memory. An earlier version's stamp never makes
    a new controller loop: a JobSet it applies again (a suspended TrainJob's: its memory starts
    empty) loses the stamp, since server-side apply takes away what our field manager stops
    applying; objects it does not apply again (a running TrainJob's JobSet, a snapshot) keep it
    and cost nothing. Either way a reconcile after that writes nothing."""
    old = EarlierVersion(plane.kube.api)
    async with running(plane, new_controller(plane, old)) as run:
        await plane.kube.create(trainjob("queued", trainer={"numNodes": 2}, suspend=True))
        await plane.kube.create(trainjob("started", trainer={"numNodes": 2}))
        await run.until(
            lambda: all(
                OLD_HASH in annotations_of(plane.jobset("default", n))
                for n in ("queued", "started")
            ),
            what="stamped by the earlier version",
        )
        await run.until(run.idle, what="idle")

    async with running(plane) as run:
        caches = run.ctl.caches
        await run.until(
            lambda: OLD_HASH not in annotations_of(plane.jobset("default", "queued")),
            what="the stamp taken away",
        )
        await run.settle(caches.trainjobs, caches.jobsets, caches.config_maps)
        assert OLD_HASH in annotations_of(plane.jobset("default", "started"))  # never applied again
        snapshot = plane.get("v1", "configmaps", "default", "queued-runtime-snapshot")
        assert OLD_HASH in annotations_of(snapshot)  # written once, when the TrainJob was new
        assert run.observer.counts["error"] == 0
        before = len(plane.server.storage.hooks.log)
        for key in ("default/queued", "default/started"):
            await run.ctl.reconciler.reconcile(key)
        assert [x for x in plane.server.storage.hooks.log[before:] if x.is_write] == []

        await plane.kube.create(trainjob("new", trainer={"numNodes": 2}, suspend=True))
        await run.until(lambda: plane.jobset("default", "new"), what="JobSet")
        assert annotations_of(plane.jobset("default", "new")) == {}
        assert (
            annotations_of(plane.get("v1", "configmaps", "default", "new-runtime-snapshot")) == {}
        )

        # What was remembered of a TrainJob goes with it.
        applied = run.ctl.reconciler.applied
        assert len(applied) == 2  # the suspended TrainJobs' JobSets: "queued" and "new"
        await plane.kube.delete(r.TRAINJOBS, "default", "queued")
        await run.until(lambda: len(applied) == 1 and run.idle(), what="forgotten")
