"""The local plane's Deployment, ReplicaSet and EndpointSlice controllers (docs/local-plane.md,
"Workloads and Services"): what a production install of this project needs to run on the
local plane (its controller Deployment and webhook Service).

Each reads the executor's watch caches and writes through its client; what to do is decided
by :mod:`~trainer.local.executor.workloads_core` and :mod:`~trainer.local.executor.endpoints`.
A reconcile that raises is retried by the executor's work queue with back-off; a readiness
deadline (``minReadySeconds``) comes back as a :class:`~trainer.machinery.workqueue.Result`.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from trainer.kube.events import NORMAL
from trainer.kube.informer import Informer
from trainer.kube.resources import DEPLOYMENTS, ENDPOINT_SLICES, PODS, REPLICASETS
from trainer.kube.rest import APIError, Kube
from trainer.local.executor import endpoints
from trainer.local.executor import workloads_core as core
from trainer.local.executor.api import create_pods, recorder
from trainer.machinery.labels import (
    ENDPOINTSLICE_CONTROLLER,
    ENDPOINTSLICE_MANAGED_BY,
    SERVICE_NAME,
    map_selector_matches,
)
from trainer.machinery.times import now
from trainer.machinery.workqueue import Result

log = logging.getLogger(__name__)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ReplicaSetController:
    """Keeps ``spec.replicas`` active pods of each ReplicaSet and writes its status."""

    def __init__(self, kube: Kube, replicasets: Informer, pods: Informer) -> None:
        self.kube, self.replicasets, self.pods = kube, replicasets, pods
        self.events = recorder(kube, "replicaset-controller")

    async def reconcile(self, namespace: str, name: str) -> Result | None:
        rs = self.replicasets.get(namespace, name)
        if rs is None or core.meta(rs).get("deletionTimestamp"):
            return None
        pods = [p for p in self.pods.by_owner_uid(core.meta(rs)["uid"]) if core.is_active(p)]
        diff = core.spec_replicas(rs) - len(pods)
        if diff > 0:
            bodies = [core.new_pod(rs) for _ in range(diff)]
            pods += await create_pods(self.kube, self.pods, self.events, rs, bodies)
        elif diff < 0:
            for pod in core.pods_to_delete(pods, -diff):
                pod_name = core.meta(pod)["name"]
                try:
                    await self.kube.delete(PODS, namespace, pod_name)
                except APIError as exc:
                    if not exc.is_not_found:
                        raise
                self.events.emit(rs, NORMAL, "SuccessfulDelete", f"Deleted pod: {pod_name}")
                pods = [p for p in pods if core.meta(p)["name"] != pod_name]
        clock = _utcnow()
        status = core.replicaset_status(rs, pods, clock)
        if status != (rs.get("status") or {}):
            try:
                written = await self.kube.patch_status(
                    REPLICASETS, namespace, name, {"status": _replacing(rs, status)}
                )
            except APIError as exc:
                if not exc.is_not_found:
                    raise
            else:
                self.replicasets.record_write(written, notify=True)
        return _available_deadline(rs, pods, clock)


def _replacing(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """A merge patch that makes the status ``status``: fields it no longer has are nulled
    (omitted zero counts, as the API leaves them out)."""
    return {**{k: None for k in obj.get("status") or {} if k not in status}, **status}


def _available_deadline(
    rs: dict[str, Any], pods: list[dict[str, Any]], clock: dt.datetime
) -> Result | None:
    """With ``minReadySeconds``, come back when the next ready pod turns available."""
    min_ready = int((rs.get("spec") or {}).get("minReadySeconds") or 0)
    if min_ready <= 0:
        return None
    waits = [
        (at - clock).total_seconds()
        for p in pods
        if (at := core.available_at(p, min_ready)) is not None and at > clock
    ]
    return Result(requeue_after=min(waits) + 0.05) if waits else None


class DeploymentController:
    """Rolls each Deployment's pods through ReplicaSets and writes its status."""

    def __init__(self, kube: Kube, deployments: Informer, replicasets: Informer) -> None:
        self.kube, self.deployments, self.replicasets = kube, deployments, replicasets
        self.events = recorder(kube, "deployment-controller")

    async def reconcile(self, namespace: str, name: str) -> None:
        deployment = self.deployments.get(namespace, name)
        if deployment is None or core.meta(deployment).get("deletionTimestamp"):
            return
        selector = (deployment.get("spec") or {}).get("selector")
        sets = [
            rs
            for rs in self.replicasets.by_owner_uid(core.meta(deployment)["uid"])
            if not core.meta(rs).get("deletionTimestamp")
        ]
        plan = core.plan_deployment(deployment, sets, now())
        if plan.create is not None:
            try:
                created = await self.kube.create(plan.create, gvr=REPLICASETS)
            except APIError as exc:
                if not exc.is_already_exists:
                    raise
                await self._collision(deployment, plan.create)
                return
            self.replicasets.record_write(created, notify=True)
            self.events.emit(
                deployment,
                NORMAL,
                "ScalingReplicaSet",
                f"Scaled up replica set {created['metadata']['name']} from 0 to "
                f"{core.spec_replicas(created)}",
            )
        for rs_name, replicas in plan.scale.items():
            rs = next(r for r in sets if core.meta(r)["name"] == rs_name)
            annotations = {core.DESIRED_REPLICAS: str(core.spec_replicas(deployment))}
            written = await self.kube.patch(
                REPLICASETS,
                namespace,
                rs_name,
                {"metadata": {"annotations": annotations}, "spec": {"replicas": replicas}},
            )
            self.replicasets.record_write(written, notify=True)
            self.events.emit(
                deployment,
                NORMAL,
                "ScalingReplicaSet",
                core.scale_message(rs, core.spec_replicas(rs), replicas),
            )
        for rs_name in plan.delete:
            try:
                await self.kube.delete(REPLICASETS, namespace, rs_name)
            except APIError as exc:
                if not exc.is_not_found:
                    raise
        if plan.annotate_revision is not None:
            written = await self.kube.patch(
                DEPLOYMENTS,
                namespace,
                name,
                {"metadata": {"annotations": {core.REVISION: plan.annotate_revision}}},
            )
            self.deployments.record_write(written, notify=True)
            deployment = written
        if plan.status != (deployment.get("status") or {}) and selector is not None:
            written = await self.kube.patch_status(
                DEPLOYMENTS, namespace, name, {"status": _replacing(deployment, plan.status)}
            )
            self.deployments.record_write(written, notify=True)

    async def _collision(self, deployment: dict[str, Any], wanted: dict[str, Any]) -> None:
        """A ReplicaSet of that name exists and is not this template's: count a collision,
        so the next hash differs (``status.collisionCount``), unless it is ours after all
        (our cache was behind)."""
        meta = core.meta(wanted)
        existing = await self.kube.get(REPLICASETS, meta["namespace"], meta["name"])
        if existing is None:
            return  # gone again: the next reconcile creates it
        if core.same_template(existing, deployment) and core.meta(existing).get(
            "ownerReferences"
        ) == meta.get("ownerReferences"):
            self.replicasets.record_write(existing, notify=True)
            return
        count = int((deployment.get("status") or {}).get("collisionCount") or 0) + 1
        d = core.meta(deployment)
        written = await self.kube.patch_status(
            DEPLOYMENTS, d["namespace"], d["name"], {"status": {"collisionCount": count}}
        )
        self.deployments.record_write(written, notify=True)


