"""End to end: the data-cache example through `trainer run`. The cache-initializer really
loads the table and serves it over Arrow Flight; the node pods start only once its gRPC
health is SERVING; the two DDP ranks read disjoint shards covering the table once. A missing
or unreadable dataset fails the cache-initializer with a message naming the file, and the
TrainJob fails at once instead of waiting for a cache that never becomes ready."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.listeners import assert_no_pod_listeners, run_watched
from trainer.datacache import deps

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/data-cache/trainjob.yaml"
MISSING = deps.available()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        MISSING is not None, reason=f"the data cache's extra is not installed: {MISSING}"
    ),
]

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # pragma: no cover - the dev install includes the torch extra
    HAVE_TORCH = False


def trainer_run(path: Path, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """``trainer run -f PATH``, after checking that no pod listened in the host's network
    namespace while it ran (tests/e2e/listeners.py)."""
    argv = ["-m", "trainer.cli.main", "run", "-f", str(path), "--timeout", str(timeout)]
    done, listeners = run_watched(
        [sys.executable, *argv],
        cwd=ROOT,
        timeout=timeout + 60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert_no_pod_listeners(listeners, done.stdout + done.stderr)
    return done


def first(lines: list[str], pattern: str) -> int:
    """The index of the first line matching ``pattern`` (a failure when none does)."""
    found = next((i for i, line in enumerate(lines) if re.search(pattern, line)), None)
    assert found is not None, f"no line matches {pattern!r}:\n" + "\n".join(lines)
    return found


@pytest.mark.skipif(not HAVE_TORCH, reason="needs the torch extra (pip install -e '.[torch]')")
def test_ranks_stream_disjoint_shards_from_a_cache_ready_before_the_nodes_start() -> None:
    proc = trainer_run(EXAMPLE)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    lines = out.splitlines()
    assert "TrainJob default/data-cache: Complete" in out

    # On the local plane the cache listens on loopback only, and the ranks read it with the
    # TrainJob's credential (docs/data-cache.md, "Security").
    assert re.search(
        r"cache-initializer-0-0-\w+ \| data-cache: pod 0 of 1 .* gRPC on 127\.0\.0\.1:", out
    )

    # The cache loaded the whole table, and turned Ready, before any node pod existed.
    ready = first(lines, r"data-cache-cache-initializer-0-0-\w+ \| data-cache: ready: ")
    total = int(re.search(r"rows 0-(\d+) of (\d+)", lines[ready])[2])  # type: ignore[index]
    assert total == 1000
    cache_ready = first(lines, r"cache-initializer: active 1 ready 1")
    nodes_started = first(lines, r"node: active [1-9]")
    node_logs = first(lines, r"^data-cache-node-0-\d-\w+ \| ")
    assert ready < nodes_started and cache_ready < nodes_started < node_logs, out
    assert all("node: active 0" in line for line in lines[:nodes_started] if "node:" in line)

    # Two ranks, disjoint contiguous shards that together are the table, each row once.
    shards = re.findall(
        r"rank (\d)/2 shard: ids (\d+)-(\d+) \((\d+) rows, distinct, contiguous\)", out
    )
    assert sorted(s[0] for s in shards) == ["0", "1"], out
    ranges = sorted((int(a), int(b), int(n)) for _, a, b, n in shards)
    assert all(b - a + 1 == n for a, b, n in ranges)
    assert ranges[0][0] == 0 and ranges[0][1] + 1 == ranges[1][0] and ranges[1][1] == total - 1
    assert f"rows read by all ranks: {total} of {total}" in out

    # DDP really synchronised the ranks: the same loss and weights on both.
    finals = re.findall(r"rank (\d) final loss: ([0-9.]+) weights checksum: ([0-9.]+)", out)
    assert len(finals) == 2 and finals[0][1:] == finals[1][1:], out


BAD = {
    "no-dataset": (None, "no such file or directory (the dataset to cache is missing)"),
    "bad-dataset": (b"PAR1 this is not parquet", "is not a Parquet file Arrow can read"),
}


def test_a_missing_or_unreadable_dataset_fails_the_cache_and_the_trainjob_at_once(
    tmp_path: Path,
) -> None:
    docs = []
    for name, (content, _) in BAD.items():
        dataset = tmp_path / f"{name}.parquet"
        if content is not None:
            dataset.write_bytes(content)
        job = yaml.safe_load(EXAMPLE.read_text())
        job["metadata"]["name"] = name
        job["spec"]["initializer"]["dataset"]["env"] = [
            {"name": "METADATA_LOC", "value": str(dataset)}
        ]
        docs.append(job)
    path = tmp_path / "trainjobs.yaml"
    path.write_text(yaml.safe_dump_all(docs))

    proc = trainer_run(path, timeout=60)  # both TrainJobs in one run
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "timed out" not in out
    for name, (_, message) in BAD.items():
        dataset = tmp_path / f"{name}.parquet"
        assert re.search(
            rf"{name}-cache-initializer-0-0-\w+ \| error: data-cache: cannot load table "
            rf"sales/transactions: .*{re.escape(str(dataset))}.*{re.escape(message)}",
            out,
        ), out
        assert f"TrainJob default/{name}: Failed" in out
        assert re.search(
            rf"TrainJob default/{name} failed: FailedJobs: .*{name}-cache-initializer-0", out
        ), out
        # trainer run names the reason, not only the failed Job: the TrainJob's Failed message
        # names the container, and its last output follows, indented.
        assert re.search(
            rf"TrainJob default/{name} failed: FailedJobs: .*; first failure: replicated job "
            rf"cache-initializer, .*pod {name}-cache-initializer-0-0-\w+, container "
            rf"cache-initializer exited with code 1 \(Error\); last output:",
            out,
        ), out
        assert re.search(
            rf"\]     error: data-cache: cannot load table .*{re.escape(message)}", out
        ), out
        assert f"{name}-node-" not in out  # the nodes never started


READER = """
from trainer.datacache.client import CacheClient, rank_from_env
rank, world = rank_from_env()
with CacheClient() as cache:
    ids = cache.read_shard(rank, world).column("id").to_pylist()
    sources = " ".join(f"{location}={rows}" for location, rows in cache.last_read)
