"""Every MPI rank contributes rank + 1; an allreduce sums them and every rank checks and
prints the sum (n * (n + 1) / 2 for n ranks) with the host it ran on. Exit code 1 on a wrong
sum, so a broken run fails the TrainJob.

``--fail-rank R`` makes rank R exit with code 3 after the allreduce (to see how a failed rank
looks). An argument rather than an environment variable: mpirun does not pass the launcher's
environment to ranks on other nodes."""

from __future__ import annotations

import argparse
import socket
import sys

from mpi4py import MPI


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-rank", type=int, default=-1)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    expected = size * (size + 1) // 2
    host = socket.gethostname()
    print(f"rank {rank}/{size} on {host}: allreduce sum {total} (expected {expected})", flush=True)
    if total != expected:
        return 1
    if args.fail_rank == rank:
        print(f"rank {rank} on {host}: failing on purpose (--fail-rank {rank})", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
