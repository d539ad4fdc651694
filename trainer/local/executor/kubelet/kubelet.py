"""The local kubelet: runs every Pod bound to this host (``spec.nodeName: local``, set by the
scheduler, :mod:`~trainer.local.executor.scheduler.scheduler`) as local processes and reports it
back through the API, like a kubelet on a one-node cluster.

It talks to the API server only through the project's client, :class:`~trainer.kube.rest.Kube`
(:mod:`~trainer.local.executor.api`): a watch cache of Pods in all namespaces
(:class:`~trainer.kube.informer.Informer`: re-listed after a 410, retried with back-off after
an error; the executor shares its own), GETs of the ConfigMaps and Secrets a pod references,
merge patches of ``pods/status`` and appends to ``pods/log``.

A pod, once seen (and not yet finished):

1. Is ``Pending`` with ``PodScheduled``; its ConfigMaps / Secrets are read and its environment,
   argv and volumes resolved (:mod:`~trainer.local.executor.kubelet.policy.podenv`: env and
   ``$(VAR)`` semantics; :mod:`~trainer.local.executor.kubelet.policy.rewrites`: DNS / port /
   mount-path rewrites; :mod:`~trainer.local.executor.kubelet.policy.volumes`: volume layout). A
   missing ConfigMap, Secret or key keeps the containers waiting (``CreateContainerConfigError`` /
   ``ContainerCreating``) and is retried, as a kubelet does.
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
   A startupProbe gates ``started``, readiness and liveness. Without a probe a container is
   ready once started. A livenessProbe runs every periodSeconds (at most 5 s here) from
   initialDelaySeconds after the process started; failureThreshold failures in a row kill the
   container (``Unhealthy`` and ``Killing`` Events, SIGTERM, SIGKILL after the probe's or the
   pod's grace period, 2 to 5 s here), which restarts unless the restartPolicy is Never
   (:mod:`~trainer.local.executor.kubelet.probes`).
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

GPUs are handed to the pod's containers before they start
(:class:`~trainer.local.executor.node.devices.DeviceManager`): each sees only its own.

Memory and CPU limits hold where the host allows cgroups
(:mod:`~trainer.local.executor.sandbox.cgroups`).

A pod found already started by an earlier executor (``status.startTime`` set, not finished)
has lost its processes: with ``restartPolicy: Never`` it is failed, otherwise run again.

Where each part lives: this module watches pods, starts a
:class:`~trainer.local.executor.kubelet.pod.LocalPod` per pod and owns the host's process groups;
:mod:`~trainer.local.executor.kubelet.pod` is one pod's lifecycle (steps 1, 2, 5, 6),
:mod:`~trainer.local.executor.kubelet.containers` a container's process and restarts,
:mod:`~trainer.local.executor.kubelet.probes` the probes,
:mod:`~trainer.local.executor.kubelet.logsink` the log (step 3) and
:mod:`~trainer.local.executor.kubelet.policy.pod_status` the status reported (step 4), a pure
function of the containers' states. Every container's process runs in its JobSet's network sandbox
(:mod:`~trainer.local.executor.sandbox.sandbox`) and gets the pod's hostname
(:mod:`~trainer.local.executor.sandbox.uts`), and MPI pods get sshd and ssh set up for this host
(:mod:`~trainer.local.executor.sandbox.ssh`, :mod:`~trainer.local.executor.kubelet.sshpod`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Iterable, Mapping
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainer.kube.informer import DELETED, Informer
from trainer.kube.resources import PODS
from trainer.kube.rest import Kube
from trainer.local.executor.api import confirm_deletion, recorder
from trainer.local.executor.kubelet.logsink import LogCallback, log_file
from trainer.local.executor.kubelet.pod import LocalPod
from trainer.local.executor.kubelet.podhost import GRACE_CAP, killpg
from trainer.local.executor.kubelet.policy import incluster, volumes
from trainer.local.executor.node.config import NodeConfig
from trainer.local.executor.node.devices import CHECKPOINT, DeviceManager
from trainer.local.executor.node.heartbeat import NodeHeartbeat
from trainer.local.executor.policy.podfields import LOOPBACK, NODE_NAME, Node
from trainer.local.executor.sandbox import cgroups
from trainer.local.executor.sandbox.podaddress import PodAddresses
from trainer.local.executor.sandbox.sandbox import Sandboxes
from trainer.local.executor.sandbox.sshnode import NodeSSHPorts

SANDBOX_DIR = "sandboxes"
"""Under the state directory: each sandbox's private files (gRPC probe sockets)."""

