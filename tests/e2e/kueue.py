"""A test-only emulation of what Kueue v0.17+ does to a TrainJob (docs/kueue.md), run
against the local control plane through the API only, as Kueue would against a cluster.

It is not shipped in the package: it exists to prove the queueing contract end to end with the
real controller, webhook and executor.

What it does:

- **Mutating webhook**, served over HTTPS and registered through a
  MutatingWebhookConfiguration (``kueue-mutating-webhook-configuration``, which sorts after
  ``defaulter.trainer.kubeflow.org``, as on a cluster): on create, a TrainJob with a
  ``kueue.x-k8s.io/queue-name`` label is set ``suspend: true``, gets ``managedBy:
  kueue.x-k8s.io/multikueue`` when its LocalQueue is a MultiKueue one (and managedBy is unset or
  Trainer's), and has Kueue's runtimePatch (manager ``kueue.x-k8s.io/manager``) appended, which
  puts the queue label on the JobSet (:func:`queued_template`).
- **Workloads** (kept in memory; there is no Workload CRD here): PodSets computed from the
  TrainJob and its *live* runtime the way Kueue does, by rendering the JobSet with this
  project's render engine (Kueue links Trainer's runtime packages for the same purpose): one
  PodSet per replicated job, in order, ``count = replicas x min(parallelism, completions)``,
  per-pod requests as the API server will admit the pods (a limit counts as the request).
- **Admission**, BestEffortFIFO in creation order: each PodSet takes the first flavor,
  in ClusterQueue order, whose remaining quota fits it (only resources a flavor has quota for
  are counted). Admitting writes the flavor's nodeSelector, tolerations, the
  ``kueue.x-k8s.io/podset`` label and optional scheduling gates into Kueue's runtimePatch
  entry with an Update while still suspended, then flips ``suspend`` to false in a second
  write. Pods that carry the emulator's gates are ungated once created (Kueue's TAS ungater).
- **Stop / preemption**: ``suspend: true``, wait until every ``jobsStatus[].active`` is 0,
  then clear the entry's ``replicatedJobs`` and release the quota; the Workload is pending again.
  A TrainJob unsuspended without admission is suspended again (``NotAdmitted``).
- **Finished** from the ``Complete`` / ``Failed`` conditions (quota released), and
  ``pods_ready`` from ``jobsStatus`` (ready + succeeded == sum of replicas).
- **MultiKueue**: :meth:`KueueEmulator.dispatch` copies a manager TrainJob to a worker
  namespace (standing in for the worker cluster) without managedBy and without Kueue's patch;
  :meth:`KueueEmulator.sync_status` copies the worker's status onto the manager object.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime as dt
import json
import logging
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from trainer.api import constants as c
from trainer.api.load import parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.jobset import contract as jsc
from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.rest import APIError, Kube
from trainer.machinery.quantity import Quantity
from trainer.plugins.registry import render
from trainer.runtime.resources import admitted_pod_requests
from webhooks.certs import generate_bundle

log = logging.getLogger("kueue-emulator")

MANAGER = c.KUEUE_PATCH_MANAGER
QUEUE_LABEL = c.LABEL_KUEUE_QUEUE_NAME
PODSET_LABEL = c.LABEL_KUEUE_PODSET
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
WEBHOOK_NAME = "kueue-mutating-webhook-configuration"
WEBHOOK_PATH = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"


def queued_template(queue: str) -> dict[str, Any]:
    """The ``trainingRuntimeSpec`` of the entry Kueue's webhook appends to a queued TrainJob."""
    return {"template": {"metadata": {"labels": {QUEUE_LABEL: queue}}, "spec": {}}}


@dataclass
class Flavor:
    """A ResourceFlavor with its quota in the ClusterQueue."""

    name: str
    node_labels: dict[str, str]
    quota: dict[str, str]
    tolerations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PodSet:
    name: str
    count: int
    replicas: int
    requests: dict[str, Quantity]  # per pod
    template: dict[str, Any]

    def total(self) -> dict[str, Quantity]:
        return {k: q * self.count for k, q in self.requests.items()}


