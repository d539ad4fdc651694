"""Every MPI rank contributes rank + 1; an allreduce sums them and every rank checks and
prints the sum (n * (n + 1) / 2 for n ranks) with the host it ran on. Exit code 1 on a wrong
sum, so a broken run fails the TrainJob.

FAIL_RANK=<r> makes rank r exit with code 3 after the allreduce (to see a failed rank)."""

from __future__ import annotations

import os
import socket
import sys

from mpi4py import MPI


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    expected = size * (size + 1) // 2
    host = socket.gethostname()
    print(f"rank {rank}/{size} on {host}: allreduce sum {total} (expected {expected})", flush=True)
    if total != expected:
        return 1
    if os.environ.get("FAIL_RANK") == str(rank):
        print(f"rank {rank}: failing on purpose (FAIL_RANK={rank})", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