print(f"rank {rank}/{world} ids {ids[0]}-{ids[-1]} ({len(ids)} rows) from {sources}")
"""


def test_a_cache_of_two_pods_points_each_rank_at_the_pod_holding_its_rows(
    tmp_path: Path,
) -> None:
    runtime = yaml.safe_load((ROOT / "runtimes/torch-distributed-with-cache.yaml").read_text())
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "torch-cache-two-pods", "namespace": "default"}
    cache = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    cache["parallelism"] = cache["completions"] = 2
    job = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = "two-cache-pods"
    job["spec"]["runtimeRef"] = {"name": "torch-cache-two-pods", "kind": "TrainingRuntime"}
    job["spec"]["trainer"]["command"] = ["python", "-c", READER]
    path = tmp_path / "two-cache-pods.yaml"
    path.write_text(yaml.safe_dump_all([runtime, job]))

    proc = trainer_run(path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    lines = out.splitlines()
    # Pod 1 listens on a port of its own and registers it with pod 0. The pods start in either
    # order: pod 0 says it waits for pod 1 only when it loaded its rows before pod 1 registered.
    waiting = next(
        (
            i
            for i, x in enumerate(lines)
            if re.search(r"cache-initializer-0-0-\w+ \| .*waiting for cache pods \[1\]", x)
        ),
        -1,
    )
    registered = first(lines, r"cache-initializer-0-1-\w+ \| .*registered grpc://127\.0\.0\.1:")
    pod1 = re.search(r"registered (grpc://127\.0\.0\.1:\d+)", lines[registered])[1]  # type: ignore[index]
    head_ready = first(lines, r"cache-initializer-0-0-\w+ \| data-cache: ready: ")
    head = "127.0.0.1:" + re.search(r"on port (\d+)", lines[head_ready])[1]  # type: ignore[index]
    assert "rows 0-500 of 1000" in lines[head_ready], out
    first_node = first(lines, r"^two-cache-pods-node-0-\d-\w+ \| ")
    assert waiting < first_node and registered < first_node and head_ready < first_node, out
    # Each rank's rows come from the pod that holds them: rank 0 from pod 0, rank 1 from pod 1.
    assert re.search(rf"rank 0/2 ids 0-499 \(500 rows\) from grpc://{head}=500$", out, re.M), out
    assert re.search(rf"rank 1/2 ids 500-999 \(500 rows\) from {pod1}=500$", out, re.M), out
