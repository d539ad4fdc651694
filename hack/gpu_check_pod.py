"""What the pods of ``hack/gpu_check.py`` run (docs/local-plane.md, "Checking a GPU machine").

Two modes, each writing one JSON report into ``$GPU_CHECK_OUT`` that the driver reads:

``probe``
    What a container sees, without CUDA unless asked: ``CUDA_VISIBLE_DEVICES`` and
    ``NVIDIA_VISIBLE_DEVICES`` as given (``null`` when unset), start and end times. With
    ``GPU_CHECK_MEET=K`` it first waits (at most ``GPU_CHECK_MEET_TIMEOUT`` seconds, else exit
    3) until K pods of its group have written their arrival file, which only pods running at
    the same time can do; with ``GPU_CHECK_HOLD=S`` it then holds for S seconds (so a job
    queued behind it has to wait); with ``GPU_CHECK_TORCH=1`` it reports what torch sees
    (``torch.cuda.is_available()``, ``device_count()``, the devices' UUIDs).

``train``
    A small DDP program over NCCL, run under torchrun: a linear model on ``cuda:LOCAL_RANK``,
    ``GPU_CHECK_STEPS`` timed steps after 20 warm-up ones; reports the rank, world size, CUDA
    device count, the UUID of its device and steps/s.

Only the standard library is imported up front: a probe without torch starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

WARMUP_STEPS = 20
MEET_POLL_S = 0.05


def _out() -> Path:
    return Path(os.environ["GPU_CHECK_OUT"])


def _write(name: str, report: dict[str, Any]) -> None:
    """Write ``name`` whole (a reader never sees half of it)."""
    part = _out() / f".{name}.part"
    part.write_text(json.dumps(report, sort_keys=True), encoding="utf-8")
    part.replace(_out() / name)


def _visible() -> dict[str, Any]:
    return {
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia_visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "hostname": os.environ.get("HOSTNAME") or socket.gethostname(),
    }


def _uuid(index: int) -> str | None:
    """The UUID of CUDA device ``index`` as nvidia-smi writes it, lower-cased (``gpu-...``: the
    driver compares without case), None when this torch cannot say. torch gives it without
    the ``GPU-`` prefix."""
    import torch  # noqa: PLC0415 - a probe without torch does not load it

    raw = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if raw is None:
        return None
    text = str(raw).lower()
    return text if text.startswith(("gpu-", "mig-")) else f"gpu-{text}"


def _torch_view() -> dict[str, Any]:
    import torch  # noqa: PLC0415 - as above
    import torch.distributed  # noqa: PLC0415

    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    return {
        "torch": torch.__version__,
        "cuda_available": available,
        "device_count": count,
        "uuids": [_uuid(i) for i in range(count)],
        "nccl": torch.distributed.is_available() and torch.distributed.is_nccl_available(),
    }


def _meet(group: str, me: str, peers: int, timeout: float) -> bool:
    """Announce ``me`` in ``group``; wait until ``peers`` pods of the group have."""
    (_out() / f"here-{group}-{me}").touch()
    deadline = time.monotonic() + timeout
    while len(list(_out().glob(f"here-{group}-*"))) < peers:
        if time.monotonic() > deadline:
            return False
        time.sleep(MEET_POLL_S)
    return True


def probe() -> int:
    group = os.environ["GPU_CHECK_GROUP"]
    report: dict[str, Any] = {"mode": "probe", "group": group, "start": time.time()}
    report.update(_visible())
    if os.environ.get("GPU_CHECK_TORCH") == "1":
        report.update(_torch_view())
    peers = int(os.environ.get("GPU_CHECK_MEET", "0"))
    if peers:
        timeout = float(os.environ.get("GPU_CHECK_MEET_TIMEOUT", "60"))
        report["met"] = _meet(group, report["hostname"], peers, timeout)
    time.sleep(float(os.environ.get("GPU_CHECK_HOLD", "0")))
    report["end"] = time.time()
    _write(f"probe-{group}-{report['hostname']}.json", report)
    return 0 if report.get("met", True) else 3


def train() -> int:
    import torch  # noqa: PLC0415 - as above
    import torch.distributed as dist  # noqa: PLC0415
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    group = os.environ["GPU_CHECK_GROUP"]
    steps = int(os.environ.get("GPU_CHECK_STEPS", "300"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    report: dict[str, Any] = {"mode": "train", "group": group, "start": time.time()}
    report.update(_visible())
    report["device_count"] = torch.cuda.device_count()
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    report["uuid"] = _uuid(local_rank)
    dist.init_process_group("nccl")
    report["rank"], report["world_size"] = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(256, 256).to(device), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(64, 256, device=device)
    began = 0.0
    for step in range(WARMUP_STEPS + steps):
        if step == WARMUP_STEPS:
            torch.cuda.synchronize()
            began = time.perf_counter()
        optimizer.zero_grad()
        loss = model(data).square().mean()
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    report["steps"] = steps
    report["steps_per_s"] = steps / (time.perf_counter() - began)
    report["loss"] = float(loss.item())
    dist.barrier()
    dist.destroy_process_group()
    report["end"] = time.time()
    _write(f"train-{group}-rank{report['rank']}.json", report)
    return 0


def main(argv: list[str]) -> int:
    modes = {"probe": probe, "train": train}
    if len(argv) != 2 or argv[1] not in modes:
        print(f"usage: {argv[0]} probe|train", file=sys.stderr)
        return 2
    return modes[argv[1]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
