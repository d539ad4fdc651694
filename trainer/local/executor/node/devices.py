"""The accelerators of this host, found as the NVIDIA device plugin and GPU feature discovery
find them, for the node's capacity and labels (docs/local-plane.md, "The node").

NVIDIA GPUs are listed with ``nvidia-smi --query-gpu`` (the driver's own tool, present wherever
the driver is). No ``nvidia-smi`` means no NVIDIA GPU; one that fails or hangs (bounded by
:data:`QUERY_TIMEOUT`) is reported once and the node gets no GPU, as a device plugin that cannot
reach the driver advertises none. :func:`parse_gpus` and :func:`gpu_labels` are pure.

:class:`DeviceManager` hands the GPUs out to containers as the kubelet's device manager and
the NVIDIA device plugin do: whole devices, none held by two running pods, the same ones again
for a container restarted in place, kept in a checkpoint file across executor restarts
(:func:`plan_devices`, :func:`device_env` are pure).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from trainer.machinery.files import write_file

log = logging.getLogger(__name__)

RESOURCE_NVIDIA_GPU: Final = "nvidia.com/gpu"
QUERY: Final = ("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")
QUERY_TIMEOUT: Final = 10.0


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU: its index as the driver numbers it, UUID, product name, memory."""

    index: int
    uuid: str
    product: str
    memory_mib: int


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs of ``nvidia-smi --query-gpu=index,uuid,name,memory.total
    --format=csv,noheader,nounits`` output; a line that does not parse is a ``ValueError``
    naming it."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            raise ValueError(f"unexpected nvidia-smi line {line!r}: want index, uuid, name, memory")
        index, uuid, name, memory = fields
        try:
            gpus.append(Gpu(int(index), uuid, name, int(float(memory))))
        except ValueError:
            raise ValueError(f"unexpected nvidia-smi line {line!r}") from None
    return sorted(gpus, key=lambda g: g.index)


def gpu_labels(gpus: list[Gpu]) -> dict[str, str]:
    """GPU feature discovery's node labels: product (spaces as ``-``), count, memory in MiB of
    the first GPU (a node is expected to hold one product, as GFD assumes)."""
    if not gpus:
        return {}
    first = gpus[0]
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "-".join(first.product.split()),
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.memory": str(first.memory_mib),
    }


