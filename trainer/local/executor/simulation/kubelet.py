"""Simulated nodes and their kubelet (docs/simulation.md): Nodes registered from
``--simulate``'s templates, their Leases renewed, and every pod bound to one of them moved
through its lifecycle without a process, as KWOK does.

A pod bound to a simulated node is reported ``Running`` (PodScheduled, Initialized,
ContainersReady and Ready True; each container running since now; init containers
terminated ``Completed``), then, after its stage's duration (with jitter), ``Succeeded``
(exit 0, ``Completed``) or, with the stage's failure probability, ``Failed`` (the stage's exit
code, ``Error``). ``restartPolicy`` OnFailure / Always restart it in place instead (restartCount
+ 1, the ended run as ``lastState``), as the real kubelet does. ``activeDeadlineSeconds`` fails
it (``DeadlineExceeded``); a ``deletionTimestamp`` ends it (exit 143, an Event ``Killing``).

The labels or annotations of a pod, or of its TrainJob, override its stage:
``trainer.kubeflow.org/sim-duration`` (``30s``), ``.../sim-fail-probability`` (``0.1``),
``.../sim-exit-code`` (``3``). The TrainJob is the one the pod's JobSet is named after (a
JobSet is named after its TrainJob); its ``sim-*`` keys come from a watch of TrainJobs that
keeps nothing else.

One task renews every simulated node's Lease (in batches), one loop holds every pod's next
deadline in a heap: the cost is API writes, not tasks or processes. The status itself is
:func:`sim_status`, pure, built with :mod:`~trainer.local.executor.kubelet.policy.pod_status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from trainer.jobset import contract as jc
from trainer.kube import resources as r
from trainer.kube.events import Recorder
from trainer.kube.informer import DELETED, Informer
from trainer.kube.rest import APIError, Kube
from trainer.local.executor.api import TRANSIENT, confirm_deletion
from trainer.local.executor.kubelet.policy.pod_status import ContainerReport, PodState, pod_status
from trainer.local.executor.node.heartbeat import (
    FIELD_MANAGER,
    LEASE_NAMESPACE,
    LEASE_RENEW_SECONDS,
    lease_object,
    node_object,
)
from trainer.local.executor.policy.podfields import Node
from trainer.local.executor.simulation.config import (
    SimNode,
    Simulation,
    SimulationError,
    Stages,
    parse_duration,
)
from trainer.machinery.backoff import doubling
from trainer.machinery.times import format_micro_time, now, parse_time

log = logging.getLogger(__name__)

DURATION_KEY: Final = "trainer.kubeflow.org/sim-duration"
FAIL_PROBABILITY_KEY: Final = "trainer.kubeflow.org/sim-fail-probability"
EXIT_CODE_KEY: Final = "trainer.kubeflow.org/sim-exit-code"
BATCH: Final = 64
"""Writes in flight at once when registering nodes and renewing their Leases."""
KILLED_EXIT_CODE: Final = 143
"""A container ended by SIGTERM (deletion, deadline), as the real kubelet reports it."""
TERMINAL: Final = ("Succeeded", "Failed")


# --- pure -----------------------------------------------------------------------------
def pod_stage(
    pod: Mapping[str, Any], stages: Stages, trainjob: Mapping[str, Any] | None = None
) -> Stages:
    """``stages`` with the ``sim-*`` labels or annotations of the pod's TrainJob (``trainjob``:
    its metadata), then of the pod itself: the pod wins over its TrainJob, an annotation over a
    label. A value that does not parse is ignored and the one before it kept."""
    meta = pod.get("metadata") or {}
    owner = trainjob or {}
    given = {
        **(owner.get("labels") or {}),
        **(owner.get("annotations") or {}),
        **(meta.get("labels") or {}),
        **(meta.get("annotations") or {}),
    }
    duration, probability, code = stages.duration, stages.failure_probability, stages.exit_code
    try:
        if DURATION_KEY in given:
            duration = parse_duration(str(given[DURATION_KEY]), DURATION_KEY)
    except SimulationError:
        pass
    try:
        if FAIL_PROBABILITY_KEY in given:
            value = float(given[FAIL_PROBABILITY_KEY])
            probability = value if 0 <= value <= 1 else probability
    except ValueError:
        pass
    try:
        if EXIT_CODE_KEY in given:
            value_code = int(given[EXIT_CODE_KEY])
            code = value_code if 1 <= value_code <= 255 else code
    except ValueError:
        pass
    return Stages(duration, stages.jitter, probability, code)


SIM_PREFIX: Final = "trainer.kubeflow.org/sim-"


def stage_keys(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A TrainJob as the simulated kubelet keeps it (the transform of its TrainJob watch): the
    name and namespace, and only the ``sim-*`` labels and annotations."""
    meta = obj.get("metadata") or {}

    def sim(values: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: v for k, v in (values or {}).items() if k.startswith(SIM_PREFIX)}

    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": sim(meta.get("labels")),
            "annotations": sim(meta.get("annotations")),
        }
    }


