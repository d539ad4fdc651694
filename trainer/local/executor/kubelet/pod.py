"""One pod run by the local kubelet: its lifecycle from Pending to Succeeded / Failed.

The lifecycle, in order: the pod is reported Pending; its ConfigMaps, Secrets and service
account tokens are read and its containers and volumes planned
(:mod:`~trainer.local.executor.kubelet.policy.podenv`,
:mod:`~trainer.local.executor.kubelet.policy.volumes`), retried while something is missing (the
containers wait with ``CreateContainerConfigError`` / ``ContainerCreating`` as on a kubelet);
volumes are written; init containers run one after another (sidecars are started and kept running);
then every regular container runs concurrently (:mod:`~trainer.local.executor.kubelet.containers`);
sidecars are stopped at the end. ``activeDeadlineSeconds`` fails the pod (``DeadlineExceeded``);
:meth:`LocalPod.terminate` (deletion, ``deletionTimestamp``, the kubelet stopping) sends SIGTERM to
every process group and SIGKILL after the bounded grace period.

A pod found already started by an earlier executor (``status.startTime`` set, not finished)
has lost its processes: with ``restartPolicy: Never`` it is failed, otherwise run again.

The status written is computed by
:func:`~trainer.local.executor.kubelet.policy.pod_status.pod_status` from the containers' states;
this module only decides when to write it (whenever it changed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from trainer.kube.events import NORMAL, WARNING
from trainer.kube.resources import CONFIGMAPS, PODS, SECRETS, SERVICE_ACCOUNTS
from trainer.kube.rest import APIError
from trainer.local.executor.api import TRANSIENT, append_log, request_token
from trainer.local.executor.kubelet import podnetwork, sshpod
from trainer.local.executor.kubelet.containers import exited_for_good, run_container
from trainer.local.executor.kubelet.logsink import AppendLog, LogSink, append_file, log_file
from trainer.local.executor.kubelet.podhost import (
    BACKOFF_CAP,
    BACKOFF_START,
    GRACE_CAP,
    Container,
    PodHost,
    as_float,
    killpg,
)
from trainer.local.executor.kubelet.policy import incluster, podenv, termination
from trainer.local.executor.kubelet.policy.pod_status import PodState, final_phase, pod_status
from trainer.local.executor.kubelet.policy.volumes import plan_volumes, pod_dir, write_volume
from trainer.local.executor.node.devices import AllocationError, device_env
from trainer.local.executor.policy import podfields
from trainer.local.executor.policy.podfields import ConfigError, Sources
from trainer.local.executor.sandbox import sandbox
from trainer.local.executor.sandbox.ssh import SSHSetupError
from trainer.machinery.times import now

log = logging.getLogger(__name__)
DEFAULT_GRACE = 30.0
TERMINAL = ("Succeeded", "Failed")


def _append_for(host: PodHost, c: Container, uid: str) -> AppendLog:
    """Appending to ``pods/log`` through the host's client, saying which run of ``c`` the
    text is from (its restartCount when the batch goes out: a run's last batch is flushed
    before the restart is counted), so the API server keeps each run's log apart and serves
    the previous one. With a ``log_dir`` (a node of a real cluster, whose API server takes
    no appends) each run's log goes to its file there instead."""
    log_dir = host.log_dir
    if log_dir is not None:

        async def append_run_file(namespace: str, pod: str, container: str, text: str) -> None:
            path = log_file(log_dir, namespace, pod, uid, container, c.restart_count)
            await append_file(path, text)

        return append_run_file

    async def append_run(namespace: str, pod: str, container: str, text: str) -> None:
        await append_log(host.kube, namespace, pod, container, text, run=c.restart_count)

    return append_run