class EndpointSliceController:
    """Keeps one EndpointSlice per selecting Service: its pods' addresses, readiness and
    ports (:mod:`~trainer.local.executor.endpoints`)."""

    def __init__(self, kube: Kube, services: Informer, slices: Informer, pods: Informer) -> None:
        self.kube, self.services, self.slices, self.pods = kube, services, slices, pods
        self._selectors: dict[str, dict[str, dict[str, Any]]] = {}
        """namespace -> Service name -> selector, of the Services this controller serves."""

    def notice_service(self, service: dict[str, Any], deleted: bool = False) -> None:
        """Keep the index of selecting Services. Headless Services (``clusterIP: None``, as
        every JobSet's) get no slice: the local plane resolves their pods' names itself
        (docs/local-plane.md, "The network sandbox"), and a pod event is not made to look at
        thousands of them."""
        meta = core.meta(service)
        spec = service.get("spec") or {}
        space = self._selectors.setdefault(str(meta.get("namespace", "")), {})
        if deleted or not spec.get("selector") or spec.get("clusterIP") == "None":
            space.pop(str(meta.get("name", "")), None)
        else:
            space[str(meta.get("name", ""))] = dict(spec["selector"])

    def services_selecting(self, pod: dict[str, Any]) -> list[str]:
        """Keys of the Services whose selector matches ``pod`` (to queue on a pod change)."""
        meta = core.meta(pod)
        namespace = str(meta.get("namespace", ""))
        labels = meta.get("labels") or {}
        return [
            f"{namespace}/{name}"
            for name, selector in (self._selectors.get(namespace) or {}).items()
            if map_selector_matches(selector, labels)
        ]

    async def reconcile(self, namespace: str, name: str) -> None:
        service = self.services.get(namespace, name)
        owned = [
            s
            for s in self.slices.list(namespace)
            if (core.meta(s).get("labels") or {}).get(SERVICE_NAME) == name
            and (core.meta(s).get("labels") or {}).get(ENDPOINTSLICE_MANAGED_BY)
            == ENDPOINTSLICE_CONTROLLER
        ]
        spec = (service or {}).get("spec") or {}
        selector = spec.get("selector")
        if (
            service is None
            or core.meta(service).get("deletionTimestamp")
            or not selector
            or spec.get("clusterIP") == "None"
        ):
            return  # the garbage collector removes a deleted Service's slices (owner refs)
        pods = [
            p
            for p in self.pods.list(namespace)
            if map_selector_matches(selector, core.meta(p).get("labels") or {})
        ]
        wanted = endpoints.endpoint_slice(service, pods)
        if owned:
            first, extra = owned[0], owned[1:]
            if endpoints.differs(first, wanted):
                written = await self.kube.patch(
                    ENDPOINT_SLICES,
                    namespace,
                    core.meta(first)["name"],
                    {k: wanted[k] for k in ("endpoints", "ports", "addressType")},
                )
                self.slices.record_write(written, notify=True)
            for slice_ in extra:
                await self.kube.delete(ENDPOINT_SLICES, namespace, core.meta(slice_)["name"])
        else:
            created = await self.kube.create(wanted, gvr=ENDPOINT_SLICES)
            self.slices.record_write(created, notify=True)