def run_seconds(stage: Stages, rnd: random.Random) -> float:
    """One run's duration: the stage's, varied by up to ``jitter`` either way."""
    return max(0.0, stage.duration * (1 + stage.jitter * (2 * rnd.random() - 1)))


def restarts(pod: Mapping[str, Any], exit_code: int) -> bool:
    """Whether the kubelet runs the pod's containers again after they ended with
    ``exit_code`` (``restartPolicy``: Always always, OnFailure on a failure, Never never)."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def terminated(exit_code: int, started: str, finished: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": started,
            "finishedAt": finished,
            "containerID": "",
        }
    }


@dataclass
class Run:
    """Where a simulated pod is: one run of its containers, and what came before."""

    start_time: str
    started_at: str
    restart_count: int = 0
    last_state: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    """Set once the pod finished (no restart): its containers' exit code."""
    finished_at: str = ""
    reason: str = ""
    message: str = ""
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)


def sim_status(pod: Mapping[str, Any], run: Run, *, now: str) -> dict[str, Any]:
    """The ``status`` the simulated kubelet writes for ``pod`` in ``run`` (every container
    alike), updating ``run.conditions``."""
    spec = pod.get("spec") or {}
    uid = (pod.get("metadata") or {}).get("uid", "")
    finished = run.exit_code is not None

    def report(container: Mapping[str, Any], *, init: bool) -> ContainerReport:
        name = str(container.get("name", ""))
        if init:
            state = terminated(0, run.start_time, run.start_time)
        elif finished:
            state = terminated(int(run.exit_code or 0), run.started_at, run.finished_at)
        else:
            state = {"running": {"startedAt": run.started_at}}
        running = not init and not finished
        status = {
            "name": name,
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": f"sim://{uid}/{name}",
            "state": state,
            "lastState": {} if init else run.last_state,
            "ready": running,
            "started": running,
            "restartCount": 0 if init else run.restart_count,
        }
        return ContainerReport(
            name,
            status,
            started=running,
            ready=running,
            succeeded=init or (finished and run.exit_code == 0),
        )

    main = [report(c, init=False) for c in spec.get("containers") or []]
    init = [report(c, init=True) for c in spec.get("initContainers") or []]
    if finished:
        phase = "Succeeded" if run.exit_code == 0 and not run.reason else "Failed"
    else:
        phase = "Running"
    computed = pod_status(
        pod,
        PodState(
            phase=phase,
            start_time=run.start_time,
            initialized=True,
            finished=finished,
            reason=run.reason,
            message=run.message,
        ),
        init=init,
        main=main,
        previous=run.conditions,
        now=now,
    )
    run.conditions = computed.conditions
    return computed.status


def end_run(pod: Mapping[str, Any], run: Run, exit_code: int, stamp: str) -> bool:
    """The containers of ``run`` ended with ``exit_code`` at ``stamp``: restart in place per
    ``restartPolicy`` (True) or finish the pod (False)."""
    if restarts(pod, exit_code):
        run.last_state = terminated(exit_code, run.started_at, stamp)
        run.restart_count += 1
        run.started_at = stamp
        return True
    run.exit_code, run.finished_at = exit_code, stamp
    return False


# --- the nodes ------------------------------------------------------------------------
async def _batched(calls: Sequence[Any]) -> None:
    for i in range(0, len(calls), BATCH):
        results = await asyncio.gather(*calls[i : i + BATCH], return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, TRANSIENT):
                raise result
            if isinstance(result, BaseException):
                log.warning("simulated nodes: %s", result)


