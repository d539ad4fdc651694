"""Multi-process JAX on CPU: data-parallel linear regression over every TrainJob node.

Each node pod runs one JAX process. ``jax.distributed.initialize`` reads the three variables
the controller injects into the ``node`` container (JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID; process 0 serves the coordinator on port 29500 of
``<job>-node-0-0.<job>``), as the Kubeflow Trainer JAX guide does. CPU collectives across
processes go over gloo.

Every process holds its own shard of a generated dataset (rows ``process_id::num_processes``).
The program then

1. all-reduces one number per process (the sum of its shard's targets) with a jitted sum over
   an array sharded across the processes, and prints its own value and the reduced one: every
   process prints the same total, which is the sum of all processes' values;
2. trains ``y = X @ w`` by full-batch gradient descent on the global, sharded batch (XLA
   all-reduces the gradient), and prints the final loss and weights: equal on every process.

Run locally: ``trainer run -f examples/jax/trainjob.yaml`` (from the repository root).
"""

from __future__ import annotations

import os
import socket

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

ROWS = int(os.environ.get("ROWS", "512"))
FEATURES = 4
STEPS = int(os.environ.get("STEPS", "50"))
LEARNING_RATE = 0.1


def bind_address(coordinator: str) -> str | None:
    """Where process 0's coordinator listens: the address the coordinator's name resolves to
    (its own pod's IP on a cluster, 127.0.0.1 on the local plane), or JAX's default (every
    address) while that name does not resolve yet (a pod's DNS record can lag its start)."""
    host, _, port = coordinator.rpartition(":")
    try:
        return f"{socket.gethostbyname(host)}:{port}"
    except OSError:
        return None


def main() -> None:
    coordinator = os.environ["JAX_COORDINATOR_ADDRESS"]
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        coordinator_bind_address=bind_address(coordinator),
    )
    pid, count = jax.process_index(), jax.process_count()
    print(
        f"process {pid}/{count}: {jax.local_device_count()} local and "
        f"{jax.device_count()} global devices",
        flush=True,
    )

    # The same generated dataset everywhere; each process keeps only its own rows.
    rng = np.random.default_rng(0)
    x_all = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    true_w = np.arange(1, FEATURES + 1, dtype=np.float32)
    y_all = x_all @ true_w + rng.normal(scale=0.01, size=ROWS).astype(np.float32)
    x_local, y_local = x_all[pid::count], y_all[pid::count]

    # One row per process: the mesh spans every process's devices.
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())

    # 1. A cross-process reduction of one value per process.
    local_value = float(np.float64(y_local.astype(np.float64).sum()))
    per_process = np.zeros((jax.local_device_count(),), dtype=np.float32)
    per_process[0] = local_value
    values = jax.make_array_from_process_local_data(rows, per_process)
    total = jax.jit(jnp.sum, out_shardings=replicated)(values)
    print(f"process {pid} local value: {local_value:.4f}", flush=True)
    print(f"process {pid} all-reduced sum: {float(total):.4f}", flush=True)

    # 2. Data-parallel training on the global batch.
    x = jax.make_array_from_process_local_data(rows, x_local)
    y = jax.make_array_from_process_local_data(rows, y_local)

    def loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((x @ w - y) ** 2)

    @jax.jit
    def step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        value, grad = jax.value_and_grad(loss)(w, x, y)
        return w - LEARNING_RATE * grad, value

    w = jax.device_put(jnp.zeros((FEATURES,), dtype=jnp.float32), replicated)
    for _ in range(STEPS):
        w, _value = step(w, x, y)
    final = float(jax.jit(loss, out_shardings=replicated)(w, x, y))
    weights = " ".join(f"{v:.4f}" for v in np.asarray(jax.device_get(w)))
    print(f"process {pid} final loss: {final:.6f} weights: {weights}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
