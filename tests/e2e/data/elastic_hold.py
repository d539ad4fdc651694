"""A training step for tests/e2e/test_network_sandbox.py: joins torchrun's elastic rendezvous,
prints where its stores listen, waits (at most 120 s) for the file $RELEASE_FILE so the test
can attack them meanwhile, then all-reduces a one and prints the sum."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(
    f"rank {rank} rendezvous {os.environ.get('PET_RDZV_ENDPOINT', '')} "
    f"store {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
    flush=True,
)
deadline = time.monotonic() + 120
while not os.path.exists(os.environ["RELEASE_FILE"]) and time.monotonic() < deadline:
    time.sleep(0.1)
total = torch.ones(1)
dist.all_reduce(total)
print(f"rank {rank} sum {total.item():g}", flush=True)
dist.destroy_process_group()
