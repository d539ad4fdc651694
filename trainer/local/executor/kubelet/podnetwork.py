"""A pod's network on this node: its sandbox (docs/local-plane.md, "The network sandbox") and,
with a pod network, its own address with its declared ports published there
(:mod:`~trainer.local.executor.sandbox.podaddress`).
:class:`~trainer.local.executor.kubelet.pod.LocalPod` calls these before its containers start; each
answers what it got, or why the pod must not run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.local.executor.kubelet.podhost import PodHost
from trainer.local.executor.kubelet.policy.podenv import ContainerPlan
from trainer.local.executor.policy import sshports
from trainer.local.executor.policy.podfields import LOOPBACK
from trainer.local.executor.sandbox import podaddress, sandbox

log = logging.getLogger(__name__)

MPI_WITHOUT_INTERFACE = (
    "MPI pods run here, but their sandbox has no network interface besides loopback, which "
    "OpenMPI's daemons do not use: an OpenMPI mpirun will fail with \"A daemon failed to report "
    "back\" (MPICH's runs). pasta gives the sandbox one: install Debian's passt package "
    '(hack/system-packages.sh; docs/local-plane.md, "MPI on the local plane")'
)
SANDBOX_FAILED = "FailedCreatePodSandBox"


@dataclass(frozen=True)
class Refusal:
    """Why the pod must not run: its status reason and message (also its Event's)."""

    reason: str
    message: str


@dataclass
class Network:
    """The pod's IP and the servers that publish its ports (closed by the pod when it ends)."""

    address: str = LOOPBACK
    published: list[asyncio.Server] = field(default_factory=list)


async def enter_sandbox(
    host: PodHost, pod: dict[str, Any], key: str, plans: Sequence[tuple[str, ContainerPlan | None]]
) -> tuple[sandbox.Sandbox | None, Refusal | None]:
    """The pod's sandbox. Where none can be made the pod runs in the host's namespace, after one
    warning, unless it runs an elastic rendezvous and exposed ports were not allowed."""
    boxes = host.sandboxes
    why = "turned off" if boxes is None else await asyncio.to_thread(sandbox.available)
    if boxes is not None and not why:
        try:
            box = await boxes.acquire(pod)
        except OSError as exc:
            return None, Refusal(SANDBOX_FAILED, f"Failed to create pod sandbox: {exc}")
        if box.egress:
            host.warn_once("sandbox-egress", sandbox.no_egress(box.egress))
            if sshports.runs_sshd(pod):
                host.warn_once("sandbox-mpi", MPI_WITHOUT_INTERFACE)
        return box, None
    host.warn_once("sandbox", sandbox.EXPOSED.format(why=why))
    if host.allow_exposed_ports:
        return None, None
    for name, plan in plans:
        if plan is not None and sandbox.elastic_rendezvous(plan.argv, plan.env):
            message = sandbox.ELASTIC_REFUSED.format(why=why, container=name)
            log.warning("pod %s: %s", key, message)
            return None, Refusal("NetworkSandboxUnavailable", message)
    return None, None


async def publish(
    host: PodHost, pod: dict[str, Any], uid: str, box: sandbox.Sandbox | None, network: Network
) -> Refusal | None:
    """With a pod network and a sandbox, give the pod its address and publish its declared TCP
    ports there (into ``network``)."""
    if host.addresses is None or box is None:
        return None
    try:
        network.address = host.addresses.assign(uid)
        for port in podaddress.tcp_ports(pod):
            network.published.append(await box.publish(network.address, port))
    except OSError as exc:
        return Refusal(SANDBOX_FAILED, f"Failed to set up the pod's network: {exc}")
    return None
