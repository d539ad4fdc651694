"""The executor: watch caches, the JobSet and Job controllers and the kubelet, on the same
plumbing as the controller: one REST client (:class:`~trainer.kube.rest.Kube`), watch caches
(:class:`~trainer.kube.informer.Informer`) and work queues
(:class:`~trainer.machinery.workqueue.WorkQueue`). A change to a Pod queues its Job, a change
to a Job its JobSet; a reconcile that fails is retried with per-key exponential back-off, as
the controller's are, and a deadline comes back through ``add_after``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from trainer.jobset import contract as jc
from trainer.kube.client import another_client
from trainer.kube.informer import Informer
from trainer.kube.resources import JOBS, JOBSETS, PODS, SERVICES, TRAINJOBS
from trainer.kube.rest import APIError, Kube
from trainer.local.executor.controllers.job import JobController
from trainer.local.executor.controllers.jobset import JobSetController
from trainer.local.executor.node.config import NodeConfig
from trainer.local.executor.roles import JOB_CONTROLLER, JOBSET_CONTROLLER, KUBELET, SCHEDULER
from trainer.local.executor.simulation.config import Simulation
from trainer.local.executor.simulation.kubelet import stage_keys
from trainer.machinery.owners import controller_of
from trainer.machinery.workqueue import Result, WorkQueue, run_workers

log = logging.getLogger(__name__)

WORKERS = 1
"""Workers per queue (Jobs, JobSets). One each, as the executor's loop had: the executor shares
its event loop with the API server and the controller, and more workers took the controller's
share during a burst (hack/bench/localplane.py: 300 TrainJobs to JobSets in a median 12.4 s
with 4 workers against 10.5 s before, back to back; with 1 worker 12.3 s against 11.9 s)."""


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _owner(obj: dict[str, Any], kind: str) -> str | None:
    ref = controller_of(obj, kind)
    return str(ref.get("name")) if ref is not None else None


class Executor:
    """The local plane's executor on ``kube`` (its own client: see
    :func:`~trainer.local.executor.api.executor_kube`; the caller closes it). ``workers``
    per queue (Jobs, JobSets): :data:`WORKERS` where it shares its event loop with the API
    server and the controller; more where it runs alone and waits on round trips (the
    simulation benchmark runs it in a process of its own with 8, as kube-controller-manager
    syncs 5 Jobs at once). ``without`` names roles (:mod:`~trainer.local.executor.roles`) it
    leaves to the real programs; ``kubelet=False`` switches off the kubelet and the scheduler."""

    def __init__(
        self,
        kube: Kube,
        *,
        workdir: Path,
        state_dir: Path,
        on_log: Callable[[str, str, str], None] | None = None,
        kubelet: bool = True,
        ready_timeout: float | None = None,
        plane_ports: tuple[int, ...] = (),
        allow_exposed_ports: bool = False,
        node_config: NodeConfig | None = None,
        simulation: Simulation | None = None,
        workers: int = WORKERS,
        without: frozenset[str] = frozenset(),
    ) -> None:
        self.kube = kube
        self.without = without
        self.workers = workers
        self.node_config = node_config
        self.simulation = simulation
        self.jobsets = Informer(kube, JOBSETS)
        self.jobs = Informer(kube, JOBS)
        self.pods = Informer(kube, PODS)
        self.services = Informer(kube, SERVICES)
        # Simulated stages may be chosen by a TrainJob's labels (docs/simulation.md): a slim
        # watch of TrainJobs, only with --simulate.
        self.trainjobs = (
            Informer(kube, TRAINJOBS, transform=stage_keys, optional=True)
            if simulation is not None
            else None
        )
        self.jobset_controller = JobSetController(
            kube,
            self.jobsets,
            self.jobs,
            self.services,
            pods=self.pods,
            ready_timeout=ready_timeout,
        )
        self.job_controller = JobController(kube, self.jobs, self.pods)
        self.jobset_queue = WorkQueue("jobset")
        self.job_queue = WorkQueue("job")
        self.workdir, self.state_dir, self.on_log = workdir, state_dir, on_log
        self.run_kubelet = kubelet and KUBELET not in without
        self.run_scheduler = kubelet and SCHEDULER not in without
        self.plane_ports, self.allow_exposed_ports = plane_ports, allow_exposed_ports
        self._tasks: list[asyncio.Task[Any]] = []
        self._ttl: set[str] = set()
        self.kubelet: Any = None
        self.scheduler: Any = None
        self.sim_kubelet: Any = None
        self._sim_api: Any = None

    @property
    def informers(self) -> tuple[Informer, ...]:
        extra = (self.trainjobs,) if self.trainjobs is not None else ()
        return (self.jobsets, self.jobs, self.pods, self.services, *extra)

    @property
    def queues(self) -> tuple[tuple[WorkQueue, Callable[[str, str], Awaitable[Any]]], ...]:
        """Each work queue and the reconcile its workers call (the Job and JobSet queues
        only where their controllers run here)."""
        own: tuple[tuple[WorkQueue, Callable[[str, str], Awaitable[Any]]], ...] = ()
        if JOB_CONTROLLER not in self.without:
            own += ((self.job_queue, self.job_controller.reconcile),)
        if JOBSET_CONTROLLER not in self.without:
            own += ((self.jobset_queue, self.jobset_controller.reconcile),)
        return own

    def _wire(self) -> None:
        jobs_here = JOB_CONTROLLER not in self.without
        jobsets_here = JOBSET_CONTROLLER not in self.without

        def on_jobset(_event: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
            meta = obj.get("metadata") or {}
            self.jobset_queue.add(_key(meta.get("namespace", ""), meta.get("name", "")))
            self._maybe_ttl(obj)

        def on_job(_event: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
            meta = obj.get("metadata") or {}
            if jobs_here:
                self.job_queue.add(_key(meta.get("namespace", ""), meta.get("name", "")))
            owner = _owner(obj, jc.KIND)
            if owner and jobsets_here:
                self.jobset_queue.add(_key(meta.get("namespace", ""), owner))

        def on_pod(_event: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
            namespace = (obj.get("metadata") or {}).get("namespace", "")
            owner = _owner(obj, "Job")
            if owner and jobs_here:
                self.job_queue.add(_key(namespace, owner))

        if jobsets_here:
            self.jobsets.add_handler(on_jobset)
        self.jobs.add_handler(on_job)
        self.pods.add_handler(on_pod)

    def _maybe_ttl(self, js: dict[str, Any]) -> None:
        ttl = (js.get("spec") or {}).get("ttlSecondsAfterFinished")
        meta = js.get("metadata") or {}
        if (
            ttl is None
            or not (js.get("status") or {}).get("terminalState")
            or meta.get("uid") in self._ttl
        ):
            return
        self._ttl.add(meta["uid"])

        async def expire() -> None:
            await asyncio.sleep(float(ttl))
            try:
                await self.kube.delete(JOBSETS, meta["namespace"], meta["name"], "Foreground")
            except APIError as exc:
                log.warning("TTL deletion of JobSet %s failed: %s", meta["name"], exc)

        self._tasks.append(asyncio.create_task(expire()))

    async def start(self) -> None:
        self._wire()
        # The handlers are in place before the first lists: everything listed is queued.
        await asyncio.gather(*(informer.start() for informer in self.informers))
        for queue, reconcile in self.queues:
            self._tasks.append(
                asyncio.create_task(
                    run_workers(queue, self._reconciler(reconcile), self.workers, logger=log),
                    name=f"executor-{queue.name}",
                )
            )
        simulation = self.simulation
        if self.run_kubelet and (simulation is None or simulation.with_host_node):
            from trainer.local.executor.kubelet.kubelet import Kubelet  # noqa: PLC0415 - optional part

            self.kubelet = Kubelet(
                self.kube,
                pods=self.pods,
                workdir=self.workdir,
                state_dir=self.state_dir,
                on_log=self.on_log,
                plane_ports=self.plane_ports,
                allow_exposed_ports=self.allow_exposed_ports,
                node_config=self.node_config,
            )
            self._tasks.append(asyncio.create_task(self.kubelet.run(), name="kubelet"))
        if self.run_kubelet and simulation is not None:
            # docs/simulation.md: without the host's node (withHostNode: false) the real
            # kubelet is not started, so no Node ``local`` is registered and nothing binds there.
            from trainer.local.executor.simulation.kubelet import SimKubelet  # noqa: PLC0415

            # Its own connections: a thousand pods bound at once must not queue the Job and
            # JobSet controllers' requests behind their status writes (docs/simulation.md).
            self._sim_api = another_client(self.kube.api, "trainer-sim-kubelet/0.1.0")
            sim_kube = Kube(
                self._sim_api, timeout=self.kube.timeout, on_request=self.kube.on_request
            )
            self.sim_kubelet = SimKubelet(sim_kube, self.pods, simulation, trainjobs=self.trainjobs)
            self._tasks.append(asyncio.create_task(self.sim_kubelet.run(), name="sim-kubelet"))
        if self.run_scheduler:
            from trainer.local.executor.scheduler.scheduler import Scheduler  # noqa: PLC0415

            config = self.node_config
            self.scheduler = Scheduler(
                self.kube,
                self.pods,
                self.jobsets,
                all_or_nothing=config.all_or_nothing if config is not None else True,
            )
            self._tasks.append(asyncio.create_task(self.scheduler.run(), name="scheduler"))

    @staticmethod
    def _reconciler(
        reconcile: Callable[[str, str], Awaitable[Result | None]],
    ) -> Callable[[str], Awaitable[Result | None]]:
        async def handle(key: str) -> Result | None:
            return await reconcile(*_split(key))

        return handle

    async def stop(self) -> None:
        if self.kubelet is not None:
            await self.kubelet.stop()
        for queue, _ in self.queues:
            queue.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for informer in self.informers:
            await informer.stop()
        if self._sim_api is not None:
            await self._sim_api.close()