@dataclass
class Workload:
    key: str
    uid: str
    order: int
    pod_sets: list[PodSet]
    admitted: dict[str, str] | None = None  # pod set -> flavor
    evicting: bool = False
    finished: str | None = None  # "Succeeded" / "Failed"
    finished_message: str = ""
    pods_ready: bool = False
    admissions: int = 0


def pod_sets_of(trainjob: dict[str, Any], runtime: dict[str, Any]) -> list[PodSet]:
    """Kueue's PodSets for ``trainjob`` on ``runtime``."""
    objects = render(TrainJob.from_wire(trainjob), _runtime_model(runtime))
    jobset = next(o for o in objects if o["kind"] == jsc.KIND)
    return pod_sets_of_jobset(jobset)


def pod_sets_of_jobset(jobset: dict[str, Any]) -> list[PodSet]:
    """One PodSet per replicated job of ``jobset``, in order (Kueue's JobSet adapter)."""
    from trainer.machinery.models.core import PodSpec  # noqa: PLC0415

    out = []
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        parallelism = int(job_spec.get("parallelism", 1))
        completions = int(job_spec.get("completions", parallelism))
        replicas = int(rjob.get("replicas", 1))
        template = job_spec.get("template") or {}
        requests = admitted_pod_requests(PodSpec.from_wire(template.get("spec") or {}))
        out.append(
            PodSet(
                name=str(rjob["name"]),
                count=replicas * min(parallelism, completions),
                replicas=replicas,
                requests=requests,
                template=template,
            )
        )
    return out


def _runtime_model(data: dict[str, Any]) -> TrainingRuntime | ClusterTrainingRuntime:
    model = parse_object(data)
    assert isinstance(model, TrainingRuntime | ClusterTrainingRuntime)
    return model


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def _active(obj: dict[str, Any]) -> int:
    return sum(int(s.get("active") or 0) for s in (obj.get("status") or {}).get("jobsStatus") or [])