log = logging.getLogger(__name__)


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
    rather than arrive at exit; a container's own env overrides both), without
    ``KUBECONFIG``."""
    env = dict(os.environ)
    # A pod is inside the cluster: its clients use the in-cluster configuration (docs/
    # local-plane.md, "In-cluster configuration"), never the kubeconfig of whoever started
    # the plane.
    env.pop("KUBECONFIG", None)
    bindir = os.path.dirname(sys.executable)
    path = env.get("PATH", os.defpath)
    if bindir and bindir not in path.split(os.pathsep):
        env["PATH"] = bindir + os.pathsep + path
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Kubelet:
    """Runs the Pods of this host as local processes (see the module docstring).

    ``workdir``: the working directory of containers whose workingDir is not in a volume (the
    directory ``trainer run`` started in). ``state_dir``: volumes live under
    ``<state_dir>/<ns>/<pod>/volumes`` and ``<state_dir>/<ns>/pvc``. ``on_log(pod, container,
    line)`` receives every log line as it is read. ``base_env`` (default
    :func:`default_base_env`) is the environment the processes inherit; ``node`` the capacity
    reported through resourceFieldRef (default: this host's). The pods of a JobSet share a
    network sandbox (:mod:`~trainer.local.executor.sandbox.sandbox`) into which ``plane_ports`` (the
    status server's, the API server's) are forwarded; ``sandbox=False`` runs them in the host's
    network namespace, as happens anyway where the kernel refuses namespaces, and then a pod
    with an elastic rendezvous is refused unless ``allow_exposed_ports``. ``pods`` is a watch
    cache of every pod to share (the executor's); without one the kubelet keeps its own, of
    the pods bound to its node. ``node_name`` is the Node it registers and runs the pods of
    (``local`` on the local plane; another name as a node of a real cluster, ``trainer
    node``). ``log_dir``: keep container logs as files there rather than appending them to
    ``pods/log`` (an extension of the local API server that kube-apiserver lacks).
    """

    def __init__(
        self,
        kube: Kube,
        *,
        pods: Informer | None = None,
        workdir: Path,
        state_dir: Path,
        on_log: LogCallback | None = None,
        base_env: Mapping[str, str] | None = None,
        node: Node | None = None,
        node_config: NodeConfig | None = None,
        plane_ports: Iterable[int] = (),
        sandbox: bool = True,
        allow_exposed_ports: bool = False,
        node_name: str = NODE_NAME,
        log_dir: Path | None = None,
        pod_network: IPv4Network | None = None,
    ) -> None:
        self.kube = kube
        self.addresses = PodAddresses(pod_network) if pod_network is not None else None
        self.node_name = node_name
        self.log_dir = Path(log_dir).resolve() if log_dir is not None else None
        self.informer = pods
        self._own_informer = pods is None
        self.workdir = Path(workdir).resolve()
        self.state_dir = Path(state_dir).resolve()
        self.on_log = on_log
        self.base_env = dict(base_env) if base_env is not None else default_base_env()
        api_port = urlsplit(str(kube.api.configuration.host)).port
        self.service_env = incluster.service_env(LOOPBACK, api_port) if api_port else {}
        self.node = node or local_node(self.state_dir)
        self.heartbeat = NodeHeartbeat(kube, self.node, name=node_name, config=node_config)
        """Registers this host's Node and renews its Lease
        (:mod:`~trainer.local.executor.node.heartbeat`)."""
        self.allow_exposed_ports = allow_exposed_ports
        self.devices: DeviceManager | None = None
        """The node's GPUs as the device plugin hands them out (set before any pod runs)."""
        self.sandboxes: Sandboxes | None = (
            Sandboxes(self.state_dir / SANDBOX_DIR, plane_ports) if sandbox else None
        )
        self.stopping = False
        self._stop_event = asyncio.Event()
        self._pods: dict[str, LocalPod] = {}
        self._ssh_ports = NodeSSHPorts()  # for MPI pods a real JobSet controller made
        self._cleaning: dict[tuple[str, str], asyncio.Event] = {}
        self._confirming: set[str] = set()
        self._groups: set[int] = set()
        self._warned: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._shutdown_task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()
        """Set once the first list of pods has been handled."""
        self.events = recorder(kube, "kubelet", host=node_name)

    # --- public -----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Watch pods and run them until :meth:`stop` (or cancellation)."""
        loop = asyncio.get_running_loop()
        watcher = loop.create_task(self._watch_loop(), name="kubelet-watch")
        heartbeat = loop.create_task(self.heartbeat.run(), name="kubelet-node-heartbeat")
        # Empty cgroups an earlier executor left (docs/local-plane.md, "Limits").
        self.background(loop.create_task(asyncio.to_thread(cgroups.sweep)))
        stopped = loop.create_task(self._stop_event.wait())
        try:
            await asyncio.wait({watcher, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (watcher, heartbeat, stopped):
                task.cancel()
            await asyncio.gather(watcher, heartbeat, stopped, return_exceptions=True)
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
            killpg(pgid, signal.SIGKILL)

    def process_groups(self) -> frozenset[int]:
        """The process groups of containers still running (empty once :meth:`stop` returned)."""
        return frozenset(self._groups)

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

    # --- what a pod may ask (PodHost) -------------------------------------------------------------
    def background(self, task: asyncio.Task[Any]) -> None:
        """Keep ``task`` referenced until done; cancelled by :meth:`stop`."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def warn_image(self, image: str) -> None:
        # At debug level: nothing to do while the command runs, and a command this host lacks
        # fails its container with a message that says what to install (containers.exec_once).
        key = f"image:{image}"
        if key not in self._warned:
            self._warned.add(key)
            log.debug(
                "image %r is not pulled: the local executor runs container commands with this "
                "host's tools",
                image,
            )

    def track_group(self, pgid: int) -> None:
        self._groups.add(pgid)

    def untrack_group(self, pgid: int) -> None:
        self._groups.discard(pgid)

    async def cleaned(self, namespace: str, name: str) -> None:
        """Wait until the directory of a deleted pod of that name is removed (a new pod of the
        same name must not find, or lose, the old one's files)."""
        previous = self._cleaning.get((namespace, name))
        if previous is not None:
            await previous.wait()

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
        if self.sandboxes is not None:
            await self.sandboxes.close()

    async def _watch_loop(self) -> None:
        """Run every pod the cache holds, then follow its changes until stopped."""
        gpus = await self.heartbeat.find_gpus()
        self.devices = DeviceManager(gpus, self.state_dir / CHECKPOINT)
        informer = self.informer
        if informer is None:
            # Only this node's pods, as a kubelet watches them (a node's credentials may
            # read no more under the Node authorizer's rules).
            informer = self.informer = Informer(
                self.kube, PODS, field_selector=f"spec.nodeName={self.node_name}"
            )
        if self._own_informer:
            await informer.start()
        else:
            await informer.wait_synced()
        # No await between the two: no change falls between the snapshot and the handler.
        informer.add_handler(self._on_change)
        items = informer.list()
        # Devices held by pods that are gone are free again; those still here keep theirs.
        self.devices.retain(
            {
                str((p.get("metadata") or {}).get("uid"))
                for p in items
                if (p.get("spec") or {}).get("nodeName") == self.node_name
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            }
        )
        for item in items:
            self._on_event("ADDED", item)
        self.synced.set()
        try:
            await self._stop_event.wait()
        finally:
            if self._own_informer:
                await informer.stop()

    def _on_change(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        # A pod deleted and created again under its name while the watch was down arrives as
        # one change of the name: the old pod is gone.
        old_uid = (old or {}).get("metadata", {}).get("uid")
        if kind != DELETED and old_uid and old_uid != (obj.get("metadata") or {}).get("uid"):
            self._on_event(DELETED, old or {})
        self._on_event(kind, obj)

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
        if (obj.get("spec") or {}).get("nodeName") != self.node_name:
            return  # not bound to this node (yet: the scheduler binds it)
        obj = self._ssh_ports.overlay(obj, (p.pod for p in self._pods.values() if p.uid != uid))
        if known is not None:
            known.pod = obj
            if meta.get("deletionTimestamp"):
                known.terminate()
                self._confirm_deletion(known)
            return
        phase = (obj.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp"):
            self.background(
                asyncio.get_running_loop().create_task(confirm_deletion(self.kube, obj))
            )
            return
        if phase in ("Succeeded", "Failed"):
            return
        pod = LocalPod(obj, host=self)
        self._pods[uid] = pod
        pod.start()

    def _confirm_deletion(self, pod: LocalPod) -> None:
        """Once a pod being deleted gracefully has stopped (its last status written), delete
        it for good (once per pod)."""
        if pod.uid in self._confirming:
            return
        self._confirming.add(pod.uid)

        async def confirm() -> None:
            try:
                await pod.done.wait()
                await confirm_deletion(self.kube, pod.pod)
            finally:
                self._confirming.discard(pod.uid)

        self.background(asyncio.get_running_loop().create_task(confirm()))

    def _deleted(self, pod: LocalPod) -> None:
        """A pod is gone from the API: end its processes, then remove its directory."""
        pod.terminate(deleted=True)
        key = (pod.namespace, pod.name)
        cleaned = asyncio.Event()
        self._cleaning[key] = cleaned

        async def cleanup() -> None:
            try:
                await pod.done.wait()
                directory = volumes.pod_dir(self.state_dir, pod.pod)
                await asyncio.to_thread(shutil.rmtree, directory, True)
                if self.log_dir is not None:  # its logs go with it, as a kubelet's do
                    logs = log_file(self.log_dir, pod.namespace, pod.name, pod.uid, "-", 0)
                    await asyncio.to_thread(shutil.rmtree, logs.parent.parent, True)
            finally:
                if self._pods.get(pod.uid) is pod:
                    del self._pods[pod.uid]
                self._ssh_ports.release(pod.pod, (p.pod for p in self._pods.values()))
                cleaned.set()
                if self._cleaning.get(key) is cleaned:
                    del self._cleaning[key]

        self.background(asyncio.get_running_loop().create_task(cleanup()))
