"""Benchmark the local scheduler's decisions (trainer/local/executor/scheduler/policy/scheduling.py)
at cluster scale: how long a pass takes, and pods bound per second.

A cluster of ``--nodes`` nodes with ``--gpus`` ``nvidia.com/gpu`` each and ``--jobsets`` JobSets
of ``--pods`` pods asking one GPU each, all pending, scheduled all or nothing per JobSet:

1. the first pass over everything (binds what fits, gives every other pod its reason):
   ``first_pass_s`` and ``pods_bound_per_s``;
2. the same pass again once the bound pods are bound (what a pass costs while the rest
   waits): ``steady_pass_s``;
3. then the first tenth of the JobSets finish and a pass starts the waiting ones in their
   place: ``refill_pass_s``.

The figures are the pure function's only (no API writes). Writes a JSON report (default
hack/bench/reports/scheduler.json) and prints a summary.

    python hack/bench/scheduler.py [--nodes 1000] [--gpus 8] [--jobsets 1500] [--pods 8]
        [--out PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from trainer.jobset import contract as jc
from trainer.local.executor.scheduler.policy import scheduling as sch

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"


def node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: gpus}},
    }


def container() -> dict[str, Any]:
    return {"name": "node", "resources": {"limits": {"cpu": "1", GPU: 1}}}


def jobset(name: str, pods: int) -> dict[str, Any]:
    job: dict[str, Any] = {
        "parallelism": pods,
        "completions": pods,
        "template": {"spec": {"containers": [container()]}},
    }
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]},
        "status": {},
    }


def pod(jobset_name: str, index: int, created: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{jobset_name}-node-0-{index}",
            "namespace": "default",
            "uid": f"uid-{jobset_name}-{index}",
            "labels": {
                jc.LABEL_JOBSET_NAME: jobset_name,
                jc.LABEL_JOBSET_UID: f"uid-{jobset_name}",
            },
            "creationTimestamp": f"2026-01-01T{created // 3600:02d}:{created // 60 % 60:02d}:"
            f"{created % 60:02d}Z",
        },
        "spec": {"containers": [container()]},
        "status": {"phase": "Pending"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobsets", type=int, default=1500)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/scheduler.json")
    args = parser.parse_args(argv)

    nodes = [sch.node_view(node(f"node-{i:05d}", args.gpus)) for i in range(args.nodes)]
    jobsets = [jobset(f"js-{j:05d}", args.pods) for j in range(args.jobsets)]
    gangs = {g.key: g for g in (sch.jobset_gang(js) for js in jobsets) if g is not None}
    views = [
        sch.pod_view(pod(f"js-{j:05d}", i, j))
        for j in range(args.jobsets)
        for i in range(args.pods)
    ]
    admitted: dict[str, Any] = {}

    started = time.perf_counter()
    first = sch.schedule(nodes, views, gangs, admitted)
    first_s = time.perf_counter() - started
    placed = {p.uid: n for p, n in first.binds}
    views = [dataclasses.replace(v, node_name=placed.get(v.uid, "")) for v in views]

    started = time.perf_counter()
    steady = sch.schedule(nodes, views, gangs, admitted)
    steady_s = time.perf_counter() - started

    done = {f"js-{j:05d}" for j in range(args.jobsets // 10)}
    for js in jobsets:
        if js["metadata"]["name"] in done:
            js["status"] = {"terminalState": "Completed"}
    gangs = {g.key: g for g in (sch.jobset_gang(js) for js in jobsets) if g is not None}
    views = [
        dataclasses.replace(v, terminal=True) if v.name.rsplit("-node-", 1)[0] in done else v
        for v in views
    ]
    started = time.perf_counter()
    refill = sch.schedule(nodes, views, gangs, admitted)
    refill_s = time.perf_counter() - started

    report = {
        "benchmark": "scheduler",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        "settings": vars(args) | {"out": str(args.out)},
        "pods": len(views),
        "first_pass_s": round(first_s, 3),
        "first_pass_bound": len(first.binds),
        "first_pass_waiting": len(first.waiting),
        "pods_bound_per_s": round(len(first.binds) / first_s, 1) if first_s else None,
        "steady_pass_s": round(steady_s, 3),
        "steady_pass_bound": len(steady.binds),
        "refill_pass_s": round(refill_s, 3),
        "refill_pass_bound": len(refill.binds),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{args.nodes} nodes x {args.gpus} GPUs, {len(views)} pods in {args.jobsets} JobSets: "
        f"first pass {first_s:.2f} s ({len(first.binds)} bound, "
        f"{report['pods_bound_per_s']} pods/s, {len(first.waiting)} waiting); steady pass "
        f"{steady_s:.3f} s; refill pass {refill_s:.2f} s ({len(refill.binds)} bound)"
    )
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
