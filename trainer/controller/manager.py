"""The controller process: watch caches, event-to-key mapping, the work queue and workers.

Child objects (JobSets, the snapshot and MPI ConfigMaps and Secrets, PodGroups) map to their
TrainJob through the controller ownerReference; runtime changes re-queue the TrainJobs that
reference them (a TrainJob waiting for a missing runtime starts as soon as it exists).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from trainer.api import constants as c
from trainer.controller.queue import QueueMetrics, ReconcileMetrics, WorkQueue, run_workers
from trainer.controller.reconcile import Caches, Reconciler
from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.rest import Kube
from trainer.runtime.info import SSHKeyPair
from trainer.runtime.sshkeys import generate_ssh_keypair

log = logging.getLogger(__name__)

OWNED_SELECTOR = c.LABEL_TRAINJOB_NAME  # side objects carry it (trainer.runtime.objects)


def owner_key(obj: dict[str, Any]) -> str | None:
    """``namespace/name`` of the TrainJob that controls ``obj``, if any."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == c.KIND_TRAINJOB
            and (str(ref.get("apiVersion", "")).startswith(c.GROUP + "/"))
        ):
            return f"{meta.get('namespace') or 'default'}/{ref.get('name')}"
    return None


def key_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


class Controller:
    """Owns the caches, queue and workers of the TrainJob controller."""

    def __init__(
        self,
        kube: Kube,
        *,
        concurrency: int = 5,
        ssh_keygen: Callable[[], SSHKeyPair] = generate_ssh_keypair,
        now: Callable[[], dt.datetime] | None = None,
        resync_period: float | None = None,
        queue_metrics: QueueMetrics | None = None,
        reconcile_metrics: ReconcileMetrics | None = None,
        feature_gates: dict[str, bool] | None = None,
        status_server_url: str | None = None,
        status_server_secret: tuple[str, str] | None = None,
    ) -> None:
        """With the TrainJobStatus gate on, ``status_server_secret`` (namespace, name) is the
        webhook certificate Secret whose ``ca.crt`` each TrainJob's ``<job>-tls-config``
        carries: it is watched (that one object) and a change re-queues every TrainJob."""
        self.kube = kube
        self.concurrency = concurrency
        self.queue = WorkQueue(name="trainjob", metrics=queue_metrics)
        self.reconcile_metrics = reconcile_metrics
        self.caches = Caches(
            trainjobs=Informer(kube, r.TRAINJOBS, resync_period=resync_period),
            jobsets=Informer(kube, r.JOBSETS),
            config_maps=Informer(kube, r.CONFIGMAPS, label_selector=OWNED_SELECTOR),
            secrets=Informer(kube, r.SECRETS, label_selector=OWNED_SELECTOR),
            cluster_runtimes=Informer(kube, r.CLUSTER_TRAINING_RUNTIMES),
            runtimes=Informer(kube, r.TRAINING_RUNTIMES),
            pod_groups=[
                Informer(kube, r.COSCHEDULING_PODGROUPS, optional=True),
                Informer(kube, r.VOLCANO_PODGROUPS, optional=True),
            ],
            limit_ranges=Informer(kube, r.LIMIT_RANGES),
            runtime_classes=Informer(kube, r.RUNTIME_CLASSES),
        )
        gates = feature_gates or {}
        if gates.get(c.FEATURE_TRAINJOB_STATUS):
            secret = status_server_secret or (
                c.DEFAULT_OPERATOR_NAMESPACE,
                c.DEFAULT_WEBHOOK_SECRET_NAME,
            )
            status_server_secret = secret
            self.caches.status_server_secret = Informer(
                kube, r.SECRETS, secret[0], field_selector=f"metadata.name={secret[1]}"
            )
        self.reconciler = Reconciler(
            kube,
            self.caches,
            ssh_keygen=ssh_keygen,
            now=now,
            feature_gates=gates,
            status_server_url=status_server_url,
            status_server_secret=status_server_secret,
        )
        self._wire()
        self._workers: asyncio.Task[None] | None = None

    def informers(self) -> list[Informer]:
        cs = self.caches
        return [
            cs.trainjobs,
            cs.jobsets,
            cs.config_maps,
            cs.secrets,
            cs.cluster_runtimes,
            cs.runtimes,
            *cs.pod_groups,
            *(inf for inf in (cs.limit_ranges, cs.runtime_classes) if inf is not None),
            *([cs.status_server_secret] if cs.status_server_secret is not None else []),
        ]

    def _wire(self) -> None:
        def trainjob_event(_type: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
            self.queue.add(key_of(obj))

        def child_event(_type: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
            key = owner_key(obj)
            if key is not None:
                self.queue.add(key)

        def runtime_event(_type: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
            meta = obj.get("metadata") or {}
            kind = obj.get("kind") or (
                c.KIND_TRAINING_RUNTIME
                if meta.get("namespace")
                else c.KIND_CLUSTER_TRAINING_RUNTIME
            )
            for job in self.caches.trainjobs.list(meta.get("namespace")):
                ref = (job.get("spec") or {}).get("runtimeRef") or {}
                if (
                    ref.get("name") == meta.get("name")
                    and ref.get("kind", c.KIND_CLUSTER_TRAINING_RUNTIME) == kind
                ):
                    self.queue.add(key_of(job))

        def suspended_in(namespace: str | None) -> list[dict[str, Any]]:
            return [
                job
                for job in self.caches.trainjobs.list(namespace)
                if (job.get("spec") or {}).get("suspend")
            ]

        def limit_range_event(_type: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
            # A suspended TrainJob's PodGroup is re-applied with the new container defaults
            # (a running one's is left alone, so only suspended jobs are worth a reconcile).
            for job in suspended_in((obj.get("metadata") or {}).get("namespace")):
                self.queue.add(key_of(job))

        def runtime_class_event(
            _type: str, obj: dict[str, Any], _old: dict[str, Any] | None
        ) -> None:
            name = (obj.get("metadata") or {}).get("name")
            for job in suspended_in(None):
                if name in self._runtime_classes_of(job):
                    self.queue.add(key_of(job))

        self.caches.trainjobs.add_handler(trainjob_event)
        if self.caches.limit_ranges is not None:
            self.caches.limit_ranges.add_handler(limit_range_event)
        if self.caches.runtime_classes is not None:
            self.caches.runtime_classes.add_handler(runtime_class_event)
        for informer in (
            self.caches.jobsets,
            self.caches.config_maps,
            self.caches.secrets,
            *self.caches.pod_groups,
        ):
            informer.add_handler(child_event)

        def status_secret_event(
            _type: str, _obj: dict[str, Any], _old: dict[str, Any] | None
        ) -> None:
            # A new or rotated CA: every TrainJob's tls-config (and a build that failed for
            # want of the Secret) is due again.
            for job in self.caches.trainjobs.list():
                self.queue.add(key_of(job))

        if self.caches.status_server_secret is not None:
            self.caches.status_server_secret.add_handler(status_secret_event)
        self.caches.cluster_runtimes.add_handler(runtime_event)
        self.caches.runtimes.add_handler(runtime_event)

    def _runtime_classes_of(self, job: dict[str, Any]) -> set[str]:
        """``runtimeClassName`` values in the pod templates of ``job``'s runtime and in its
        runtimePatches."""
        meta = job.get("metadata") or {}
        spec = job.get("spec") or {}
        ref = spec.get("runtimeRef") or {}
        if ref.get("kind", c.KIND_CLUSTER_TRAINING_RUNTIME) == c.KIND_CLUSTER_TRAINING_RUNTIME:
            runtime = self.caches.cluster_runtimes.get(None, str(ref.get("name")))
        else:
            runtime = self.caches.runtimes.get(meta.get("namespace"), str(ref.get("name")))
        names: set[str] = set()

        def walk(value: Any) -> None:
            if isinstance(value, dict):
                found = value.get("runtimeClassName")
                if isinstance(found, str):
                    names.add(found)
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(((runtime or {}).get("spec") or {}).get("template"))
        walk(spec.get("runtimePatches"))
        return names

    async def start_caches(self, timeout: float | None = 60.0) -> None:
        """Start every watch cache and wait until each has listed once."""
        await asyncio.gather(*(inf.start(timeout=timeout) for inf in self.informers()))

    def start_workers(self) -> None:
        """Start reconciling (only the leader does this)."""
        if self._workers is None:
            self._workers = asyncio.create_task(
                run_workers(
                    self.queue,
                    self.reconciler.reconcile,
                    self.concurrency,
                    metrics=self.reconcile_metrics,
                ),
                name="trainjob-workers",
            )
            for job in self.caches.trainjobs.list():
                self.queue.add(key_of(job))

    async def stop(self) -> None:
        self.queue.shutdown()
        if self._workers is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._workers
            self._workers = None
        await asyncio.gather(*(inf.stop() for inf in self.informers()), return_exceptions=True)
