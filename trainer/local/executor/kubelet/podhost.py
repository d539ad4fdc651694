"""What a pod being run needs from the kubelet that runs it, the state its parts share, and
the small process helpers they use.

The local kubelet is split by job: :mod:`~trainer.local.executor.kubelet.kubelet` watches pods and
owns the processes of the host, :mod:`~trainer.local.executor.kubelet.pod` runs one pod's lifecycle,
:mod:`~trainer.local.executor.kubelet.containers` one container's process and restarts,
:mod:`~trainer.local.executor.kubelet.probes` the startup, readiness and liveness probes. The pod
and its parts reach the kubelet only through :class:`PodHost`, a narrow protocol, so none of them
imports the kubelet (no cycle) and a reader sees at once what a pod may ask of it. The
containers and probes see the pod in turn through :class:`RunningPod`, and share
:class:`Container`, one container's runtime state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from trainer.kube.events import Recorder
from trainer.kube.rest import Kube
from trainer.local.executor.kubelet.logsink import LogCallback, LogSink
from trainer.local.executor.kubelet.policy.pod_status import ContainerReport
from trainer.local.executor.kubelet.policy.podenv import ContainerPlan
from trainer.local.executor.node.devices import DeviceManager
from trainer.local.executor.policy.podfields import Node, pod_hostname
from trainer.local.executor.sandbox import uts
from trainer.local.executor.sandbox.podaddress import PodAddresses
from trainer.local.executor.sandbox.sandbox import Sandbox, Sandboxes

GRACE_CAP = 5.0
"""Upper bound of terminationGracePeriodSeconds locally."""
BACKOFF_START = 0.5
BACKOFF_CAP = 5.0


class PodHost(Protocol):
    """The kubelet as a pod sees it."""

    kube: Kube
    events: Recorder
    workdir: Path
    state_dir: Path
    node: Node
    base_env: dict[str, str]
    service_env: dict[str, str]
    """The ``kubernetes`` Service's variables every container gets
    (:func:`~trainer.local.executor.kubelet.policy.incluster.service_env`)."""
    on_log: LogCallback | None
    log_dir: Path | None
    """Where container logs are kept as files (None: appended to ``pods/log`` through the
    API, the local API server's extension)."""
    sandboxes: Sandboxes | None
    addresses: PodAddresses | None
    """The pod network's addresses, given to pods in sandboxes (None: pods report 127.0.0.1)."""
    allow_exposed_ports: bool
    devices: DeviceManager | None
    """The node's GPUs and who holds them (None until the kubelet found them)."""

    @property
    def stopping(self) -> bool:
        """True once the kubelet stops: no status is written any more."""
        ...

    def background(self, task: asyncio.Task[Any]) -> None:
        """Keep a task alive until done; cancelled when the kubelet stops."""

    def warn_once(self, key: str, message: str) -> None:
        """Log ``message`` as a warning the first time ``key`` is seen."""

    def warn_image(self, image: str) -> None:
        """Warn once that ``image`` is not pulled."""

    def owns(self, path: str) -> bool:
        """Whether ``path`` lies under the kubelet's state directory."""
        ...

    def track_group(self, pgid: int) -> None:
        """Remember a process group, to kill it if the kubelet has to stop at once."""

    def untrack_group(self, pgid: int) -> None:
        """Forget a process group whose leader exited."""

    async def cleaned(self, namespace: str, name: str) -> None:
        """Return once the directory of an earlier pod of that name is removed."""


class Container:
    """A container's runtime state (process, plan, probe results), reported as its
    containerStatus."""

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
        self.killed_by_probe = False
        """The current run was killed for failing its liveness probe."""
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

    def report(self) -> ContainerReport:
        return ContainerReport(
            name=self.name,
            status=self.status(),
            sidecar=self.sidecar,
            started=self.started,
            ready=self.ready,
            succeeded=self.succeeded,
        )


class RunningPod(Protocol):
    """A pod as its containers and probes see it."""

    host: PodHost
    pod: dict[str, Any]
    namespace: str
    name: str
    uid: str
    key: str
    policy: str
    phase: str
    failed: bool
    terminating: asyncio.Event
    sinks: dict[str, LogSink]
    sandbox: Sandbox | None

    def event(self, type_: str, reason: str, message: str) -> None:
        """Post an Event about the pod (best effort, in the background)."""

    async def sync_status(self) -> None:
        """Write the pod's status if it changed."""


def killpg(pgid: int, sig: int) -> None:
    """Signal a process group; one that is gone already is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def as_float(value: Any, default: float) -> float:
    """A number from a pod field, ``default`` when absent or not a number."""
    try:
        return float(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def host_env_path(env: Mapping[str, str]) -> str:
    """The PATH a process started with ``env`` searches."""
    return env.get("PATH", os.defpath)


async def process_entry(
    pod: RunningPod, exe: str, argv: list[str], *, hosts: str | None = None
) -> tuple[str, list[str], tuple[int, ...]]:
    """How to start ``argv`` (program ``exe``) as a process of ``pod``: in its network
    sandbox when it has one, with its hostname (and ``hosts`` file) where namespaces are
    allowed. The executable, argv and the descriptors the process must inherit."""
    executable, full, keep, _ = await container_entry(pod, exe, argv, hosts=hosts)
    return executable, full, keep


async def container_entry(
    pod: RunningPod,
    exe: str,
    argv: list[str],
    *,
    hosts: str | None = None,
    cgroups: tuple[str, ...] = (),
    binds: tuple[tuple[str, str], ...] = (),
) -> tuple[str, list[str], tuple[int, ...], bool]:
    """:func:`process_entry`, and with ``cgroups`` (``cgroup.procs`` files) the process enters
    those cgroups before the command runs; ``binds`` (host directory, path) are mounted
    read-only at those paths. The last value says whether it does so itself
    (through :mod:`~trainer.local.executor.sandbox.uts`); when False the caller moves it in once it
    is started."""
    box = pod.sandbox
    if box is not None:
        executable, full = uts.command(
            pod_hostname(pod.pod), exe, argv, hosts, box.fds, cgroups, binds
        )
        return executable, full, tuple(fd for fd in box.fds if fd >= 0), True
    refused = await asyncio.to_thread(uts.available)
    if refused:
        pod.host.warn_once(
            "uts",
            f"pods share this host's hostname ({refused}): `hostname` in a pod prints this "
            "host's name; $HOSTNAME still names the pod",
        )
        return exe, argv, (), False
    executable, full = uts.command(
        pod_hostname(pod.pod), exe, argv, hosts, cgroups=cgroups, binds=binds
    )
    return executable, full, (), True
