"""This host as a Node of the local plane, registered and kept alive as a kubelet does.

At start the kubelet registers the Node ``local`` (the ``spec.nodeName`` its pods are bound to;
docs/local-plane.md, "The node") with this host's capacity, and renews the node's Lease in
``kube-node-lease`` every :data:`LEASE_RENEW_SECONDS`, as the kubelet's node heartbeat does
(https://kubernetes.io/docs/concepts/architecture/nodes/#node-heartbeats). ``kubectl get
nodes`` and ``kubectl describe node local`` then read it like any cluster's node.

:func:`node_object` and :func:`lease_object` are pure; :class:`NodeHeartbeat` writes them
through the plane's client. Allocatable is capacity less what the node configuration reserves;
the local scheduler (:mod:`~trainer.local.executor.scheduler.scheduler`) binds pods against it.
NVIDIA GPUs are found with ``nvidia-smi`` (:mod:`~trainer.local.executor.node.devices`) and
advertised as ``nvidia.com/gpu`` with GPU feature discovery's labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import time
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

from trainer.kube import resources as r
from trainer.kube.rest import APIError, Kube
from trainer.local.executor.node.config import NodeConfig
from trainer.local.executor.node.devices import RESOURCE_NVIDIA_GPU, Gpu, discover_gpus, gpu_labels
from trainer.local.executor.policy.podfields import NODE_NAME, Node
from trainer.machinery.quantity import Quantity
from trainer.machinery.times import format_micro_time, now

log = logging.getLogger(__name__)

LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_DURATION_SECONDS: Final = 40
"""The kubelet's default ``nodeLeaseDurationSeconds``."""
LEASE_RENEW_SECONDS: Final = 10.0
"""A quarter of the lease's duration, as the kubelet renews it."""
MAX_PODS: Final = 110
"""The kubelet's default ``maxPods``."""
KUBELET_VERSION: Final = "v1.32.0-trainer-local"
"""The version the local API server reports (``/version``), as a kubelet reports its own."""
FIELD_MANAGER: Final = "kubelet"

_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le"}


def capacity(node: Node, gpus: Sequence[Gpu] = ()) -> dict[str, str]:
    """The resources a kubelet reports: cores, memory in Ki, ephemeral storage, pods, and
    ``nvidia.com/gpu`` when the host has NVIDIA GPUs (as the device plugin advertises them)."""
    resources = {
        "cpu": str(node.cpus),
        "memory": f"{node.memory // 1024}Ki",
        "ephemeral-storage": f"{node.ephemeral_storage // 1024}Ki",
        "pods": str(MAX_PODS),
    }
    if gpus:
        resources[RESOURCE_NVIDIA_GPU] = str(len(gpus))
    return resources


def _os_image() -> str:
    with contextlib.suppress(OSError), open("/etc/os-release", encoding="utf-8") as f:
        for line in f:
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


def allocatable(resources: Mapping[str, str], reserved: Mapping[str, Quantity]) -> dict[str, str]:
    """Capacity less what ``--node-config``'s ``reserved`` keeps back (never below zero), as
    the kubelet's systemReserved."""
    out = dict(resources)
    for name, keep in reserved.items():
        if name in out:
            have = Quantity.parse(out[name])
            out[name] = str(Quantity(max(have.value - keep.value, Fraction(0)), have.format))
    return out


def node_object(
    node: Node,
    stamp: str,
    *,
    name: str = NODE_NAME,
    gpus: Sequence[Gpu] = (),
    config: NodeConfig | None = None,
) -> dict[str, Any]:
    """The Node a kubelet on this host would register, Ready as of ``stamp``, with GPU
    feature discovery's labels when it has NVIDIA ``gpus``, and ``config``'s declared
    capacity, reservations, labels and taints."""
    config = config or NodeConfig()
    arch = _ARCH.get(platform.machine(), platform.machine())
    system = platform.system().lower()
    resources = capacity(node, gpus)
    for resource, declared in config.capacity.items():
        resources[resource] = str(declared)

    def condition(type_: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": system,
                "kubernetes.io/arch": arch,
                "beta.kubernetes.io/os": system,
                "beta.kubernetes.io/arch": arch,
                **gpu_labels(list(gpus)),
                **config.labels,
            },
        },
        "spec": {"taints": [dict(t) for t in config.taints]} if config.taints else {},
        "status": {
            "capacity": resources,
            "allocatable": allocatable(resources, config.reserved),
            "conditions": [
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": platform.release(),
                "osImage": _os_image(),
                "containerRuntimeVersion": "local://processes",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": system,
                "architecture": arch,
            },
        },
    }


