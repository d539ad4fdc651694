"""DDP training on a table streamed from the data cache, for examples/data-cache.

Every rank reads its shard of the cached table over Arrow Flight with
``trainer.datacache.client.read_shard()`` (rank and world size from torchrun's RANK /
WORLD_SIZE, the cache from DATA_CACHE_ENDPOINT, which the controller injects), then the ranks
fit ``amount ~ f0..f3`` with a linear model under DistributedDataParallel (gloo, CPU).

What it prints, for the e2e test and for you:
    ``rank R/W shard: ids A-B (N rows, distinct, contiguous) read in T s``
    ``rows read by all ranks: N of M``     (rank 0; M = rows in the cache)
    ``rank R final loss: L weights checksum: C``   (equal on every rank: DDP synced them)

Knobs (env): EPOCHS (default 200), LR (default 0.1).
torch and pyarrow are imported inside main() only.
"""

from __future__ import annotations

import datetime
import os
import sys
import time


def main() -> int:
    import torch  # noqa: PLC0415 - optional dependencies; see the module docstring
    import torch.distributed as dist  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    from trainer.datacache.client import CacheClient, rank_from_env  # noqa: PLC0415

    epochs = int(os.environ.get("EPOCHS") or 200)
    lr = float(os.environ.get("LR") or 0.1)
    rank, world = rank_from_env()
    began = time.monotonic()
    with CacheClient() as cache:
        (table,) = cache.tables()
        shard = cache.read_shard(rank, world, table)
        total = cache.read_table(table).num_rows if rank == 0 else 0
    took = time.monotonic() - began
    ids = shard.column("id").to_pylist()
    distinct = len(set(ids)) == len(ids)
    contiguous = bool(ids) and ids == list(range(ids[0], ids[0] + len(ids)))
    print(
        f"rank {rank}/{world} shard: ids {ids[0] if ids else '-'}-{ids[-1] if ids else '-'} "
        f"({len(ids)} rows, {'distinct' if distinct else 'DUPLICATES'}, "
        f"{'contiguous' if contiguous else 'NOT contiguous'}) of table {table} read in "
        f"{took:.2f}s from {os.environ.get('DATA_CACHE_ENDPOINT')}",
        flush=True,
    )

    # A rank that died must fail the others within a minute, not leave them waiting for it.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    count = torch.tensor([len(ids)], dtype=torch.int64)
    dist.all_reduce(count)
    if rank == 0:
        print(f"rows read by all ranks: {int(count.item())} of {total}", flush=True)

    features = torch.tensor(
        [shard.column(f"f{i}").to_pylist() for i in range(4)], dtype=torch.float32
    ).T
    target = torch.tensor(shard.column("amount").to_pylist(), dtype=torch.float32).unsqueeze(1)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(features), target)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    global_loss = loss.detach().clone()
    dist.all_reduce(global_loss)
    global_loss /= world
    checksum = sum(float(p.detach().abs().sum()) for p in model.parameters())
    print(
        f"rank {rank} final loss: {float(global_loss):.6f} weights checksum: {checksum:.6f}",
        flush=True,
    )
    # Tear the group down together: a rank that destroys it while another still works can
    # abort in gloo's teardown ("terminate called without an active exception", exit -6).
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and the group is gone: end without the C++ static destructors.
    # Those of Arrow Flight's gRPC and torch's gloo, both loaded here, sometimes abort at
    # interpreter exit even so ("terminate called without an active exception", exit -6: a
    # rank that had printed its final loss failed the TrainJob in CI).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
