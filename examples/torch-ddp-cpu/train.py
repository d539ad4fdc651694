"""Tiny DistributedDataParallel training on CPU (gloo), for examples/torch-ddp-cpu.

Fits a noisy linear function y = X @ w_true + b_true with a small MLP. Every
rank generates its own shard of synthetic data from a per-rank seed (manual
sharding, no data files), DDP all-reduces the gradients, and rank 0 prints the
global mean loss after every epoch and ``final loss: <x>`` at the end.

Launch it with torchrun, which reads the PET_* env that the controller injects
(PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
PET_MASTER_PORT) and sets RANK / WORLD_SIZE / MASTER_ADDR for each worker::

    torchrun examples/torch-ddp-cpu/train.py

Run as a plain ``python`` script it falls back to a single-process group.

With the TrainJobStatus feature gate on (``trainer up --feature-gates TrainJobStatus=true``),
rank 0 also reports its progress, an ETA and the loss to the status server after every epoch
(docs/status-server.md), which ``trainer dashboard`` plots; without it nothing is sent.

Knobs (env): EPOCHS (default 3), SAMPLES_PER_RANK (default 512),
BATCH_SIZE (default 32), LR (default 0.05), SEED (default 1234), CHECKPOINT_PATH (default
checkpoint.pt: rank 0 saves the model's state_dict there).

torch is imported inside main() only, so this module can be byte-compiled and
imported without torch installed.
"""

from __future__ import annotations

import datetime
import json
import os
import ssl
import sys
import time
import urllib.request

IN_FEATURES = 8
HIDDEN = 16


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value.strip() else default


def report_progress(epoch: int, epochs: int, loss: float, started: float) -> None:
    """POST progress, ETA and loss to the status server when the controller gave us one
    (KUBEFLOW_TRAINER_SERVER_URL); a failed report is printed, never fatal."""
    url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL")
    if not url:
        return
    elapsed = time.monotonic() - started
    status = {
        "progressPercentage": int(100 * epoch / epochs),
        "estimatedRemainingSeconds": int(elapsed / epoch * (epochs - epoch)),
        "metrics": [{"name": "loss", "value": f"{loss:.6f}"}],
        "lastUpdatedTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    try:
        with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as fh:
            token = fh.read()
        ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
        req = urllib.request.Request(
            url,
            data=json.dumps({"trainerStatus": status}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10):
            pass
    except (OSError, KeyError) as exc:
        print(f"progress report failed: {exc}", flush=True)


def main() -> int:
    import torch  # noqa: PLC0415 - torch is optional; see the module docstring
    import torch.distributed as dist  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    epochs = _env_int("EPOCHS", 3)
    samples = _env_int("SAMPLES_PER_RANK", 512)
    batch_size = _env_int("BATCH_SIZE", 32)
    lr = _env_float("LR", 0.05)
    seed = _env_int("SEED", 1234)

    # Single-process fallback when not started by torchrun.
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")

    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    world = dist.get_world_size()
    started = time.monotonic()

    try:
        if rank == 0:
            print(
                f"world_size={world} epochs={epochs} samples_per_rank={samples} "
                f"batch_size={batch_size} lr={lr}",
                flush=True,
            )

        # The target function is shared by all ranks (same seed) ...
        shared = torch.Generator().manual_seed(seed)
        w_true = torch.randn(IN_FEATURES, 1, generator=shared)
        b_true = torch.randn(1, generator=shared)

        # ... while each rank draws its own shard of inputs and noise.
        local = torch.Generator().manual_seed(seed + 1 + rank)
        x = torch.randn(samples, IN_FEATURES, generator=local)
        y = x @ w_true + b_true + 0.01 * torch.randn(samples, 1, generator=local)

        # Identical initial weights everywhere (DDP also broadcasts rank 0's).
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
        ddp = DistributedDataParallel(model)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        loss_fn = nn.MSELoss()

        # Every rank must run the same number of steps for DDP's all-reduce.
        steps = max(1, samples // batch_size)
        shuffle = torch.Generator().manual_seed(seed + 1 + rank)
        mean_loss = float("nan")
        for epoch in range(1, epochs + 1):
            order = torch.randperm(samples, generator=shuffle)
            total = torch.zeros(2)  # [sum of batch losses, number of batches]
            for step in range(steps):
                idx = order[step * batch_size : (step + 1) * batch_size]
                optimizer.zero_grad()
                loss = loss_fn(ddp(x[idx]), y[idx])
                loss.backward()  # gradients are all-reduced here
                optimizer.step()
                total += torch.tensor([loss.item(), 1.0])
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
            mean_loss = (total[0] / total[1]).item()
            if rank == 0:
                print(f"epoch {epoch}/{epochs} loss: {mean_loss:.6f}", flush=True)
                report_progress(epoch, epochs, mean_loss, started)

        # Every rank prints the same figures: the loss is all-reduced and DDP keeps the
        # replicas' weights identical, so equal lines prove the gradients were synchronised.
        checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
        print(
            f"rank {rank} final loss: {mean_loss:.6f} weights checksum: {checksum:.6f}", flush=True
        )
        if rank == 0:
            path = os.environ.get("CHECKPOINT_PATH", "checkpoint.pt")
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            torch.save(model.state_dict(), path)
            print(f"elapsed: {time.monotonic() - started:.2f}s", flush=True)
            print(f"checkpoint written to {path}", flush=True)
            print(f"final loss: {mean_loss:.6f}", flush=True)
        # Tear the group down together: a rank that destroys it while another still works
        # (rank 0 writing the checkpoint) can abort in gloo's teardown ("terminate called
        # without an active exception", exit -6) and fail the whole job.
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and the group is gone: end without the C++ static destructors.
    # gloo's sometimes abort at interpreter exit even after the barrier ("terminate called
    # without an active exception", exit -6: a rank that had printed its final loss failed
    # the TrainJob in CI), as in examples/data-cache/train.py.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