class SimNodes:
    """Registers the simulated nodes, then renews all their Leases from one task."""

    def __init__(self, kube: Kube, nodes: Sequence[SimNode]) -> None:
        self.kube = kube
        self.nodes = list(nodes)
        self.registered = asyncio.Event()
        self._leased: set[str] = set()

    async def _register(self, node: SimNode) -> None:
        obj = node_object(Node(), now(), name=node.name, gpus=node.gpus, config=node.config)
        status = {"status": obj.pop("status")}
        obj["metadata"].setdefault("annotations", {})["trainer.kubeflow.org/simulated"] = "true"
        await self.kube.apply(obj, FIELD_MANAGER, gvr=r.NODES)
        await self.kube.patch(r.NODES, None, node.name, status, subresource="status")
        stamp = format_micro_time(time.time())
        await self.kube.apply(lease_object(node.name, stamp), FIELD_MANAGER, gvr=r.LEASES)
        self._leased.add(node.name)

    async def run(self) -> None:
        while not self.registered.is_set():
            try:
                await _batched([self._register(n) for n in self.nodes])
                self.registered.set()
            except APIError as exc:
                log.warning("simulated nodes: registration failed: %s", exc)
                await asyncio.sleep(1.0)
        # Each node renews once per LEASE_RENEW_SECONDS, as a kubelet does, at its own moment
        # in that period (a tenth of the nodes each second): a thousand renewals at the same
        # instant would delay every other write behind them. A node's Lease is created with the
        # node (server-side apply); renewals send only the new renewTime.
        slices = max(1, int(LEASE_RENEW_SECONDS))
        for tick in itertools.count(1):
            await asyncio.sleep(LEASE_RENEW_SECONDS / slices)
            stamp = format_micro_time(time.time())
            due = [n for i, n in enumerate(self.nodes) if i % slices == tick % slices]
            try:
                await _batched([self._renew(n.name, stamp) for n in due])
            except APIError as exc:
                log.warning("simulated nodes: lease renewal failed: %s", exc)

    async def _renew(self, name: str, stamp: str) -> None:
        if name in self._leased:
            try:
                await self.kube.patch(
                    r.LEASES,
                    LEASE_NAMESPACE,
                    name,
                    {"spec": {"renewTime": stamp}},
                    field_manager=FIELD_MANAGER,
                )
                return
            except APIError as exc:
                if not exc.is_not_found:
                    raise
        await self.kube.apply(lease_object(name, stamp), FIELD_MANAGER, gvr=r.LEASES)
        self._leased.add(name)


# --- the kubelet ----------------------------------------------------------------------
STATUS_RETRY_SECONDS = 1.0
STATUS_RETRY_MAX_SECONDS = 10.0
"""A failed status write is sent again, with the pod's status as it is then, 1 s later,
doubling to 10 s (the kubelet's status manager retries at its 10 s sync): a pod whose
``Succeeded`` was lost to a timeout stayed ``Running`` for good."""


def status_retry_seconds(failures: int) -> float:
    return doubling(failures, STATUS_RETRY_SECONDS, STATUS_RETRY_MAX_SECONDS)


@dataclass
class SimPod:
    pod: dict[str, Any]
    run: Run
    stage: Stages
    generation: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failed_writes: int = 0
    """Status writes failed in a row (0: the last one landed)."""

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"].get("uid", ""))

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"].get("namespace", ""))

    @property
    def name(self) -> str:
        return str(self.pod["metadata"].get("name", ""))


