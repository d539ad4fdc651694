"""The disruption controller of the local executor: the I/O around its policy.

It keeps each PodDisruptionBudget's status (what the eviction subresource of the API server
reads and decrements, :mod:`trainer.local.apiserver.core.eviction`) as kube-controller-manager's
disruption controller does (docs/local-plane.md, "Disruption budgets and evictions").
:meth:`DisruptionController.reconcile` reads the budget and the pods from the executor's watch
caches, GETs the workloads whose scale a percentage or ``maxUnavailable`` needs (a
ReplicationController, ReplicaSet, Deployment or StatefulSet: upstream reads them from its
listers and reacts to pods and budgets only, as here), asks
:func:`~trainer.local.executor.disruption_core.sync` what the status is, and writes it with a
PUT of ``/status`` on the budget's resourceVersion. A 409 (the API server granted an eviction
meanwhile) is not a failure, as upstream: the watch event of that write syncs the budget
again; an entry of
``disruptedPods`` that is due to expire brings the budget back through
``Result(requeue_after=...)``.

:func:`budgets_for_pod` says which budgets a pod event queues (the runner wires it).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from trainer.kube.events import Recorder
from trainer.kube.informer import Informer
from trainer.kube.resources import POD_DISRUPTION_BUDGETS, SCALED_WORKLOADS
from trainer.kube.rest import APIError, Kube
from trainer.local.executor import disruption_core as core
from trainer.machinery import disruption as pdbs
from trainer.machinery.workqueue import Result

log = logging.getLogger(__name__)


def budgets_for_pod(budgets: Informer, pod: dict[str, Any]) -> list[str]:
    """``namespace/name`` of the budgets that cover ``pod`` (``getPdbForPod``; every one, where
    upstream queues the first only)."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    return [
        f"{namespace}/{b['metadata']['name']}"
        for b in pdbs.budgets_of(budgets.list(namespace), pod)
    ]


def _served(obj: dict[str, Any]) -> dict[str, Any]:
    """The budget with its apiVersion and kind (an Event names its object by them)."""
    return {**obj, "apiVersion": POD_DISRUPTION_BUDGETS.api_version, "kind": "PodDisruptionBudget"}


class DisruptionController:
    """Syncs one budget at a time (the executor's work queue calls :meth:`reconcile`)."""

    def __init__(self, kube: Kube, budgets: Informer, pods: Informer) -> None:
        self.kube = kube
        self.budgets = budgets
        self.pods = pods
        self.events = Recorder(kube, core.COMPONENT)

    async def _controllers(
        self, namespace: str, pods: list[core.Obj]
    ) -> dict[tuple[str, str, str], dict[str, Any]]:
        """The workloads :func:`~.disruption_core.scale_targets` names (and the Deployments of
        their ReplicaSets), read now; one that is not there is left out."""
        found: dict[tuple[str, str, str], dict[str, Any]] = {}

        async def read(targets: set[tuple[str, str, str]]) -> None:
            for group, kind, name in sorted(targets - set(found)):
                try:
                    obj = await self.kube.get(SCALED_WORKLOADS[(group, kind)], namespace, name)
                except APIError as exc:
                    if exc.status != 404:  # not served here, or not there: not found
                        raise
                    continue
                if obj is not None:
                    found[(group, kind, name)] = obj

        await read(core.scale_targets(pods))
        await read(core.owner_targets(o for (_, k, _), o in found.items() if k == "ReplicaSet"))
        return found

    async def reconcile(self, namespace: str, name: str) -> Result | None:
        pdb = self.budgets.get(namespace, name)
        if pdb is None:
            return None
        pods = self.pods.list(namespace)
        controllers: dict[tuple[str, str, str], dict[str, Any]] = {}
        if core.needs_scale(pdb):
            try:
                selected = core.selected_pods(pdb, pods)
            except core.SyncError:
                selected = []
            controllers = await self._controllers(namespace, selected)
        outcome = core.sync(
            _served(pdb),
            pods,
            lambda group, kind, obj_name: controllers.get((group, kind, obj_name)),
            dt.datetime.now(dt.UTC),
        )
        for obj, type_, reason, message in outcome.events:
            # The budget is served with its kind; a pod from the cache may lack it.
            self.events.emit({"apiVersion": "v1", "kind": "Pod", **obj}, type_, reason, message)
        if outcome.status is not None:
            body = {**_served(pdb), "status": outcome.status}
            try:
                written = await self.kube.replace(
                    body, gvr=POD_DISRUPTION_BUDGETS, subresource="status"
                )
            except APIError as exc:
                if exc.is_not_found:
                    return None
                if exc.is_conflict:
                    # A write landed first (an eviction granted): its watch event queues the
                    # budget again, and that sync reads it.
                    log.debug("PodDisruptionBudget %s/%s changed meanwhile", namespace, name)
                    return None
                raise
            self.budgets.record_write(written)
        if outcome.recheck_after is not None:
            return Result(requeue_after=max(outcome.recheck_after, 0.0))
        return None