def lease_object(name: str, stamp: str) -> dict[str, Any]:
    """The node's Lease, renewed at ``stamp`` (MicroTime, as the kubelet writes it)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": stamp,
        },
    }


def kept_taints(
    declared: Sequence[Mapping[str, Any]], existing: Mapping[str, Any]
) -> list[dict[str, Any]] | None:
    """The taints to apply when the Node ``existing`` is registered again: its own, as they
    are, when they already hold every ``declared`` one (None: apply ``declared``). Node taints
    are an atomic list, so applying only ours would drop those the node lifecycle controller
    added (``node.kubernetes.io/not-ready`` while the node was not Ready yet), and
    kube-apiserver's NodeRestriction refuses a node that changes its taints ("node ... is not
    allowed to modify taints"); a kubelet sets them only when it creates its Node."""
    have = [dict(t) for t in (existing.get("spec") or {}).get("taints") or []]

    def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        return all(a.get(k) == b.get(k) for k in ("key", "value", "effect"))

    if have and all(any(same(want, t) for t in have) for want in declared):
        return have
    return None


class NodeHeartbeat:
    """Registers the Node, then renews its Lease until stopped. Failures are logged and
    retried at the next beat: a heartbeat never stops the kubelet."""

    def __init__(
        self, kube: Kube, node: Node, *, name: str = NODE_NAME, config: NodeConfig | None = None
    ) -> None:
        self.kube = kube
        self.node = node
        self.name = name
        self.config = config or NodeConfig()
        self.gpus: list[Gpu] | None = None if self.config.gpus is None else list(self.config.gpus)
        """The node's NVIDIA GPUs: declared, else found at the first registration."""
        self.registered = asyncio.Event()
        """Set once the Node has been written."""

    async def find_gpus(self) -> list[Gpu]:
        """The node's GPUs: declared, else found with nvidia-smi (once)."""
        if self.gpus is None:
            self.gpus = await discover_gpus()
        return self.gpus

    async def register(self) -> None:
        gpus = await self.find_gpus()
        obj = node_object(self.node, now(), name=self.name, gpus=gpus, config=self.config)
        existing = await self.kube.get(r.NODES, None, self.name)
        if existing is None:
            # One POST with its status, as a kubelet creates its Node: nobody reads a Node
            # without capacity (the scheduler would find no GPU on it).
            try:
                await self.kube.create(obj, gvr=r.NODES, field_manager=FIELD_MANAGER)
            except APIError as exc:
                if not exc.is_already_exists:  # created meanwhile: registered again below
                    raise
            else:
                self.registered.set()
                return
            existing = await self.kube.get(r.NODES, None, self.name) or {}
        kept = kept_taints(obj["spec"].get("taints") or [], existing)
        if kept is not None:
            obj["spec"]["taints"] = kept
        status = {"status": obj.pop("status")}
        await self.kube.apply(obj, FIELD_MANAGER, gvr=r.NODES)
        await self.kube.patch(r.NODES, None, self.name, status, subresource="status")
        self.registered.set()

    async def beat(self) -> None:
        lease = lease_object(self.name, format_micro_time(time.time()))
        await self.kube.apply(lease, FIELD_MANAGER, gvr=r.LEASES)

    async def run(self) -> None:
        while True:
            try:
                if not self.registered.is_set():
                    await self.register()
                await self.beat()
            except (APIError, ValueError) as exc:
                log.warning("node %s: heartbeat failed: %s", self.name, exc)
            await asyncio.sleep(LEASE_RENEW_SECONDS)