class SimKubelet:
    """Moves the pods bound to ``simulation``'s nodes through their lifecycle (module
    docstring), from the executor's pod watch cache ``pods``."""

    def __init__(
        self,
        kube: Kube,
        pods: Informer,
        simulation: Simulation,
        *,
        trainjobs: Informer | None = None,
        seed: int | None = None,
    ) -> None:
        self.kube = kube
        self.informer = pods
        self.trainjobs = trainjobs
        self.simulation = simulation
        self.nodes = SimNodes(kube, list(simulation.sim_nodes()))
        self.node_names = frozenset(n.name for n in self.nodes.nodes)
        self.rnd = random.Random(seed)
        self._pods: dict[str, SimPod] = {}
        self._heap: list[tuple[float, int, str, int, str]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._finalizing: set[str] = set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        heartbeat = loop.create_task(self.nodes.run(), name="sim-node-heartbeat")
        try:
            if self.trainjobs is not None:
                await self.trainjobs.wait_synced()
            await self.informer.wait_synced()
            self.informer.add_handler(self._on_change)
            for pod in self.informer.list():
                self._on_event("ADDED", pod)
            await self._timers()
        finally:
            heartbeat.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(heartbeat, *self._tasks, return_exceptions=True)

    # --- watch ----------------------------------------------------------------------------
    def _on_change(self, kind: str, obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        self._on_event(kind, obj)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        known = self._pods.get(uid)
        if kind == DELETED:
            self._pods.pop(uid, None)
            return
        if (obj.get("spec") or {}).get("nodeName") not in self.node_names:
            return
        if known is not None:
            known.pod = obj
            if meta.get("deletionTimestamp") and known.run.exit_code is None:
                self._kill(known, "", "")
            if meta.get("deletionTimestamp"):
                self._finalize(obj)
            return
        status = obj.get("status") or {}
        if meta.get("deletionTimestamp"):
            self._finalize(obj)
            return
        if status.get("phase") in TERMINAL:
            return
        stamp = now()
        run = Run(start_time=status.get("startTime") or stamp, started_at=stamp)
        sim = SimPod(obj, run, pod_stage(obj, self.simulation.stages, self._trainjob(obj)))
        self._pods[uid] = sim
        self._write(sim, event=("Normal", "Started", "Started simulated containers"))
        self._schedule_end(uid, sim)
        deadline = (obj.get("spec") or {}).get("activeDeadlineSeconds")
        if isinstance(deadline, int) and not isinstance(deadline, bool):
            started = parse_time(run.start_time)
            begin = started.timestamp() if started is not None else time.time()
            self._push(begin + deadline, uid, sim.generation, "deadline")

    def _trainjob(self, pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The metadata of the TrainJob ``pod`` belongs to, if known (its JobSet's name)."""
        meta = pod.get("metadata") or {}
        name = (meta.get("labels") or {}).get(jc.LABEL_JOBSET_NAME)
        if self.trainjobs is None or not name:
            return None
        found = self.trainjobs.get(str(meta.get("namespace") or ""), str(name))
        return (found or {}).get("metadata")

    # --- timers ---------------------------------------------------------------------------
    def _push(self, when: float, uid: str, generation: int, what: str) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), uid, generation, what))
        self._wake.set()

    def _schedule_end(self, uid: str, sim: SimPod) -> None:
        sim.generation += 1
        self._push(time.time() + run_seconds(sim.stage, self.rnd), uid, sim.generation, "end")

    async def _timers(self) -> None:
        while True:
            self._wake.clear()
            delay = self._heap[0][0] - time.time() if self._heap else None
            if delay is None or delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            _, _, uid, generation, what = heapq.heappop(self._heap)
            sim = self._pods.get(uid)
            if what == "status":
                if sim is not None and sim.failed_writes:
                    self._write(sim)  # what the pod's status is now, ended or not
                continue
            if sim is None or sim.run.exit_code is not None:
                continue
            if what == "deadline":
                seconds = sim.pod["spec"]["activeDeadlineSeconds"]
                self._kill(
                    sim,
                    "DeadlineExceeded",
                    f"Pod was active on the node longer than the specified deadline ({seconds}s)",
                )
            elif generation == sim.generation:
                failed = self.rnd.random() < sim.stage.failure_probability
                code = sim.stage.exit_code if failed else 0
                if end_run(sim.pod, sim.run, code, now()):
                    self._schedule_end(uid, sim)
                self._write(sim)

    def _kill(self, sim: SimPod, reason: str, message: str) -> None:
        """End ``sim``'s containers (exit 143) and the pod: deleted (no ``reason``) or past
        its deadline."""
        sim.run.exit_code, sim.run.finished_at = KILLED_EXIT_CODE, now()
        sim.run.reason, sim.run.message = reason, message
        self._write(sim, event=("Normal", "Killing", "Stopping simulated containers"))

    # --- writes ---------------------------------------------------------------------------
    def _finalize(self, pod: dict[str, Any]) -> None:
        """A pod being deleted has stopped (a simulated one at once): delete it with a grace
        period of 0, as a kubelet confirms a graceful deletion (once per pod)."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if uid in self._finalizing:
            return
        self._finalizing.add(uid)

        async def delete() -> None:
            try:
                sim = self._pods.get(uid)
                if sim is not None:
                    async with sim.lock:  # after the pod's last status write
                        pass
                await confirm_deletion(self.kube, pod)
            finally:
                self._finalizing.discard(uid)

        task = asyncio.get_running_loop().create_task(delete())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _write(self, sim: SimPod, event: tuple[str, str, str] | None = None) -> None:
        """Patch the pod's status as it is now (in order per pod; best effort)."""
        status = sim_status(sim.pod, sim.run, now=now())
        task = asyncio.get_running_loop().create_task(self._patch(sim, status, event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _patch(
        self, sim: SimPod, status: dict[str, Any], event: tuple[str, str, str] | None
    ) -> None:
        async with sim.lock:
            try:
                await self.kube.patch_status(r.PODS, sim.namespace, sim.name, {"status": status})
            except TRANSIENT as exc:
                if isinstance(exc, APIError) and exc.is_not_found:
                    return  # deleted: nothing to report
                sim.failed_writes += 1
                wait = status_retry_seconds(sim.failed_writes)
                log.warning(
                    "simulated pod %s: status update failed (retried in %gs): %s",
                    sim.name,
                    wait,
                    exc,
                )
                self._push(time.time() + wait, sim.uid, sim.generation, "status")
                return
            sim.failed_writes = 0
        if event is not None:
            recorder = Recorder(self.kube, "kubelet", host=str(sim.pod["spec"]["nodeName"]))
            await recorder.record(sim.pod, *event)
