"""Benchmark the data cache: time from starting a cache pod to gRPC health SERVING, and read
throughput through Arrow Flight with every rank reading its shard at once.

Each cache pod is a real ``trainer data-cache serve`` process on loopback (as the
``cache-initializer`` step runs it); readers are threads of this driver using
``trainer.datacache.client.CacheClient`` (pyarrow's Flight client, which releases the GIL
while it reads). "Ready" is measured from the process spawn (interpreter start and imports
included) until a grpc.health.v1 Check answers SERVING, polled every 10 ms: what holds the
training pods back. Throughput is rows (and bytes of Arrow data) of the whole table over the
wall time from the first request to the last batch, the best of ``--rounds``. Every call is
signed with a credential of the run's own, as a TrainJob's are (docs/data-cache.md,
"Security").

Cases: the data-cache example's own table (examples/data-cache/transactions.csv, 1,000 rows,
2 ranks: the example's closing figures) and a generated table (``--rows``, default 2,000,000
rows of id + 5 float64 columns, Parquet) on 1 and 2 cache pods read by 2 and 4 ranks.

Writes a JSON report (default hack/bench/reports/datacache.json) and prints a summary.

    python hack/bench/datacache.py [--rows 2000000] [--rounds 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchlib import ROOT, OtherLoad, child_env, source_state, stop_process

from trainer.datacache.client import CacheClient
from trainer.local.executor.kubelet.grpc_probe import check_health

EXAMPLE = ROOT / "examples/data-cache/transactions.csv"
SERVE = [sys.executable, "-m", "trainer.cli.main", "data-cache", "serve"]
CREDENTIAL = secrets.token_urlsafe(32).encode()


def import_seconds(modules: str) -> float:
    """Wall time of a fresh interpreter importing ``modules`` (part of every start to Ready)."""
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {modules}"], env=child_env(), check=True)
    return time.monotonic() - began


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cache(
    source: Path, pods: int, credential: Path
) -> tuple[list[subprocess.Popen[bytes]], list[int], float]:
    """Start ``pods`` cache processes; returns them, their ports and seconds until all SERVING."""
    ports = [free_port() for _ in range(pods)]
    peers = ",".join(f"127.0.0.1:{p}" for p in ports)
    began = time.monotonic()
    procs = [
        subprocess.Popen(
            [*SERVE, "--host", "127.0.0.1", "--port", str(port)],
            env={
                **child_env(),
                "STORAGE_URI": "cache://bench/table",
                "METADATA_LOC": str(source),
                "JOB_COMPLETION_INDEX": str(i),
                "DATA_CACHE_PEERS": peers,
                "DATA_CACHE_CREDENTIAL_FILE": str(credential),
            },
            stdout=subprocess.DEVNULL,
        )
        for i, port in enumerate(ports)
    ]
    waiting = set(ports)
    while waiting:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a cache process exited before it was ready")
        waiting = {port for port in waiting if not check_health(f"127.0.0.1:{port}", "", 1.0)}
        if waiting:
            time.sleep(0.01)
    return procs, ports, time.monotonic() - began


def read_all(port: int, ranks: int) -> dict[str, Any]:
    """Every rank reads its shard at once; rows per rank, seconds and bytes."""
    results: list[Any] = [None] * ranks
    barrier = threading.Barrier(ranks + 1)

    def reader(rank: int) -> None:
        with CacheClient(f"127.0.0.1:{port}", credential=CREDENTIAL) as client:
            barrier.wait()
            results[rank] = client.read_shard(rank, ranks, "bench/table")

    threads = [threading.Thread(target=reader, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    barrier.wait()
    began = time.monotonic()
    for t in threads:
        t.join()
    seconds = time.monotonic() - began
    ids = sorted(i for shard in results for i in shard.column("id").to_pylist())
    return {
        "rows_per_rank": [shard.num_rows for shard in results],
        "rows": sum(shard.num_rows for shard in results),
        "each_row_once": ids == list(range(len(ids))),
        "seconds": seconds,
        "bytes": sum(shard.nbytes for shard in results),
    }


def generate(path: Path, rows: int) -> None:
    import pyarrow as pa  # noqa: PLC0415 - the datacache extra
    import pyarrow.compute as pc  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    ids = pa.array(range(rows), pa.int64())
    columns = {"id": ids}
    for i in range(5):
        columns[f"f{i}"] = pc.multiply(pc.cast(ids, pa.float64()), 0.5 + i)
    pq.write_table(pa.table(columns), path)


def case(
    name: str, source: Path, pods: int, ranks: int, rounds: int, credential: Path
) -> dict[str, Any]:
    procs, ports, ready_s = start_cache(source, pods, credential)
    load = OtherLoad([p.pid for p in procs])
    try:
        runs = [read_all(ports[0], ranks) for _ in range(rounds)]
        other = load.result()
    finally:
        for proc in procs:
            stop_process(proc)
    best = min(runs, key=lambda r: r["seconds"])
    return {
        "case": name,
        "cache_pods": pods,
        "ranks": ranks,
        "dataset_rows": best["rows"],
        "rows_per_rank": best["rows_per_rank"],
        "each_row_read_once": all(r["each_row_once"] for r in runs),
        "start_to_ready_s": round(ready_s, 3),
        "read_s": round(best["seconds"], 4),
        "rows_per_s": round(best["rows"] / best["seconds"]),
        "mb_per_s": round(best["bytes"] / best["seconds"] / 1e6, 1),
        "rounds": rounds,
        **other,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/datacache.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="datacache-bench-") as tmp:
        credential = Path(tmp) / "credential"
        credential.write_bytes(CREDENTIAL)
        example = "example (transactions.csv), 1 pod, 2 ranks"
        results = [case(example, EXAMPLE, 1, 2, args.rounds, credential)]
        table = Path(tmp) / "table.parquet"
        generate(table, args.rows)
        for pods, ranks in ((1, 2), (2, 2), (2, 4)):
            name = f"generated ({args.rows:,} rows), {pods} pod(s), {ranks} ranks"
            results.append(case(name, table, pods, ranks, args.rounds, credential))
    report = {
        "benchmark": "datacache",
        "start_to_ready_includes": {
            "interpreter_and_trainer_cli_import_s": round(import_seconds("trainer.cli.main"), 3),
            "interpreter_and_cache_modules_import_s": round(
                import_seconds("trainer.datacache.server, trainer.cli.datacache"), 3
            ),
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "source": source_state(),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for r in results:
        print(
            f"{r['case']}: {r['dataset_rows']:,} rows, per rank {r['rows_per_rank']}, "
            f"start to Ready {r['start_to_ready_s']:.2f} s, read {r['read_s']:.3f} s = "
            f"{r['rows_per_s']:,} rows/s ({r['mb_per_s']} MB/s); other load "
            f"{r['other_processes_cpu_utilisation']:.2f} CPU"
        )
    print(f"start to Ready includes: {report['start_to_ready_includes']}")
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