async def discover_gpus() -> list[Gpu]:
    """This host's NVIDIA GPUs ([] without ``nvidia-smi``, or when it fails: logged)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        proc = await asyncio.create_subprocess_exec(
            tool,
            *QUERY,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), QUERY_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            log.warning("%s did not answer within %gs: the node has no GPU", tool, QUERY_TIMEOUT)
            return []
        if proc.returncode != 0:
            reason = err.decode(errors="replace").strip() or f"exit code {proc.returncode}"
            log.warning("%s failed (%s): the node has no GPU", tool, reason)
            return []
        return parse_gpus(out.decode(errors="replace"))
    except (OSError, ValueError) as exc:
        log.warning("%s: %s: the node has no GPU", tool, exc)
        return []


# --- allocation, as the kubelet's device manager does it -------------------------------------
CHECKPOINT: Final = "device-checkpoint.json"
"""Under the state directory: which pod holds which devices (the kubelet keeps the same in
``kubelet_internal_checkpoint``), so an executor restarted under running pods allocates no
device twice."""
NO_GPU: Final = "void"
"""``NVIDIA_VISIBLE_DEVICES`` of a container without GPUs (the NVIDIA container runtime's value
for "no device")."""


class AllocationError(Exception):
    """Fewer free devices than a pod's containers request (the kubelet's admission failure)."""


def gpu_request(container: Mapping[str, Any]) -> int:
    """The whole ``nvidia.com/gpu`` devices a container asks for (its request, else its
    limit: an extended resource's request equals its limit)."""
    resources = container.get("resources") or {}
    for key in ("requests", "limits"):
        value = (resources.get(key) or {}).get(RESOURCE_NVIDIA_GPU)
        if value is not None:
            try:
                return max(int(str(value)), 0)
            except ValueError:
                return 0
    return 0


def plan_devices(pod: Mapping[str, Any], free: Sequence[str]) -> dict[str, list[str]]:
    """Which of the ``free`` device ids each container of ``pod`` gets: the regular containers
    and sidecars disjoint sets, each init container the first of the pod's devices (an init
    container's devices are reused by the containers after it, as the kubelet's device manager
    reuses them). Containers asking for none are left out. Raises :class:`AllocationError`."""
    spec = pod.get("spec") or {}
    inits = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") != "Always"]
    concurrent = [
        *[c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"],
        *(spec.get("containers") or []),
    ]
    regular = sum(gpu_request(c) for c in concurrent)
    needed = max([regular, *(gpu_request(c) for c in inits)])
    if needed > len(free):
        raise AllocationError(
            f"Allocate failed due to requested number of devices unavailable for "
            f"{RESOURCE_NVIDIA_GPU}. Requested: {needed}, Available: {len(free)}, which is "
            "unexpected"
        )
    pool = list(free[:needed])
    out: dict[str, list[str]] = {}
    for c in inits:
        if gpu_request(c):
            out[str(c.get("name"))] = pool[: gpu_request(c)]
    taken = 0
    for c in concurrent:
        n = gpu_request(c)
        if n:
            out[str(c.get("name"))] = pool[taken : taken + n]
            taken += n
    return out


def device_env(devices: Sequence[str] | None) -> dict[str, str]:
    """What a container's processes get on a node with GPUs: its own devices by UUID in
    ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` (CUDA then numbers them from 0,
    whatever their index on the host), or none at all."""
    if not devices:
        return {"NVIDIA_VISIBLE_DEVICES": NO_GPU, "CUDA_VISIBLE_DEVICES": ""}
    joined = ",".join(devices)
    return {"NVIDIA_VISIBLE_DEVICES": joined, "CUDA_VISIBLE_DEVICES": joined}


class DeviceManager:
    """The node's GPUs and which pod holds which, kept in a checkpoint file."""

    def __init__(self, gpus: Sequence[Gpu], checkpoint: Path | None) -> None:
        self.gpus = list(gpus)
        self.checkpoint = checkpoint
        self.held: dict[str, dict[str, Any]] = {}
        """Pod uid -> ``{"pod": "ns/name", "containers": {name: [uuid, ...]}}``."""
        if checkpoint is not None:
            self._load()

    def _load(self) -> None:
        assert self.checkpoint is not None
        try:
            data = json.loads(self.checkpoint.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("device checkpoint %s unreadable, starting empty: %s", self.checkpoint, exc)
            return
        known = {g.uuid for g in self.gpus}
        for uid, entry in (data.get("pods") or {}).items() if isinstance(data, dict) else ():
            containers = entry.get("containers") if isinstance(entry, dict) else None
            if not isinstance(containers, dict):
                continue
            kept = {
                str(name): [str(d) for d in ids if d in known]
                for name, ids in containers.items()
                if isinstance(ids, list)
            }
            self.held[str(uid)] = {"pod": str(entry.get("pod") or ""), "containers": kept}

    def _save(self) -> None:
        if self.checkpoint is None:
            return
        data = json.dumps({"version": 1, "pods": self.held}, indent=1, sort_keys=True)
        try:
            write_file(self.checkpoint, data.encode(), 0o600)
        except OSError as exc:
            log.warning("device checkpoint %s not written: %s", self.checkpoint, exc)

    def in_use(self) -> set[str]:
        return {
            d for entry in self.held.values() for ids in entry["containers"].values() for d in ids
        }

    def free(self) -> list[str]:
        used = self.in_use()
        return [g.uuid for g in self.gpus if g.uuid not in used]

    def allocate(self, pod: Mapping[str, Any]) -> dict[str, list[str]]:
        """The devices of each container of ``pod`` (the same ones again for a pod that holds
        some: a container restarted in place, or a pod the executor finds running after a
        restart). Raises :class:`AllocationError` when too few are free."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        entry = self.held.get(uid)
        if entry is not None:
            return {k: list(v) for k, v in entry["containers"].items()}
        plan = plan_devices(pod, self.free())
        if plan:
            self.held[uid] = {
                "pod": f"{meta.get('namespace')}/{meta.get('name')}",
                "containers": plan,
            }
            self._save()
        return plan

    def release(self, uid: str) -> None:
        """The pod ended: its devices are free again."""
        if self.held.pop(uid, None) is not None:
            self._save()

    def retain(self, uids: set[str]) -> None:
        """Forget every pod not in ``uids`` (those still running here after a restart)."""
        gone = [uid for uid in self.held if uid not in uids]
        for uid in gone:
            del self.held[uid]
        if gone:
            self._save()
