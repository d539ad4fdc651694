"""The accelerators of this host, found as the NVIDIA device plugin and GPU feature discovery
find them, for the node's capacity and labels (docs/local-plane.md, "The node").

NVIDIA GPUs are listed with ``nvidia-smi --query-gpu`` (the driver's own tool, present wherever
the driver is). No ``nvidia-smi`` means no NVIDIA GPU; one that fails or hangs (bounded by
:data:`QUERY_TIMEOUT`) is reported once and the node gets no GPU, as a device plugin that cannot
reach the driver advertises none. :func:`parse_gpus` and :func:`gpu_labels` are pure.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from typing import Final

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