class KueueEmulator:
    """See the module docstring. ``flavors``: the ClusterQueue's flavors, in order.
    ``local_queues``: LocalQueue name -> whether its ClusterQueue has a MultiKueue admission
    check. ``gates``: scheduling gates added to admitted pods (and removed once the pods
    exist)."""

    def __init__(
        self,
        kube: Kube,
        flavors: list[Flavor],
        *,
        local_queues: dict[str, bool] | None = None,
        gates: list[str] | None = None,
    ) -> None:
        self.kube = kube
        self.flavors = {f.name: f for f in flavors}
        self.flavor_order = [f.name for f in flavors]
        self.local_queues = local_queues if local_queues is not None else {"user-queue": False}
        self.gates = list(gates or [])
        self.workloads: dict[str, Workload] = {}
        self.cordoned: set[str] = set()
        self.seen_by_webhook: list[str] = []
        self.changed = asyncio.Event()
        self._informer = Informer(kube, r.TRAINJOBS)
        self._pods = Informer(kube, r.GVR("", "v1", "pods", True, "Pod"))
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._order = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self._runner: web.AppRunner | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="kueue-emulator-")

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        await self._start_webhook()
        self._informer.add_handler(lambda _t, obj, _o: self._enqueue(_key(obj)))
        self._pods.add_handler(lambda _t, obj, _o: self._pod_event(obj))
        await self._informer.start(timeout=30)
        await self._pods.start(timeout=30)
        self._tasks.append(asyncio.create_task(self._work(), name="kueue-emulator"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._informer.stop()
        await self._pods.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        self._tmp.cleanup()

    async def until(self, check: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
        """Wait until ``check()`` is truthy, re-checking after every emulator step."""
        async with asyncio.timeout(timeout):
            while not (result := check()):
                self.changed.clear()
                await self.changed.wait()
            return result
        raise AssertionError(what)  # pragma: no cover - the timeout raises first

    # --- the webhook --------------------------------------------------------------------------
    async def _start_webhook(self) -> None:
        bundle = generate_bundle(["127.0.0.1"], dt.datetime.now(dt.UTC))
        cert, key = Path(self._tmp.name, "tls.crt"), Path(self._tmp.name, "tls.key")
        cert.write_bytes(bundle.cert)
        key.write_bytes(bundle.key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_post(WEBHOOK_PATH, self._mutate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        await self.kube.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": WEBHOOK_NAME},
                "webhooks": [
                    {
                        "name": "mtrainjob.kb.io",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Fail",
                        "timeoutSeconds": 10,
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}{WEBHOOK_PATH}",
                            "caBundle": base64.b64encode(bundle.ca_cert).decode(),
                        },
                        "rules": [
                            {
                                "apiGroups": [c.GROUP],
                                "apiVersions": [c.VERSION],
                                "operations": ["CREATE"],
                                "resources": ["trainjobs"],
                            }
                        ],
                    }
                ],
            },
            "kueue",
            gvr=r.MUTATING_WEBHOOK_CONFIGURATIONS,
        )

    async def _mutate(self, request: web.Request) -> web.Response:
        review = await request.json()
        req = review.get("request") or {}
        obj = req.get("object") or {}
        self.seen_by_webhook.append(str((obj.get("metadata") or {}).get("name")))
        ops: list[dict[str, Any]] = []
        labels = (obj.get("metadata") or {}).get("labels") or {}
        spec = obj.get("spec") or {}
        queue = labels.get(QUEUE_LABEL)
        if queue is not None:
            if self.local_queues.get(queue) and spec.get("managedBy") in (
                None,
                c.MANAGED_BY_TRAINER,
            ):
                ops.append(
                    {"op": "add", "path": "/spec/managedBy", "value": c.MANAGED_BY_MULTIKUEUE}
                )
            ops.append({"op": "add", "path": "/spec/suspend", "value": True})
            # Kueue v0.17.0's webhook, as seen on the test bed: the queue label for the JobSet.
            entry = {"manager": MANAGER, "trainingRuntimeSpec": queued_template(queue)}
            patches = spec.get("runtimePatches")
            if patches is None:
                ops.append({"op": "add", "path": "/spec/runtimePatches", "value": [entry]})
            elif not any(p.get("manager") == MANAGER for p in patches):
                ops.append({"op": "add", "path": "/spec/runtimePatches/-", "value": entry})
        response: dict[str, Any] = {"uid": req.get("uid"), "allowed": True}
        if ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    # --- the controller -----------------------------------------------------------------------
    def _enqueue(self, key: str) -> None:
        self._queue.put_nowait(key)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                await self._reconcile(key)
                await self._schedule()
            except Exception:
                log.exception("kueue emulator: %s", key)
                await asyncio.sleep(0.1)  # backoff before the retry an API error calls for
                self._enqueue(key)
            finally:
                self.changed.set()

    def trainjob(self, key: str) -> dict[str, Any] | None:
        namespace, _, name = key.partition("/")
        return self._informer.get(namespace, name)

    async def _reconcile(self, key: str) -> None:
        obj = self.trainjob(key)
        if obj is None:
            self.workloads.pop(key, None)
            return
        labels = (obj.get("metadata") or {}).get("labels") or {}
        spec = obj.get("spec") or {}
        if QUEUE_LABEL not in labels or spec.get("managedBy") == c.MANAGED_BY_MULTIKUEUE:
            return  # not Kueue's, or the manager copy of a MultiKueue job (see dispatch)
        wl = self.workloads.get(key)
        if wl is None or wl.uid != obj["metadata"]["uid"]:
            wl = Workload(key, obj["metadata"]["uid"], self._next(), await self._pod_sets(obj))
            self.workloads[key] = wl
        if wl.finished:
            return
        for type_, result in (("Complete", "Succeeded"), ("Failed", "Failed")):
            cond = _condition(obj, type_)
            if cond is not None:
                wl.finished, wl.finished_message = result, str(cond.get("message") or "")
                wl.admitted = None
                return
        replicas = sum(ps.replicas for ps in wl.pod_sets)
        statuses = (obj.get("status") or {}).get("jobsStatus") or []
        wl.pods_ready = replicas > 0 and (
            sum(int(s.get("ready") or 0) + int(s.get("succeeded") or 0) for s in statuses)
            >= replicas
        )
        suspended = bool(spec.get("suspend"))
        if wl.evicting:
            if not suspended:
                await self._set_suspend(obj, True)
                return
            if _active(obj) > 0:
                return  # "jobs are still active": wait for jobsStatus to drop to 0
            await self._write_patch(key, None)
            wl.admitted, wl.evicting = None, False
            return
        if wl.admitted is None and not suspended:
            await self._set_suspend(obj, True)  # NotAdmitted

    async def _pod_sets(self, obj: dict[str, Any]) -> list[PodSet]:
        ref = (obj.get("spec") or {}).get("runtimeRef") or {}
        if ref.get("kind", c.KIND_CLUSTER_TRAINING_RUNTIME) == c.KIND_CLUSTER_TRAINING_RUNTIME:
            runtime = await self.kube.get(r.CLUSTER_TRAINING_RUNTIMES, None, ref["name"])
        else:
            runtime = await self.kube.get(
                r.TRAINING_RUNTIMES, obj["metadata"]["namespace"], ref["name"]
            )
        assert runtime is not None, f"runtime {ref} not found"
        return pod_sets_of(obj, runtime)

    def _next(self) -> int:
        self._order += 1
        return self._order

    def usage(self) -> dict[str, dict[str, Quantity]]:
        """Quota in use per flavor (admitted, unfinished workloads)."""
        used: dict[str, dict[str, Quantity]] = {name: {} for name in self.flavors}
        for wl in self.workloads.values():
            for ps in wl.pod_sets:
                flavor = (wl.admitted or {}).get(ps.name)
                if flavor is None:
                    continue
                for res, q in ps.total().items():
                    prev = used[flavor].get(res)
                    used[flavor][res] = q if prev is None else prev + q
        return used

    def _assign(self, wl: Workload) -> dict[str, str] | None:
        used = self.usage()
        assignment: dict[str, str] = {}
        for ps in wl.pod_sets:
            for name in self.flavor_order:
                if name in self.cordoned:
                    continue
                quota = self.flavors[name].quota
                need = ps.total()
                fits = all(
                    (used[name].get(res, Quantity.parse("0")) + need[res]).value
                    <= Quantity.parse(limit).value
                    for res, limit in quota.items()
                    if res in need
                )
                if fits:
                    assignment[ps.name] = name
                    for res, q in need.items():
                        prev = used[name].get(res)
                        used[name][res] = q if prev is None else prev + q
                    break
            else:
                return None
        return assignment

    async def _schedule(self) -> None:
        pending = sorted(
            (
                wl
                for wl in self.workloads.values()
                if wl.admitted is None and not wl.finished and not wl.evicting
            ),
            key=lambda w: w.order,
        )
        for wl in pending:
            obj = self.trainjob(wl.key)
            if obj is None or not (obj.get("spec") or {}).get("suspend"):
                continue
            assignment = self._assign(wl)
            if assignment is None:
                continue  # BestEffortFIFO: later workloads may still fit
            wl.admitted = assignment
            wl.admissions += 1
            await self._write_patch(wl.key, self._pod_set_infos(wl, assignment))
            fresh = await self.kube.get(r.TRAINJOBS, *wl.key.split("/"))
            assert fresh is not None
            await self._set_suspend(fresh, False)

    def _pod_set_infos(self, wl: Workload, assignment: dict[str, str]) -> list[dict[str, Any]]:
        """Kueue's entry: per replicated job, the flavor's placement."""
        out = []
        for ps in wl.pod_sets:
            flavor = self.flavors[assignment[ps.name]]
            pod_spec: dict[str, Any] = {"nodeSelector": dict(flavor.node_labels)}
            if flavor.tolerations:
                pod_spec["tolerations"] = copy.deepcopy(flavor.tolerations)
            if self.gates:
                pod_spec["schedulingGates"] = [{"name": g} for g in self.gates]
            out.append(
                {
                    "name": ps.name,
                    "template": {
                        "spec": {
                            "template": {
                                "metadata": {"labels": {PODSET_LABEL: ps.name}},
                                "spec": pod_spec,
                            }
                        }
                    },
                }
            )
        return out

    async def _write_patch(self, key: str, replicated_jobs: list[dict[str, Any]] | None) -> None:
        """Update Kueue's runtimePatch entry (an Update with the object's resourceVersion,
        retried on conflict, as controller-runtime clients do)."""
        namespace, _, name = key.partition("/")
        for _ in range(20):
            obj = await self.kube.get(r.TRAINJOBS, namespace, name)
            if obj is None:
                return
            patches = (obj.get("spec") or {}).get("runtimePatches") or []
            entry = next((p for p in patches if p.get("manager") == MANAGER), None)
            if entry is None:
                raise RuntimeError("kueue runtime patch not found")
            tmpl_spec: dict[str, Any] = {}
            if replicated_jobs is not None:
                tmpl_spec["replicatedJobs"] = replicated_jobs
            # Kueue sets only the entry's replicated jobs; its JobSet metadata stays.
            template = (entry.get("trainingRuntimeSpec") or {}).get("template") or {}
            entry["trainingRuntimeSpec"] = {"template": {**template, "spec": tmpl_spec}}
            try:
                await self.kube.replace(obj, gvr=r.TRAINJOBS)
                return
            except APIError as exc:
                if not exc.is_conflict:
                    raise
        raise RuntimeError(f"{key}: kept conflicting")

    async def _set_suspend(self, obj: dict[str, Any], suspend: bool) -> None:
        meta = obj["metadata"]
        await self.kube.patch(
            r.TRAINJOBS, meta["namespace"], meta["name"], {"spec": {"suspend": suspend}}
        )

    def _pod_event(self, pod: dict[str, Any]) -> None:
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        ours = [g for g in gates if g.get("name") in self.gates]
        if ours:
            self._tasks.append(asyncio.create_task(self._ungate(pod, gates)))

    async def _ungate(self, pod: dict[str, Any], gates: list[dict[str, Any]]) -> None:
        meta = pod["metadata"]
        keep = [g for g in gates if g.get("name") not in self.gates]
        with contextlib.suppress(APIError):
            await self.kube.patch(
                r.GVR("", "v1", "pods", True, "Pod"),
                meta["namespace"],
                meta["name"],
                [{"op": "replace", "path": "/spec/schedulingGates", "value": keep}],
                content_type="application/json-patch+json",
            )

    # --- what the tests (standing in for Kueue's scheduler and MultiKueue) ask -----------------
    def preempt(self, key: str) -> None:
        """Evict an admitted workload (WorkloadEvicted)."""
        wl = self.workloads[key]
        assert wl.admitted is not None, f"{key} is not admitted"
        wl.evicting = True
        self._enqueue(key)

    def cordon(self, flavor: str, cordoned: bool = True) -> None:
        """Take a flavor out of (or back into) consideration for new admissions."""
        (self.cordoned.add if cordoned else self.cordoned.discard)(flavor)
        for key in self.workloads:
            self._enqueue(key)

    async def dispatch(self, manager_key: str, worker_namespace: str) -> str:
        """MultiKueue: create the worker copy of a manager TrainJob; returns its key."""
        obj = await self.kube.get(r.TRAINJOBS, *manager_key.split("/"))
        assert obj is not None
        meta = obj["metadata"]
        spec = copy.deepcopy(obj["spec"])
        spec.pop("managedBy", None)
        spec.pop("suspend", None)
        spec["runtimePatches"] = [
            p for p in spec.get("runtimePatches") or [] if p.get("manager") != MANAGER
        ] or None
        if spec["runtimePatches"] is None:
            del spec["runtimePatches"]
        labels = {**(meta.get("labels") or {}), ORIGIN_LABEL: "manager"}
        labels[QUEUE_LABEL] = "worker-queue"
        copy_obj = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND_TRAINJOB,
            "metadata": {"name": meta["name"], "namespace": worker_namespace, "labels": labels},
            "spec": spec,
        }
        self.local_queues.setdefault("worker-queue", False)
        await self.kube.create(copy_obj, gvr=r.TRAINJOBS)
        return f"{worker_namespace}/{meta['name']}"

    async def sync_status(self, manager_key: str, worker_key: str) -> None:
        """Copy the worker's whole status onto the manager object."""
        worker = await self.kube.get(r.TRAINJOBS, *worker_key.split("/"))
        assert worker is not None and worker.get("status")
        namespace, _, name = manager_key.partition("/")
        await self.kube.patch(
            r.TRAINJOBS, namespace, name, {"status": worker["status"]}, subresource="status"
        )
