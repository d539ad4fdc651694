"""The local kubelet: runs every Pod bound to this host ("" or ``local`` ``spec.nodeName``) as
local processes and reports it back through the API, like a kubelet on a one-node cluster.

It talks to the API server only through :class:`~trainer.local.executor.client.LocalClient`:
a list + watch of Pods in all namespaces (re-listed after an error or a 410), GETs of the
ConfigMaps and Secrets a pod references, merge patches of ``pods/status`` and appends to
``pods/log``.

A pod, once seen (and not yet finished):

1. Is ``Pending`` with ``PodScheduled``; its ConfigMaps / Secrets are read and its environment,
   argv and volumes resolved (:mod:`trainer.local.executor.podenv`: env and ``$(VAR)``
   semantics, DNS / port / mount-path rewrites, volume layout). A missing ConfigMap, Secret or
   key keeps the containers waiting (``CreateContainerConfigError`` / ``ContainerCreating``)
   and is retried, as a kubelet does.
2. Runs its init containers one after another, then every regular container concurrently,
   each as a process in its own process group (``start_new_session``), with the executor's
   environment overlaid by the container's, in the working directory podenv chose. Init
   containers with ``restartPolicy: Always`` are sidecars: started (and, with a startupProbe,
   started-probed) before the next init container, kept running, and stopped once the regular
   containers are done. No image is pulled: the host's tools are used (a warning names each
   image once). A container without command and args, or whose executable is not on this
   host, fails the pod at once (reason ``ContainerCannotRun``, exit code 127, a message naming
   the command, also written to the container's log): retrying cannot make it appear.
3. Streams stdout and stderr (merged, line by line) to ``pods/log`` in batches (at most
   0.2 s or 64 KiB apart) and to ``on_log(pod, container, line)``.
4. Reports ``status``: phase Pending -> Running -> Succeeded / Failed, the conditions
   PodScheduled, Initialized, ContainersReady and Ready (other writers' conditions are kept),
   ``containerStatuses`` / ``initContainerStatuses`` (state waiting / running / terminated with
   exitCode, reason ``Completed`` / ``Error``, signal, startedAt, finishedAt, message;
   lastState, restartCount, ready, started, ``containerID`` = ``local://<pid>``), podIP and
   hostIP 127.0.0.1, startTime. Readiness: readinessProbe ``tcpSocket`` (the mapped host
   port), ``httpGet`` (127.0.0.1), ``exec``; until a container first turns ready it is probed
   every 0.25 s (a local process starts faster than a pod), afterwards every periodSeconds
   (at most 5 s); initialDelaySeconds is honoured up to 30 s; success/failureThreshold apply.
   A startupProbe gates ``started`` and readiness. Without a probe a container is ready once
   started. livenessProbe is not run.
5. Restarts per ``restartPolicy``: Always / OnFailure restart a container's process in place
   (restartCount + 1, ``CrashLoopBackOff`` back-off from 0.5 s doubling to at most 5 s); with
   Never the pod ends with the exit codes. ``activeDeadlineSeconds`` fails the pod
   (``DeadlineExceeded``).
6. Ends: once a container's main process exits, whatever is left of its process group is
   killed (as when a container's PID 1 exits). A pod that is deleted or gets a
   ``deletionTimestamp`` has every process group sent SIGTERM, then SIGKILL after
   terminationGracePeriodSeconds (default 30, at most 5 s here); a deleted pod's directory
   ``<state_dir>/<ns>/<pod>`` is removed. :meth:`Kubelet.stop` ends every process the same
   way, without further status writes.

A pod with ``spec.schedulingGates`` is not run: like the scheduler, the kubelet leaves it
``Pending`` with ``PodScheduled=False`` (reason ``SchedulingGated``) until the gates are removed
(Kueue's topology ungater does that on a cluster).

A pod found already started by an earlier executor (``status.startTime`` set, not finished)
has lost its processes: with ``restartPolicy: Never`` it is failed, otherwise run again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import logging
import os
import shutil
import signal
import ssl
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from trainer.local.executor import podenv
from trainer.local.executor.client import ClientError, LocalClient
from trainer.local.executor.client import path as client_path
from trainer.local.executor.events import NORMAL, WARNING, Recorder
from trainer.local.executor.podenv import (
    LOOPBACK,
    NODE_NAME,
    ConfigError,
    ContainerPlan,
    Node,
    Sources,
)

log = logging.getLogger(__name__)

GRACE_CAP = 5.0
"""Upper bound of terminationGracePeriodSeconds locally."""
DEFAULT_GRACE = 30.0
LOG_FLUSH_SECONDS = 0.2
LOG_FLUSH_BYTES = 64 * 1024
BACKOFF_START = 0.5
BACKOFF_CAP = 5.0
BACKOFF_RESET_AFTER = 60.0
"""A container that ran this long restarts with the initial back-off again."""
PROBE_FAST = 0.25
PROBE_PERIOD_CAP = 5.0
PROBE_DELAY_CAP = 30.0
PROBE_TIMEOUT_CAP = 10.0
CANNOT_RUN_EXIT = 127
TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048
API_TIMEOUT = 10.0
OURS = ("", NODE_NAME)

LogCallback = Callable[[str, str, str], None]
TRANSIENT = (ClientError, aiohttp.ClientError, OSError, TimeoutError, ValueError)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def local_node(state_dir: Path) -> Node:
    """This host's capacity (cores, memory and the disk of ``state_dir``)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    disk = 0
    probe = state_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    with contextlib.suppress(OSError):
        disk = shutil.disk_usage(probe).total
    return Node(cpus=os.cpu_count() or 1, memory=memory, ephemeral_storage=disk)


