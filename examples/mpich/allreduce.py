"""Every MPI rank contributes rank + 1 to an allreduce and the hostname of its pod to an
allgather; every rank prints the sum (n * (n + 1) / 2 for n ranks), the MPI library it runs on
and its own host, and rank 0 prints the hosts every rank reported. Exit code 1 on a wrong sum,
or when the library is not the one ``--expect-library`` names, so a broken run fails the
TrainJob."""

from __future__ import annotations

import argparse
import socket
import sys

from mpi4py import MPI


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect-library", default="", help="a prefix of MPI_Get_library_version")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    library = MPI.Get_library_version().splitlines()[0].strip()
    host = socket.gethostname()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    hosts = comm.allgather(host)
    expected = size * (size + 1) // 2
    print(
        f"rank {rank}/{size} on {host} ({library}): allreduce sum {total} (expected {expected})",
        flush=True,
    )
    if rank == 0:
        print(f"ranks' hosts: {' '.join(hosts)}", flush=True)
    if total != expected:
        return 1
    if not library.startswith(args.expect_library):
        print(f"rank {rank}: expected {args.expect_library!r}, got {library!r}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
