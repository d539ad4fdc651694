"""Benchmark the pure render: renders per second on one core, and how cost grows with nodes.

Writes a JSON report (default hack/bench/reports/render.json) and prints a summary.
Targets: >= 2,000 renders/s for torch with 4 nodes on one core; cost growing
linearly (or better) with numNodes.

    python hack/bench/render.py [--seconds 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from trainer.api.v1alpha1 import TrainJob
from trainer.plugins.registry import default_framework, render
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.info import BuildContext, SSHKeyPair

ROOT = Path(__file__).resolve().parents[2]
KEYS = SSHKeyPair(b"-----BEGIN EC PRIVATE KEY-----\n-----END EC PRIVATE KEY-----\n", b"k")
CASES = [
    ("torch, 4 nodes", "torch-distributed", 4),
    ("MPI runLauncherAsNode, 8 nodes", "deepspeed-distributed", 8),
    ("torch, 1000 nodes", "torch-distributed", 1000),
]
SCALING = [1, 10, 100, 1000, 10000]


def trainjob(runtime: str, nodes: int) -> TrainJob:
    return TrainJob.from_wire(
        {
            "metadata": {"name": "bench", "namespace": "default", "uid": "bench-uid"},
            "spec": {
                "runtimeRef": {"name": runtime},
                "trainer": {"numNodes": nodes, "command": ["torchrun", "train.py"]},
            },
        }
    )


def measure(runtime: str, nodes: int, seconds: float) -> dict[str, Any]:
    """Render repeatedly for ``seconds`` (after a warm-up); median of 5 rounds."""
    job = trainjob(runtime, nodes)
    rt = builtin_runtimes()[runtime]
    framework = default_framework()
    ctx = BuildContext(ssh_keygen=lambda: KEYS)
    for _ in range(50):
        render(job, rt, ctx=ctx, framework=framework)
    rates = []
    for _ in range(5):
        n = 0
        start = time.perf_counter()
        deadline = start + seconds / 5
        while time.perf_counter() < deadline:
            render(job, rt, ctx=ctx, framework=framework)
            n += 1
        rates.append(n / (time.perf_counter() - start))
    rate = statistics.median(rates)
    return {
        "runtime": runtime,
        "num_nodes": nodes,
        "renders_per_second": round(rate, 1),
        "ms_per_render": round(1000 / rate, 4),
        "rounds": [round(r, 1) for r in rates],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per case")
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/render.json")
    args = parser.parse_args()
    pinned = None
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        pinned = cpu
    report: dict[str, Any] = {
        "benchmark": "render",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "pinned_cpu": pinned,
        "cases": [],
        "scaling": {},
    }
    for label, runtime, nodes in CASES:
        result = {"case": label, **measure(runtime, nodes, args.seconds)}
        report["cases"].append(result)
        print(
            f"{label:34s} {result['renders_per_second']:>9.1f} renders/s "
            f"({result['ms_per_render']:.3f} ms)",
            flush=True,
        )
    for runtime in ("torch-distributed", "deepspeed-distributed"):
        series = [measure(runtime, n, args.seconds / 2) for n in SCALING]
        base = series[0]["ms_per_render"]
        for point in series:
            point["relative_cost"] = round(point["ms_per_render"] / base, 2)
        report["scaling"][runtime] = series
        print(
            f"scaling {runtime}: "
            + ", ".join(f"{p['num_nodes']} nodes {p['ms_per_render']:.3f} ms" for p in series),
            flush=True,
        )
    torch4 = report["cases"][0]["renders_per_second"]
    report["targets"] = {
        "torch_4_nodes_renders_per_second_min": 2000,
        "torch_4_nodes_met": torch4 >= 2000,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