class LocalPod:
    """One pod being run: its containers, processes, log sinks and status.

    ``host`` is the kubelet running it (see
    :class:`~trainer.local.executor.kubelet.podhost.PodHost`); ``pod`` the object as last seen in
    the API (the kubelet replaces it on every event)."""

    def __init__(self, pod: dict[str, Any], *, host: PodHost) -> None:
        self.host = host
        self.pod = pod
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        self.namespace = str(meta.get("namespace") or "default")
        self.name = str(meta.get("name") or "")
        self.uid = str(meta.get("uid") or "")
        self.key = f"{self.namespace}/{self.name}"
        self.policy = str(spec.get("restartPolicy") or "Always")
        grace = as_float(spec.get("terminationGracePeriodSeconds"), DEFAULT_GRACE)
        self.grace = max(0.0, min(grace, GRACE_CAP))
        status = pod.get("status") or {}
        previous = {
            s.get("name"): s
            for s in [
                *(status.get("initContainerStatuses") or []),
                *(status.get("containerStatuses") or []),
            ]
        }
        self.init = [
            Container(c, init=True, previous=previous.get(c.get("name")) or {})
            for c in spec.get("initContainers") or []
        ]
        self.main = [
            Container(c, init=False, previous=previous.get(c.get("name")) or {})
            for c in spec.get("containers") or []
        ]
        self.sinks = {
            c.name: LogSink(
                namespace=self.namespace,
                pod=self.name,
                container=c.name,
                append=_append_for(host, c, self.uid),
                on_log=host.on_log,
            )
            for c in [*self.init, *self.main]
        }
        self.phase = "Pending"
        self.start_time = str(status.get("startTime") or "")
        self.resumed = bool(self.start_time) and status.get("phase") in ("Pending", "Running")
        self.initialized = not self.init
        self.reason = ""
        self.message = ""
        self.failed = False
        self.finished = False
        self.deleted = False
        self.terminating = asyncio.Event()
        self.sandbox: sandbox.Sandbox | None = None
        self.network = podnetwork.Network()  # its IP, and its ports with a pod network
        self.done = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._kill_task: asyncio.Task[None] | None = None
        self._conditions: dict[str, dict[str, Any]] = {
            c["type"]: c for c in status.get("conditions") or [] if c.get("type")
        }
        self._status_lock = asyncio.Lock()
        self._last_status: dict[str, Any] | None = None

    @property
    def containers(self) -> list[Container]:
        return [*self.init, *self.main]

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run(), name=f"pod {self.key}")

    def event(self, type_: str, reason: str, message: str) -> None:
        """Post an Event about this pod in the background (best effort, never waited for)."""
        self.host.background(
            asyncio.get_running_loop().create_task(
                self.host.events.record(self.pod, type_, reason, message)
            )
        )

    # --- lifecycle --------------------------------------------------------------------------------
    async def run(self) -> None:
        deadline: asyncio.Task[None] | None = None
        try:
            seconds = (self.pod.get("spec") or {}).get("activeDeadlineSeconds")
            if seconds is not None:
                deadline = asyncio.get_running_loop().create_task(self._deadline(float(seconds)))
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("pod %s: the local kubelet failed", self.key)
            self.failed = True
            self.reason, self.message = "LocalKubeletError", f"the local kubelet failed: {exc}"
        finally:
            if deadline is not None:
                deadline.cancel()
            for c in self.containers:  # no loop (a sidecar's) starts another process
                c.stop_requested = True
            self._signal(signal.SIGKILL)
            if self.host.devices is not None:  # first: the pod may already read Succeeded
                self.host.devices.release(self.uid)
            for sink in self.sinks.values():
                with contextlib.suppress(Exception):
                    await sink.close()
            for server in self.network.published:
                server.close()
            self.network.published.clear()
            if self.host.addresses is not None:
                self.host.addresses.release(self.uid)
            if self.sandbox is not None:
                self.sandbox = None
                with contextlib.suppress(Exception):
                    await self.host.sandboxes.release(self.pod)  # type: ignore[union-attr]
            self.finished = True
            if self.phase not in TERMINAL:  # a terminal phase already reported stays
                self.phase = self._final_phase()
            with contextlib.suppress(Exception):
                await self.sync_status()
            self.done.set()

    async def _run(self) -> None:
        if not self.start_time:
            self.start_time = now()
        if self.resumed and self.policy == "Never":
            self._lost()
            return
        if self.resumed:  # run again: a restart of every container that had started
            for c in self.containers:
                if c.previous_state and "waiting" not in c.previous_state:
                    c.last_state = c.previous_state
                    c.restart_count += 1
        await self.sync_status()
        if not await self._prepare():
            return
        if not await self._enter_sandbox():
            return
        if not await self._publish():
            return
        for c in self.init:
            if self.terminating.is_set():
                return
            if c.sidecar:
                task = asyncio.get_running_loop().create_task(run_container(self, c))
                self.host.background(task)
                started = asyncio.get_running_loop().create_task(c.started_event.wait())
                await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
                started.cancel()
                if task.done() and not c.started:
                    self.failed = True
                    return
                continue
            if not await run_container(self, c):
                self.failed = True
                return
        self.initialized = True
        await self.sync_status()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.create_task(run_container(self, c)) for c in self.main))
        sidecars = [c for c in self.init if c.sidecar]
        if sidecars:
            for c in sidecars:
                c.stop_requested = True
                if c.proc is not None:
                    killpg(c.proc.pid, signal.SIGTERM)
            await self._wait_exit(sidecars, self.grace)
            for c in sidecars:
                if c.proc is not None:
                    killpg(c.proc.pid, signal.SIGKILL)

    def _lost(self) -> None:
        """A pod an earlier executor started: its processes are gone."""
        old = {
            s.get("name"): s
            for s in [
                *((self.pod.get("status") or {}).get("initContainerStatuses") or []),
                *((self.pod.get("status") or {}).get("containerStatuses") or []),
            ]
        }
        for c in self.containers:
            state = (old.get(c.name) or {}).get("state") or {}
            if "terminated" in state:
                c.state = state
            else:
                c.state = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "message": "the local executor stopped while this container ran",
                        "finishedAt": now(),
                    }
                }
        self.failed = not all(c.succeeded for c in self.main)

    async def _deadline(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
        self.reason = "DeadlineExceeded"
        self.message = (
            f"Pod was active on the node longer than the specified deadline ({seconds:g}s)"
        )
        self.failed = True
        self.terminate()

    def terminate(self, *, deleted: bool = False) -> None:
        """End the pod: SIGTERM to every process group, SIGKILL after the grace period."""
        if deleted:
            self.deleted = True
            for sink in self.sinks.values():
                sink.closed = True
        if self.terminating.is_set():
            return
        self.terminating.set()
        for c in self.containers:
            if c.proc is not None:
                self.event(NORMAL, "Killing", f"Stopping container {c.name}")
        if not self.done.is_set():
            self._kill_task = asyncio.get_running_loop().create_task(self._kill())

    async def _kill(self) -> None:
        self._signal(signal.SIGTERM)
        await self._wait_exit(self.containers, self.grace)
        self._signal(signal.SIGKILL)

    async def _wait_exit(self, containers: list[Container], timeout: float) -> None:
        waits = [c.proc.wait() for c in containers if c.proc is not None]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), timeout)

    def _signal(self, sig: int) -> None:
        for c in self.containers:
            if c.proc is not None:
                killpg(c.proc.pid, sig)

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless the pod is terminated first; True when it is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.terminating.wait(), seconds)
        return self.terminating.is_set()

    # --- network sandbox --------------------------------------------------------------------------
    async def _enter_sandbox(self) -> bool:
        """Get the pod's network sandbox (:func:`podnetwork.enter_sandbox`); False when the pod
        must not run."""
        plans = [(c.name, c.plan) for c in self.containers]
        self.sandbox, refused = await podnetwork.enter_sandbox(self.host, self.pod, self.key, plans)
        return self._admitted(refused)

    async def _publish(self) -> bool:
        """With a pod network, the pod's address and its published ports
        (:func:`podnetwork.publish`); False when the pod must not run."""
        refused = await podnetwork.publish(
            self.host, self.pod, self.uid, self.sandbox, self.network
        )
        return self._admitted(refused)

    def _admitted(self, refused: podnetwork.Refusal | None) -> bool:
        if refused is None:
            return True
        self.event(WARNING, refused.reason, refused.message)
        self.failed = True
        self.reason, self.message = refused.reason, refused.message
        return False

    # --- preparation ------------------------------------------------------------------------------
    def _allocate_devices(self) -> bool:
        """Hand the pod its GPUs (on a node that has some) and show each container only its
        own; a pod asking for more than is free fails as the kubelet's admission fails it."""
        devices = self.host.devices
        if devices is None or not devices.gpus:
            return True
        try:
            held = devices.allocate(self.pod)
        except AllocationError as exc:
            log.warning("pod %s: %s", self.key, exc)
            self.failed, self.reason, self.message = True, "UnexpectedAdmissionError", str(exc)
            self.event(WARNING, "UnexpectedAdmissionError", str(exc))
            return False
        for c in self.containers:
            if c.plan is not None:
                c.plan.env.update(device_env(held.get(c.name)))
        return True

    async def _prepare(self) -> bool:
        """Read sources, plan containers and volumes (retried while something is missing),
        then write the volumes. False when the pod ended meanwhile."""
        delay = BACKOFF_START
        reported = ""
        while True:
            if self.terminating.is_set():
                return False
            try:
                planned = await self._with_api_access()
                sources = await self._sources(planned)
                volumes = plan_volumes(planned, sources, self.host.state_dir, self.host.node)
                paths = {v.name: v.path for v in volumes}
                specs = {
                    str(spec.get("name")): spec
                    for group in ("initContainers", "containers")
                    for spec in (planned.get("spec") or {}).get(group) or []
                }
                for c in self.containers:
                    c.plan = podenv.plan_container(
                        planned,
                        specs.get(c.name, c.spec),
                        sources=sources,
                        volumes=paths,
                        workdir=self.host.workdir,
                        node=self.host.node,
                        termination_file=str(
                            termination.host_file(self.host.state_dir, self.pod, c.name)
                        ),
                    )
                    for name, value in self.host.service_env.items():
                        c.plan.env.setdefault(name, value)
                break
            except ConfigError as err:
                if err.message != reported:
                    log.warning("pod %s: %s (waiting)", self.key, err.message)
                    reported = err.message
                for c in self.containers:
                    c.state = {"waiting": {"reason": err.reason, "message": err.message}}
                await self.sync_status()
            except TRANSIENT as exc:
                # A node is refused the objects of a pod no longer bound to it (the Node
                # authorizer): deleted meanwhile, its deletion comes through the watch a moment
                # later. Said only if the pod still runs after the wait.
                if isinstance(exc, APIError) and exc.status == 403 and await self._sleep(delay):
                    return False
                log.warning("pod %s: reading its ConfigMaps/Secrets failed: %s", self.key, exc)
            if await self._sleep(delay):
                return False
            delay = min(delay * 2, BACKOFF_CAP)
        if not self._allocate_devices():
            return False
        await self.host.cleaned(self.namespace, self.name)
        try:
            for volume in volumes:
                if volume.note:
                    log.warning("pod %s: volume %r: %s", self.key, volume.name, volume.note)
                await asyncio.to_thread(write_volume, volume)
        except OSError as exc:
            message = f"MountVolume.SetUp failed: {exc}"
            log.warning("pod %s: %s", self.key, message)
            for c in self.containers:
                c.state = {"waiting": {"reason": "ContainerCreating", "message": message}}
            self.failed, self.reason, self.message = True, "FailedMount", message
            return False
        try:
            for c in self.containers:
                if c.plan is not None:
                    await asyncio.to_thread(
                        sshpod.prepare,
                        self.pod,
                        c.spec,
                        c.plan,
                        sources=sources,
                        volumes=paths,
                        pod_dir=pod_dir(self.host.state_dir, self.pod),
                        base_env=self.host.base_env,
                    )
        except (SSHSetupError, OSError) as exc:
            message = f"cannot set up ssh for this pod: {exc}"
            log.warning("pod %s: %s", self.key, message)
            for c in self.containers:
                c.state = {"waiting": {"reason": "CreateContainerError", "message": message}}
                await self.sinks[c.name].line(f"[local kubelet] {message}")
            self.failed, self.reason, self.message = True, "SSHSetupFailed", message
            return False
        for c in self.containers:
            if c.plan is not None and c.spec.get("image"):
                self.host.warn_image(c.plan.image)
            for warning in c.plan.warnings if c.plan is not None else []:
                log.warning("pod %s: %s", self.key, warning)
        rewrites: dict[str, str] = {}
        for c in self.containers:
            if c.plan is not None:
                rewrites.update(c.plan.rewriter.rewrites)
        if rewrites:
            log.info(
                "pod %s: rewritten for this host: %s",
                self.key,
                ", ".join(f"{a} -> {b}" for a, b in sorted(rewrites.items())),
            )
        for c in self.containers:
            c.state = {
                "waiting": {"reason": "PodInitializing" if not c.init else "ContainerCreating"}
            }
        return True

    async def _with_api_access(self) -> dict[str, Any]:
        """The pod as the kubelet starts it: with the API access volume when its token is
        automounted (:mod:`~trainer.local.executor.kubelet.policy.incluster`)."""
        spec = self.pod.get("spec") or {}
        account = None
        if spec.get("automountServiceAccountToken") is None:
            account = await self.host.kube.get(
                SERVICE_ACCOUNTS, self.namespace, podfields.service_account(self.pod)
            )
        if incluster.automount(self.pod, account):
            return incluster.with_api_access(self.pod)
        return self.pod

    async def _sources(self, pod: dict[str, Any]) -> Sources:
        config_maps, secrets = podfields.referenced_objects(pod)
        sources = Sources()
        kube = self.host.kube
        for name in sorted(config_maps):
            sources.config_maps[name] = await kube.get(CONFIGMAPS, self.namespace, name)
        for name in sorted(secrets):
            sources.secrets[name] = await kube.get(SECRETS, self.namespace, name)
        for audience, expiration in sorted(podfields.token_requests(pod)):
            sources.tokens[(audience, expiration)] = await self._token(audience, expiration)
        return sources

    async def _token(self, audience: str, expiration: int) -> str:
        """A token of the pod's service account for ``audience``, bound to the pod, from
        TokenRequest (as a kubelet gets one for a projected serviceAccountToken)."""
        sa = podfields.service_account(self.pod)
        meta = self.pod.get("metadata") or {}
        spec: dict[str, Any] = {
            "expirationSeconds": expiration,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            },
        }
        if audience:
            spec["audiences"] = [audience]
        try:
            answer = await request_token(self.host.kube, self.namespace, sa, spec)
        except APIError as exc:
            if exc.status in (404, 422):
                message = exc.message
                raise ConfigError(
                    f"cannot get a token of service account {sa!r}: {message}",
                    reason="ContainerCreating",
                ) from None
            raise
        return str(answer["status"]["token"])

    # --- status -----------------------------------------------------------------------------------
    def _exited_for_good(self) -> bool:
        """Every regular container has exited and none will start again: not ending (a deleted
        or timed-out pod writes its phase once ended), no sidecar to stop first."""
        if self.terminating.is_set() or any(c.sidecar for c in self.init):
            return False
        return bool(self.main) and all(exited_for_good(c, self.policy) for c in self.main)

    def status(self) -> dict[str, Any]:
        """The pod status this kubelet reports: :func:`pod_status` of the containers as they
        are now; the conditions are kept for the next report."""
        computed = pod_status(
            self.pod,
            PodState(
                phase=self.phase,
                start_time=self.start_time,
                initialized=self.initialized,
                finished=self.finished,
                reason=self.reason,
                message=self.message,
            ),
            init=[c.report() for c in self.init],
            main=[c.report() for c in self.main],
            previous=self._conditions,
            now=now(),
            pod_ip=self.network.address,
        )
        self._conditions = computed.conditions
        return computed.status

    def _final_phase(self) -> str:
        return final_phase(
            failed=self.failed, reason=self.reason, main=[c.report() for c in self.main]
        )

    async def sync_status(self) -> None:
        """Patch ``pods/status`` when what this kubelet reports changed. Once every regular
        container has exited for good (:func:`exited_for_good`), the status carries the
        terminal phase with the last one's termination, as a kubelet's does (the pod is then
        Succeeded or Failed, no longer Running and unready); what is left to do (the sandbox,
        the logs) follows. Reported Running and unready in between, each finishing pod made its
        Job's ready plus succeeded count drop below its parallelism and rise again, so the
        JobSet's and TrainJob's ready counts went 1, 0, 1, 0 as the pods of a Job ended."""
        if self.deleted or self.host.stopping:
            return
        async with self._status_lock:
            if self.deleted or self.host.stopping:
                return
            if self.phase == "Running" and self._exited_for_good():
                self.phase = self._final_phase()
            status = self.status()
            if status == self._last_status:
                return
            try:
                await self.host.kube.patch_status(
                    PODS, self.namespace, self.name, {"status": status}
                )
                self._last_status = status
            except APIError as exc:
                if exc.is_not_found:
                    return
                log.warning("pod %s: status update failed: %s", self.key, exc)
            except TRANSIENT as exc:
                log.warning("pod %s: status update failed: %s", self.key, exc)