def default_base_env() -> dict[str, str]:
    """The executor's environment for the processes: everything it has, with the running
    interpreter's bin directory on PATH (so the venv's ``python`` and ``torchrun`` are found
    even when the venv is not activated) and ``PYTHONUNBUFFERED=1`` unless set (so logs stream
    rather than arrive at exit; a container's own env overrides both)."""
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    path = env.get("PATH", os.defpath)
    if bindir and bindir not in path.split(os.pathsep):
        env["PATH"] = bindir + os.pathsep + path
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _int(value: Any, default: float) -> float:
    try:
        return float(value) if value is not None else default
    except (TypeError, ValueError):
        return default


class _LogSink:
    """One container's log: lines go to ``on_log`` at once and to ``pods/log`` in batches
    (flushed 0.2 s after the first unflushed line, or at 64 KiB), in order."""

    def __init__(self, kubelet: Kubelet, namespace: str, pod: str, container: str) -> None:
        self.kubelet = kubelet
        self.namespace, self.pod, self.container = namespace, pod, container
        self.parts: list[str] = []
        self.size = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=TERMINATION_LOG_LINES)
        self.lock = asyncio.Lock()
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    async def line(self, text: str) -> None:
        text = text.rstrip("\r")
        if self.kubelet.on_log is not None:
            try:
                self.kubelet.on_log(self.pod, self.container, text)
            except Exception:
                log.exception("on_log failed for %s/%s", self.pod, self.container)
        self.tail.append(text)
        self.parts.append(text + "\n")
        self.size += len(text) + 1
        if self.size >= LOG_FLUSH_BYTES:
            await self.flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(LOG_FLUSH_SECONDS, self._fire)

    def _fire(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self.lock:
            if not self.parts:
                return
            text = "".join(self.parts)
            self.parts, self.size = [], 0
            if self.closed:
                return
            try:
                await asyncio.wait_for(
                    self.kubelet.client.append_log(self.namespace, self.pod, self.container, text),
                    API_TIMEOUT,
                )
            except TRANSIENT as exc:
                log.debug("appending to the log of %s/%s failed: %s", self.pod, self.container, exc)

    async def close(self) -> None:
        await self.flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    def termination_message(self) -> str:
        """The last lines, for ``terminationMessagePolicy: FallbackToLogsOnError``."""
        text = "\n".join(self.tail)
        return text[-TERMINATION_LOG_BYTES:]


class _Container:
    """A container's runtime state, reported as its containerStatus."""

    def __init__(self, spec: dict[str, Any], *, init: bool, previous: dict[str, Any]) -> None:
        self.spec = spec
        self.name = str(spec.get("name") or "")
        self.image = str(spec.get("image") or "")
        self.init = init
        self.sidecar = init and spec.get("restartPolicy") == "Always"
        self.restart_count = int(previous.get("restartCount") or 0)
        self.previous_state: dict[str, Any] = dict(previous.get("state") or {})
        reason = "PodInitializing" if not init else "ContainerCreating"
        self.state: dict[str, Any] = {"waiting": {"reason": reason}}
        self.last_state: dict[str, Any] = {}
        self.ready = False
        self.started = False
        self.container_id = ""
        self.proc: asyncio.subprocess.Process | None = None
        self.plan: ContainerPlan | None = None
        self.stop_requested = False
        self.started_event = asyncio.Event()

    @property
    def succeeded(self) -> bool:
        return bool((self.state.get("terminated") or {}).get("exitCode") == 0)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


class _Pod:
    """One pod being run: its containers, processes, log sinks and status."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]) -> None:
        self.k = kubelet
        self.pod = pod
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        self.namespace = str(meta.get("namespace") or "default")
        self.name = str(meta.get("name") or "")
        self.uid = str(meta.get("uid") or "")
        self.key = f"{self.namespace}/{self.name}"
        self.policy = str(spec.get("restartPolicy") or "Always")
        grace = _int(spec.get("terminationGracePeriodSeconds"), DEFAULT_GRACE)
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
            _Container(c, init=True, previous=previous.get(c.get("name")) or {})
            for c in spec.get("initContainers") or []
        ]
        self.main = [
            _Container(c, init=False, previous=previous.get(c.get("name")) or {})
            for c in spec.get("containers") or []
        ]
        self.sinks = {
            c.name: _LogSink(kubelet, self.namespace, self.name, c.name)
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
        self.done = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._kill_task: asyncio.Task[None] | None = None
        self._conditions: dict[str, dict[str, Any]] = {
            c["type"]: c for c in status.get("conditions") or [] if c.get("type")
        }
        self._status_lock = asyncio.Lock()
        self._last_status: dict[str, Any] | None = None

    @property
    def containers(self) -> list[_Container]:
        return [*self.init, *self.main]

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run(), name=f"pod {self.key}")

    def event(self, type_: str, reason: str, message: str) -> None:
        """Post an Event about this pod in the background (best effort, never waited for)."""
        self.k._background(
            asyncio.get_running_loop().create_task(
                self.k.events.record(self.pod, type_, reason, message)
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
            for sink in self.sinks.values():
                with contextlib.suppress(Exception):
                    await sink.close()
            self.finished = True
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
        for c in self.init:
            if self.terminating.is_set():
                return
            if c.sidecar:
                task = asyncio.get_running_loop().create_task(self._container_loop(c))
                self.k._background(task)
                started = asyncio.get_running_loop().create_task(c.started_event.wait())
                await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
                started.cancel()
                if task.done() and not c.started:
                    self.failed = True
                    return
                continue
            if not await self._container_loop(c):
                self.failed = True
                return
        self.initialized = True
        await self.sync_status()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.create_task(self._container_loop(c)) for c in self.main))
        sidecars = [c for c in self.init if c.sidecar]
        if sidecars:
            for c in sidecars:
                c.stop_requested = True
                if c.proc is not None:
                    _killpg(c.proc.pid, signal.SIGTERM)
            await self._wait_exit(sidecars, self.grace)
            for c in sidecars:
                if c.proc is not None:
                    _killpg(c.proc.pid, signal.SIGKILL)

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

    def _final_phase(self) -> str:
        if self.failed or self.reason:
            return "Failed"
        if self.main and all(c.succeeded for c in self.main):
            return "Succeeded"
        return "Failed"

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

    async def _wait_exit(self, containers: list[_Container], timeout: float) -> None:
        waits = [c.proc.wait() for c in containers if c.proc is not None]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), timeout)

    def _signal(self, sig: int) -> None:
        for c in self.containers:
            if c.proc is not None:
                _killpg(c.proc.pid, sig)

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless the pod is terminated first; True when it is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.terminating.wait(), seconds)
        return self.terminating.is_set()

    # --- preparation ------------------------------------------------------------------------------
    async def _prepare(self) -> bool:
        """Read sources, plan containers and volumes (retried while something is missing),
        then write the volumes. False when the pod ended meanwhile."""
        delay = BACKOFF_START
        reported = ""
        while True:
            if self.terminating.is_set():
                return False
            try:
                sources = await self._sources()
                volumes = podenv.plan_volumes(self.pod, sources, self.k.state_dir, self.k.node)
                paths = {v.name: v.path for v in volumes}
                for c in self.containers:
                    c.plan = podenv.plan_container(
                        self.pod,
                        c.spec,
                        sources=sources,
                        volumes=paths,
                        workdir=self.k.workdir,
                        node=self.k.node,
                    )
                break
            except ConfigError as err:
                if err.message != reported:
                    log.warning("pod %s: %s (waiting)", self.key, err.message)
                    reported = err.message
                for c in self.containers:
                    c.state = {"waiting": {"reason": err.reason, "message": err.message}}
                await self.sync_status()
            except TRANSIENT as exc:
                log.warning("pod %s: reading its ConfigMaps/Secrets failed: %s", self.key, exc)
            if await self._sleep(delay):
                return False
            delay = min(delay * 2, BACKOFF_CAP)
        previous = self.k._cleaning.get((self.namespace, self.name))
        if previous is not None:
            await previous.wait()
        try:
            for volume in volumes:
                if volume.note:
                    log.warning("pod %s: volume %r: %s", self.key, volume.name, volume.note)
                await asyncio.to_thread(podenv.write_volume, volume)
        except OSError as exc:
            message = f"MountVolume.SetUp failed: {exc}"
            log.warning("pod %s: %s", self.key, message)
            for c in self.containers:
                c.state = {"waiting": {"reason": "ContainerCreating", "message": message}}
            self.failed, self.reason, self.message = True, "FailedMount", message
            return False
        for c in self.containers:
            if c.plan is not None and c.spec.get("image"):
                self.k._warn_image(c.plan.image)
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

    async def _sources(self) -> Sources:
        config_maps, secrets = podenv.referenced_objects(self.pod)
        sources = Sources()
        client = self.k.client
        for name in sorted(config_maps):
            sources.config_maps[name] = await client.get("v1", "configmaps", self.namespace, name)
        for name in sorted(secrets):
            sources.secrets[name] = await client.get("v1", "secrets", self.namespace, name)
        for audience, expiration in sorted(podenv.token_requests(self.pod)):
            sources.tokens[(audience, expiration)] = await self._token(audience, expiration)
        return sources

    async def _token(self, audience: str, expiration: int) -> str:
        """A token of the pod's service account for ``audience``, bound to the pod, from
        TokenRequest (as a kubelet gets one for a projected serviceAccountToken)."""
        sa = podenv.service_account(self.pod)
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
            answer = await self.k.client.request(
                "POST",
                client_path("v1", "serviceaccounts", self.namespace, sa, "token"),
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
            )
        except ClientError as exc:
            if exc.status in (404, 422):
                message = exc.body.get("message") if isinstance(exc.body, dict) else exc.body
                raise ConfigError(
                    f"cannot get a token of service account {sa!r}: {message}",
                    reason="ContainerCreating",
                ) from None
            raise
        return str(answer["status"]["token"])

    # --- containers -------------------------------------------------------------------------------
    async def _container_loop(self, c: _Container) -> bool:
        """Run a container until it is done under the restart policy; True when it succeeded."""
        backoff = BACKOFF_START
        loop = asyncio.get_running_loop()
        while True:
            if self.terminating.is_set() or c.stop_requested:
                return c.succeeded
            began = loop.time()
            code = await self._exec_once(c)
            if code is None:  # cannot run on this host: no retry makes it appear
                self.failed = True
                return False
            if self.terminating.is_set() or c.stop_requested:
                return code == 0
            if c.sidecar:
                restart = True
            elif c.init:
                restart = code != 0 and self.policy != "Never"
            else:
                restart = self.policy == "Always" or (self.policy == "OnFailure" and code != 0)
            if not restart:
                return code == 0
            if loop.time() - began > BACKOFF_RESET_AFTER:
                backoff = BACKOFF_START
            c.last_state = c.state
            c.restart_count += 1
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {backoff:g}s restarting failed container={c.name} "
                    f"pod={self.name}_{self.namespace}({self.uid})",
                }
            }
            self.event(
                WARNING,
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod {self.name}",
            )
            await self.sync_status()
            if await self._sleep(backoff):
                return False
            backoff = min(backoff * 2, BACKOFF_CAP)

    async def _cannot_run(self, c: _Container, message: str) -> None:
        log.warning("pod %s: container %s: %s", self.key, c.name, message)
        stamp = now()
        c.state = {
            "terminated": {
                "exitCode": CANNOT_RUN_EXIT,
                "reason": "ContainerCannotRun",
                "message": message,
                "startedAt": stamp,
                "finishedAt": stamp,
            }
        }
        c.ready = False
        self.event(WARNING, "Failed", f"Error: {message}")
        sink = self.sinks[c.name]
        await sink.line(f"[local kubelet] {message}")
        await sink.flush()
        await self.sync_status()

    async def _exec_once(self, c: _Container) -> int | None:
        """Run the container's process once; its exit code (128+N for signal N), or None when
        it could not be started."""
        plan = c.plan
        assert plan is not None
        image = f"image {plan.image!r}" if plan.image else "no image"
        if not plan.argv:
            await self._cannot_run(
                c,
                f"container {c.name!r} has neither command nor args: the local executor runs "
                f"the container's command on this host and cannot use the entrypoint of "
                f"{image}; set command",
            )
            return None
        env = plan.process_env(self.k.base_env)
        command = " ".join(plan.argv)
        exe = podenv.find_executable(plan.argv[0], plan.cwd, env.get("PATH", os.defpath))
        if exe is None:
            await self._cannot_run(
                c,
                f'exec: "{plan.argv[0]}": executable file not found in $PATH (command: '
                f"{command}); the local executor runs commands with this host's tools, not "
                f"those of {image}: install it here or change the command",
            )
            return None
        for host in plan.rewriter.mounts.values():
            if not os.path.exists(host) and self.k.owns(host):
                with contextlib.suppress(OSError):
                    os.makedirs(host, exist_ok=True)
        if plan.cwd != str(self.k.workdir) and self.k.owns(plan.cwd):
            with contextlib.suppress(OSError):
                os.makedirs(plan.cwd, exist_ok=True)
        try:
            proc = await asyncio.create_subprocess_exec(
                plan.argv[0],
                *plan.argv[1:],
                executable=exe,
                cwd=plan.cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            await self._cannot_run(
                c, f"cannot start {command!r} in {plan.cwd}: {exc.strerror or exc}"
            )
            return None
        c.proc = proc
        self.k._groups.add(proc.pid)
        self.event(NORMAL, "Started", f"Started container {c.name} (host process {proc.pid})")
        if self.terminating.is_set() or c.stop_requested:
            _killpg(proc.pid, signal.SIGTERM)
        started_at = now()
        c.container_id = f"local://{proc.pid}"
        c.state = {"running": {"startedAt": started_at}}
        has_startup = bool(c.spec.get("startupProbe"))
        c.started = not has_startup
        c.ready = c.started and not c.spec.get("readinessProbe")
        if c.started:
            c.started_event.set()
        if not c.init:
            self.phase = "Running"
        loop = asyncio.get_running_loop()
        assert proc.stdout is not None
        reader = loop.create_task(self._read(c, proc.stdout))
        probes = (
            loop.create_task(self._probes(c))
            if has_startup or c.spec.get("readinessProbe")
            else None
        )
        await self.sync_status()
        try:
            returncode = await proc.wait()
        finally:
            _killpg(proc.pid, signal.SIGKILL)  # what is left of the group dies with PID 1
            self.k._groups.discard(proc.pid)
            if probes is not None:
                probes.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(reader), GRACE_CAP)
        except TimeoutError:
            reader.cancel()
        c.proc = None
        code = returncode if returncode >= 0 else 128 - returncode
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started_at,
            "finishedAt": now(),
            "containerID": c.container_id,
        }
        if returncode < 0:
            terminated["signal"] = -returncode
        sink = self.sinks[c.name]
        if code != 0 and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = sink.termination_message()
            if message:
                terminated["message"] = message
        c.state = {"terminated": terminated}
        c.ready = False
        await sink.flush()
        await self.sync_status()
        return code

    async def _read(self, c: _Container, stream: asyncio.StreamReader) -> None:
        sink = self.sinks[c.name]
        pending = b""
        while True:
            chunk = await stream.read(LOG_FLUSH_BYTES)
            if not chunk:
                break
            pending += chunk
            if b"\n" in pending:
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    await sink.line(line.decode(errors="replace"))
            if len(pending) >= LOG_FLUSH_BYTES:  # a very long line goes out in pieces
                await sink.line(pending.decode(errors="replace"))
                pending = b""
        if pending:
            await sink.line(pending.decode(errors="replace"))

    # --- probes -----------------------------------------------------------------------------------
    async def _probes(self, c: _Container) -> None:
        startup = c.spec.get("startupProbe")
        readiness = c.spec.get("readinessProbe")
        if startup:
            await self._probe_loop(c, startup, startup=True)
            c.started = True
            c.started_event.set()
            c.ready = not readiness
            await self.sync_status()
        if readiness:
            await self._probe_loop(c, readiness, startup=False)

    async def _probe_loop(self, c: _Container, probe: dict[str, Any], *, startup: bool) -> None:
        """Probe until the startup probe passes, or (readiness) for as long as the process runs,
        flipping ``ready`` on the success / failure thresholds."""
        await asyncio.sleep(min(max(_int(probe.get("initialDelaySeconds"), 0), 0), PROBE_DELAY_CAP))
        period = min(max(_int(probe.get("periodSeconds"), 10), 0.1), PROBE_PERIOD_CAP)
        need_ok = max(int(_int(probe.get("successThreshold"), 1)), 1)
        need_fail = max(int(_int(probe.get("failureThreshold"), 3)), 1)
        ok_count = fail_count = 0
        while True:
            ok = await self._probe(c, probe)
            ok_count, fail_count = (ok_count + 1, 0) if ok else (0, fail_count + 1)
            if startup and ok:
                return
            if not startup:
                if not c.ready and ok and ok_count >= need_ok:
                    c.ready = True
                    await self.sync_status()
                elif c.ready and not ok and fail_count >= need_fail:
                    c.ready = False
                    await self.sync_status()
            await asyncio.sleep(period if c.ready else min(period, PROBE_FAST))

    async def _probe(self, c: _Container, probe: dict[str, Any]) -> bool:
        timeout = min(max(_int(probe.get("timeoutSeconds"), 1), 1), PROBE_TIMEOUT_CAP)
        try:
            if "tcpSocket" in probe:
                port = podenv.host_port(self.pod, c.spec, probe["tcpSocket"].get("port"))
                if port is None:
                    return False
                _, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, port), timeout)
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
                return True
            if "httpGet" in probe:
                return await self._http_probe(c, probe["httpGet"], timeout)
            if "exec" in probe:
                return await self._exec_probe(c, probe["exec"], timeout)
        except (OSError, TimeoutError, ValueError, IndexError):
            return False
        self.k._warn_once(
            f"probe:{self.uid}:{c.name}",
            f"pod {self.key}: container {c.name}: probe kind {sorted(probe)} is not run "
            "locally; treated as passing",
        )
        return True

    async def _http_probe(self, c: _Container, spec: dict[str, Any], timeout: float) -> bool:
        port = podenv.host_port(self.pod, c.spec, spec.get("port"))
        if port is None:
            return False
        context = None
        if str(spec.get("scheme") or "HTTP").upper() == "HTTPS":
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(LOOPBACK, port, ssl=context), timeout
        )
        try:
            path = str(spec.get("path") or "/")
            headers = "".join(
                f"{h.get('name')}: {h.get('value')}\r\n" for h in spec.get("httpHeaders") or []
            )
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nUser-Agent: kube-probe/local"
                f"\r\nAccept: */*\r\nConnection: close\r\n{headers}\r\n".encode()
            )
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), timeout)
            code = int(status_line.split()[1])
            return 200 <= code < 400
        finally:
            writer.close()

    async def _exec_probe(self, c: _Container, spec: dict[str, Any], timeout: float) -> bool:
        assert c.plan is not None
        argv = c.plan.render([str(a) for a in spec.get("command") or []])
        env = c.plan.process_env(self.k.base_env)
        exe = podenv.find_executable(argv[0], c.plan.cwd, env.get("PATH", os.defpath))
        if exe is None:
            return False
        proc = await asyncio.create_subprocess_exec(
            argv[0],
            *argv[1:],
            executable=exe,
            cwd=c.plan.cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return await asyncio.wait_for(proc.wait(), timeout) == 0
        finally:
            _killpg(proc.pid, signal.SIGKILL)

    # --- status -----------------------------------------------------------------------------------
    def _condition(self, type_: str, ok: bool, reason: str = "", message: str = "") -> None:
        status = "True" if ok else "False"
        previous = self._conditions.get(type_)
        since = (
            previous.get("lastTransitionTime")
            if previous is not None and previous.get("status") == status
            else None
        )
        cond: dict[str, Any] = {
            "type": type_,
            "status": status,
            "lastTransitionTime": since or now(),
        }
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        self._conditions[type_] = cond

    def status(self) -> dict[str, Any]:
        """The pod status this kubelet reports (every list complete: a merge patch replaces
        lists)."""
        self._condition("PodScheduled", True)
        pending_init = [c.name for c in self.init if not (c.succeeded or (c.sidecar and c.started))]
        if self.initialized or not pending_init:
            self._condition("Initialized", True)
        else:
            self._condition(
                "Initialized",
                False,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(pending_init)}]",
            )
        sidecars = [c for c in self.init if c.sidecar]
        unready = [c.name for c in [*sidecars, *self.main] if not c.ready]
        if self.finished or self.phase in ("Succeeded", "Failed"):
            self._condition("ContainersReady", False, "PodCompleted")
            self._condition("Ready", False, "PodCompleted")
        elif unready:
            message = f"containers with unready status: [{' '.join(unready)}]"
            self._condition("ContainersReady", False, "ContainersNotReady", message)
            self._condition("Ready", False, "ContainersNotReady", message)
        else:
            self._condition("ContainersReady", True)
            gates = [
                g.get("conditionType")
                for g in (self.pod.get("spec") or {}).get("readinessGates") or []
            ]
            current = {
                c.get("type"): c.get("status")
                for c in (self.pod.get("status") or {}).get("conditions") or []
            }
            missing = [g for g in gates if current.get(g) != "True"]
            if missing:
                self._condition(
                    "Ready",
                    False,
                    "ReadinessGatesNotReady",
                    f"corresponding condition of pod readiness gate {missing[0]!r} is not True",
                )
            else:
                self._condition("Ready", True)
        ours = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        foreign = [
            c
            for c in (self.pod.get("status") or {}).get("conditions") or []
            if c.get("type") not in ours
        ]
        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": [
                *foreign,
                *(self._conditions[t] for t in ("Initialized", "Ready", "ContainersReady")),
                self._conditions["PodScheduled"],
            ],
            "hostIP": LOOPBACK,
            "hostIPs": [{"ip": LOOPBACK}],
            "podIP": LOOPBACK,
            "podIPs": [{"ip": LOOPBACK}],
            "startTime": self.start_time,
            "containerStatuses": [c.status() for c in self.main],
        }
        if self.init:
            status["initContainerStatuses"] = [c.status() for c in self.init]
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        return status

    async def sync_status(self) -> None:
        """Patch ``pods/status`` when what this kubelet reports changed."""
        if self.deleted or self.k.stopping:
            return
        async with self._status_lock:
            if self.deleted or self.k.stopping:
                return
            status = self.status()
            if status == self._last_status:
                return
            try:
                await asyncio.wait_for(
                    self.k.client.patch(
                        "v1", "pods", self.namespace, self.name, {"status": status}, sub="status"
                    ),
                    API_TIMEOUT,
                )
                self._last_status = status
            except ClientError as exc:
                if exc.status == 404:
                    return
                log.warning("pod %s: status update failed: %s", self.key, exc)
            except TRANSIENT as exc:
                log.warning("pod %s: status update failed: %s", self.key, exc)


class Kubelet:
    """Runs the Pods of this host as local processes (see the module docstring).

    ``workdir``: the working directory of containers whose workingDir is not in a volume (the
    directory ``trainer run`` started in). ``state_dir``: volumes live under
    ``<state_dir>/<ns>/<pod>/volumes`` and ``<state_dir>/<ns>/pvc``. ``on_log(pod, container,
    line)`` receives every log line as it is read. ``base_env`` (default
    :func:`default_base_env`) is the environment the processes inherit; ``node`` the capacity
    reported through resourceFieldRef (default: this host's).
    """

    def __init__(
        self,
        client: LocalClient,
        *,
        workdir: Path,
        state_dir: Path,
        on_log: LogCallback | None = None,
        base_env: Mapping[str, str] | None = None,
        node: Node | None = None,
    ) -> None:
        self.client = client
        self.workdir = Path(workdir).resolve()
        self.state_dir = Path(state_dir).resolve()
        self.on_log = on_log
        self.base_env = dict(base_env) if base_env is not None else default_base_env()
        self.node = node or local_node(self.state_dir)
        self.stopping = False
        self._stop_event = asyncio.Event()
        self._pods: dict[str, _Pod] = {}
        self._cleaning: dict[tuple[str, str], asyncio.Event] = {}
        self._groups: set[int] = set()
        self._warned: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._shutdown_task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()
        """Set once the first list of pods has been handled."""
        self.events = Recorder(client, "kubelet")
        self.scheduler_events = Recorder(client, "default-scheduler")

    # --- public -----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Watch pods and run them until :meth:`stop` (or cancellation)."""
        watcher = asyncio.get_running_loop().create_task(self._watch_loop(), name="kubelet-watch")
        stopped = asyncio.get_running_loop().create_task(self._stop_event.wait())
        try:
            await asyncio.wait({watcher, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            stopped.cancel()
            await asyncio.gather(watcher, stopped, return_exceptions=True)
            await self.stop()

    async def stop(self) -> None:
        """End every pod's processes (SIGTERM, SIGKILL after the bounded grace period) and stop
        watching; no status is written from here on. Safe to call more than once."""
        self.stopping = True
        self._stop_event.set()
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.get_running_loop().create_task(self._shutdown())
        try:
            await asyncio.shield(self._shutdown_task)
        except asyncio.CancelledError:
            self.kill_all()
            raise

    def kill_all(self) -> None:
        """SIGKILL every process group this kubelet started (synchronous, last resort)."""
        for pgid in list(self._groups):
            _killpg(pgid, signal.SIGKILL)

    def pods(self) -> dict[str, str]:
        """``namespace/name`` -> phase of every pod this kubelet runs or ran."""
        return {p.key: p.phase for p in self._pods.values()}

    def owns(self, path: str) -> bool:
        """Whether ``path`` lies under ``state_dir`` (the kubelet may create it)."""
        try:
            Path(path).resolve().relative_to(self.state_dir)
        except ValueError:
            return False
        return True

    # --- internals --------------------------------------------------------------------------------
    async def _shutdown(self) -> None:
        pods = list(self._pods.values())
        for pod in pods:
            pod.terminate()
        tasks = [p.task for p in pods if p.task is not None and not p.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=GRACE_CAP + 2)
        self.kill_all()
        for task in tasks:
            task.cancel()
        background = [t for t in self._tasks if not t.done()]
        for task in background:
            task.cancel()
        await asyncio.gather(*tasks, *background, return_exceptions=True)

    def _background(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def _warn_image(self, image: str) -> None:
        self._warn_once(
            f"image:{image}",
            f"image {image!r} is not pulled: the local executor runs container commands with "
            "this host's tools (install what the command needs here)",
        )

    async def _watch_loop(self) -> None:
        backoff = BACKOFF_START
        while not self.stopping:
            try:
                items, rv = await self.client.list("v1", "pods")
                self._resync(items)
                self.synced.set()
                backoff = BACKOFF_START
                while not self.stopping:
                    expired = False
                    async for event in self.client.watch("v1", "pods", rv):
                        kind = event.get("type")
                        obj = event.get("object") or {}
                        if kind == "ERROR":
                            expired = True
                            break
                        rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                        if kind != "BOOKMARK":
                            self._on_event(str(kind), obj)
                    if expired:
                        break
            except asyncio.CancelledError:
                raise
            except TRANSIENT as exc:
                if self.stopping:
                    return
                log.warning("kubelet: watching pods failed (%s); listing again", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_event.wait(), backoff)
                backoff = min(backoff * 2, BACKOFF_CAP)

    def _resync(self, items: list[dict[str, Any]]) -> None:
        present = {str((p.get("metadata") or {}).get("uid")) for p in items}
        for uid, pod in list(self._pods.items()):
            if uid not in present:
                self._deleted(pod)
        for item in items:
            self._on_event("ADDED", item)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if self.stopping:
            return
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        known = self._pods.get(uid)
        if kind == "DELETED":
            if known is not None:
                known.pod = obj
                self._deleted(known)
            return
        if (obj.get("spec") or {}).get("nodeName") not in (*OURS, None):
            return
        if known is not None:
            known.pod = obj
            if meta.get("deletionTimestamp"):
                known.terminate()
            return
        phase = (obj.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            return
        if (obj.get("spec") or {}).get("schedulingGates"):
            self._gated(obj)
            return
        pod = _Pod(self, obj)
        self._pods[uid] = pod
        if not pod.resumed:
            self._background(
                asyncio.get_running_loop().create_task(
                    self.scheduler_events.record(
                        obj,
                        NORMAL,
                        "Scheduled",
                        f"Successfully assigned {pod.key} to {NODE_NAME}",
                    )
                )
            )
        pod.start()

    def _gated(self, obj: dict[str, Any]) -> None:
        """Report a gated pod as the scheduler would (once per pod)."""
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("reason") == "SchedulingGated" for c in conditions):
            return
        meta = obj.get("metadata") or {}
        status = {
            "status": {
                "phase": "Pending",
                "conditions": [
                    *[c for c in conditions if c.get("type") != "PodScheduled"],
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "SchedulingGated",
                        "message": "Scheduling is blocked due to non-empty scheduling gates",
                        "lastTransitionTime": now(),
                    },
                ],
            }
        }

        async def write() -> None:
            try:
                await self.client.patch(
                    "v1",
                    "pods",
                    str(meta.get("namespace")),
                    str(meta.get("name")),
                    status,
                    sub="status",
                )
            except ClientError as exc:
                log.debug("gated pod %s: status not written: %s", meta.get("name"), exc)

        self._background(asyncio.get_running_loop().create_task(write()))

    def _deleted(self, pod: _Pod) -> None:
        """A pod is gone from the API: end its processes, then remove its directory."""
        pod.terminate(deleted=True)
        key = (pod.namespace, pod.name)
        cleaned = asyncio.Event()
        self._cleaning[key] = cleaned

        async def cleanup() -> None:
            try:
                await pod.done.wait()
                directory = podenv.pod_dir(self.state_dir, pod.pod)
                await asyncio.to_thread(shutil.rmtree, directory, True)
            finally:
                if self._pods.get(pod.uid) is pod:
                    del self._pods[pod.uid]
                cleaned.set()
                if self._cleaning.get(key) is cleaned:
                    del self._cleaning[key]

        self._background(asyncio.get_running_loop().create_task(cleanup()))
