"""The controller process: watch caches, event-to-key mapping, the work queue and workers.

The controller's own caches: TrainJobs, the runtimes (a change re-queues the TrainJobs that
reference them, so one waiting for a missing runtime starts as soon as it exists), JobSets and
the ConfigMaps and Secrets builds create (those map to their TrainJob through the controller
ownerReference). Every other cache comes from the plugins' declared watches
(:meth:`trainer.runtime.framework.Framework.watches`): one cache per distinct kind, namespace
and selectors, one handler per distinct enqueue rule (:mod:`trainer.controller.handlers`).
No plugin is named here.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from trainer.api import constants as c
from trainer.controller.failures import FailedPods, slim_pod
from trainer.controller.handlers import (
    enqueue_owner,
    enqueue_runtime_users,
    enqueue_self,
    handler_for,
    live_runtime,
    owner_key,
    trainjob_key,
)
from trainer.controller.reconcile import Caches, Reconciler, build_context
from trainer.jobset import contract as jsc
from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.rest import Kube
from trainer.machinery.workqueue import QueueMetrics, ReconcileMetrics, WorkQueue, run_workers
from trainer.manager.runnable import RunnableFunc, Stage
from trainer.plugins.registry import framework_for
from trainer.runtime.framework import Framework
from trainer.runtime.info import SSHKeyPair
from trainer.runtime.sshkeys import generate_ssh_keypair
from trainer.runtime.watch import ByOwner, Enqueue, Kind, Watch

log = logging.getLogger(__name__)

OWNED_SELECTOR = c.LABEL_TRAINJOB_NAME  # side objects carry it (trainer.runtime.objects)

__all__ = ["Controller", "owner_key", "trainjob_key"]


def _gvr(watch: Watch) -> r.GVR:
    kind = watch.kind
    return r.GVR(kind.group, kind.version, kind.plural, kind.namespaced, kind.kind)


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
        framework: Framework | None = None,
        on_ttl_deletion: Callable[[float], None] | None = None,
    ) -> None:
        """With the TrainJobStatus gate on, ``status_server_secret`` (namespace, name) is the
        webhook certificate Secret whose ``ca.crt`` each TrainJob's ``<job>-tls-config``
        carries (its plugin watches that one object). ``framework``: the plugins (default: the
        registry's for ``feature_gates``)."""
        self.kube = kube
        self.concurrency = concurrency
        self.queue = WorkQueue(name="trainjob", metrics=queue_metrics)
        self.reconcile_metrics = reconcile_metrics
        ctx = build_context(
            ssh_keygen=ssh_keygen,
            feature_gates=feature_gates,
            status_server_url=status_server_url,
            status_server_secret=status_server_secret,
        )
        framework = framework or framework_for(ctx)
        self.caches = Caches(
            trainjobs=Informer(kube, r.TRAINJOBS, resync_period=resync_period),
            jobsets=Informer(kube, r.JOBSETS),
            config_maps=Informer(kube, r.CONFIGMAPS, label_selector=OWNED_SELECTOR),
            secrets=Informer(kube, r.SECRETS, label_selector=OWNED_SELECTOR),
            cluster_runtimes=Informer(kube, r.CLUSTER_TRAINING_RUNTIMES),
            runtimes=Informer(kube, r.TRAINING_RUNTIMES),
            # Why a TrainJob failed (trainer/controller/failures.py): JobSets' pods, slimmed.
            pods=Informer(kube, r.PODS, label_selector=jsc.LABEL_JOBSET_NAME, transform=slim_pod),
        )
        self.failed_pods = FailedPods()
        self.reconciler = Reconciler(
            kube,
            self.caches,
            ctx=ctx,
            framework=framework,
            now=now,
            on_ttl_deletion=on_ttl_deletion,
            failed_pods=self.failed_pods,
        )
        self._watch(self.reconciler.watches)
        self._wire()
        self._workers: asyncio.Task[None] | None = None

    def informers(self) -> list[Informer]:
        return self.caches.informers()

    def _watch(self, watches: list[Watch]) -> None:
        """A cache for each declared watch (shared by watches of the same kind, namespace and
        selectors, and with the controller's own), and one handler per distinct rule on it."""
        cs = self.caches
        by_key: dict[tuple[Any, ...], Informer] = {}
        for own in (cs.config_maps, cs.secrets):
            g = own.gvr
            kind = Kind(g.group, g.version, g.plural, g.kind, g.namespaced)
            by_key[(kind, own.namespace, own.label_selector, own.field_selector)] = own
        # The controller's own side-object caches already map events by owner (:meth:`_wire`).
        wired: dict[int, list[Enqueue]] = {
            id(cs.config_maps): [ByOwner()],
            id(cs.secrets): [ByOwner()],
        }
        for watch in watches:
            key = watch.cache_key
            informer = by_key.get(key)
            if informer is None:
                informer = Informer(
                    self.kube,
                    _gvr(watch),
                    watch.namespace,
                    watch.label_selector,
                    field_selector=watch.field_selector,
                    optional=watch.optional,
                    # Not served: listed again only once an apply of ours shows it is (the
                    # reconcile applying a PodGroup records it here), not every 30 s meanwhile.
                    discovery_interval=None,
                )
                by_key[key] = informer
            cs.watched[watch.name] = informer
            rules = wired.setdefault(id(informer), [])
            if watch.enqueue not in rules:
                rules.append(watch.enqueue)
                informer.add_handler(
                    handler_for(watch.enqueue, self.queue.add, cs.trainjobs, self._runtime_of)
                )

    def _runtime_of(self, job: dict[str, Any]) -> dict[str, Any] | None:
        return live_runtime(job, self.caches.cluster_runtimes, self.caches.runtimes)

    def _wire(self) -> None:
        cs = self.caches
        cs.trainjobs.add_handler(enqueue_self(self.queue.add))
        owner = enqueue_owner(self.queue.add)
        for informer in (cs.jobsets, cs.config_maps, cs.secrets):
            informer.add_handler(owner)
        if cs.pods is not None:
            failed = self.failed_pods

            def on_pod(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
                concerned = failed(kind, obj, old)
                if concerned is not None:  # the JobSet, and so the TrainJob, has its name
                    self.queue.add(f"{concerned[0]}/{concerned[1]}")

            cs.pods.add_handler(on_pod)
        users = enqueue_runtime_users(self.queue.add, cs.trainjobs)
        cs.cluster_runtimes.add_handler(users)
        cs.runtimes.add_handler(users)

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
                self.queue.add(trainjob_key(job))

    def runnables(self) -> tuple[RunnableFunc, RunnableFunc]:
        """The controller as runnables of a manager (docs/design.md, "The manager"): its
        watch caches (synced before the next stage starts) and its workers, which only the
        leader runs."""
        synced = asyncio.Event()

        async def caches(stop: asyncio.Event) -> None:
            try:
                await self.start_caches()
                synced.set()
                await stop.wait()
            finally:
                await self.stop_caches()

        async def workers(stop: asyncio.Event) -> None:
            self.start_workers()
            try:
                await stop.wait()
            finally:
                await self.stop_workers()

        return (
            RunnableFunc("caches", Stage.CACHES, caches, started=synced),
            RunnableFunc("trainjob-controller", Stage.LEADER, workers),
        )

    async def stop_workers(self) -> None:
        """Shut the queue down and wait for the workers to finish what they hold."""
        self.queue.shutdown()
        if self._workers is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._workers
            self._workers = None

    async def stop_caches(self) -> None:
        await asyncio.gather(*(inf.stop() for inf in self.informers()), return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_workers()
        await self.stop_caches()
