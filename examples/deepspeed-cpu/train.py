"""A small CPU data-parallel training run over MPI, as DeepSpeed's launcher-less mode runs on
the built-in deepspeed-distributed runtime: ``mpirun`` starts the ranks, each reads its rank
and world size from OpenMPI's environment (``OMPI_COMM_WORLD_RANK`` / ``_SIZE`` /
``_LOCAL_RANK``), rank 0's address and a port are shared with an MPI broadcast (mpi4py), and
``torch.distributed`` (gloo) averages the gradients of a linear model.

Every rank prints its final loss and a checksum of its weights: equal on every rank (the
gradients were averaged), and the loss falls. Exit code 1 when the ranks disagree.
"""

from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist
from mpi4py import MPI


def local_address() -> str:
    """An address of this host other ranks can reach (DeepSpeed uses `hostname -I`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: picks the outgoing interface
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def main() -> int:
    comm = MPI.COMM_WORLD
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    addr, port = comm.bcast((local_address(), free_port()) if rank == 0 else None, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=size)
    torch.manual_seed(0)
    true_w = torch.tensor([[2.0], [-3.0], [0.5]])
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data shard
    first = last = 0.0
    for step in range(int(os.environ.get("STEPS", "30"))):
        x = torch.randn(32, 3, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x @ true_w + 1.0)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= size
        opt.step()
        first = loss.item() if step == 0 else first
        last = loss.item()
    checksum = sum(float(p.detach().sum()) for p in model.parameters())
    host = socket.gethostname()
    print(
        f"rank {rank}/{size} on {host}: loss {first:.4f} -> {last:.4f}, "
        f"weights checksum {checksum:.6f}",
        flush=True,
    )
    sums = comm.allgather(round(checksum, 6))
    dist.destroy_process_group()
    return 0 if len(set(sums)) == 1 and last < first else 1


if __name__ == "__main__":
    sys.exit(main())
