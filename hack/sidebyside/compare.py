"""Run upstream's Kubeflow Trainer v2.3.0 controller and ours on one test bed with the same
corpus and list every difference in what they wrote (docs/side-by-side.md).

    hack/sidebyside/compare.py [--count 500] [--seed 0] [--nodes 16] [--out FILE]

The corpus is every runtime and TrainJob of upstream's release and of examples/, plus
``--count`` generated TrainJobs (hack/sidebyside/corpus.py; 0 for none). Each difference is
either matched by an entry of hack/sidebyside/differences.yaml or printed as unexplained;
the exit status is 1 when any is unexplained. ``--out`` writes the whole record as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "testbed"), str(HERE.parents[1])]

import addons  # noqa: E402
import bed as beds  # noqa: E402
import corpus as generated  # noqa: E402
import corpus_shapes  # noqa: E402
import netns  # noqa: E402
import upstream_install  # noqa: E402
from install import install_parts  # noqa: E402
from procs import BedError  # noqa: E402
from sidebyside import Corpus, Outcome, release_corpus, report_lines, run_both  # noqa: E402

from trainer.kube.client import new_api_client  # noqa: E402
from trainer.kube.rest import Kube  # noqa: E402


def say(line: str) -> None:
    print(f"side-by-side: {line}", file=sys.stderr, flush=True)


def corpus_for(count: int, seed: int) -> Corpus:
    corpus = release_corpus()
    if count:
        corpus.cluster_runtimes += generated.cluster_runtimes()
        corpus.add(generated.namespaced_runtimes())
        corpus.add(generated.trainjobs(count, seed))
        corpus.support = corpus_shapes.support_objects()
    return corpus


async def compare(bed: beds.Bed, corpus: Corpus, label: str, settle: float) -> Outcome:
    api = await new_api_client(str(bed.kubeconfig))
    try:
        kube = Kube(api, timeout=60)
        return await run_both(
            kube, lambda to: upstream_install.switch(bed, to, say), corpus, label, settle, say
        )
    finally:
        await api.close()


def to_json(outcome: Outcome) -> dict[str, object]:
    return {
        "phases": {
            p.controller: {
                "verdicts": p.verdicts, "unsettled": p.unsettled, "seconds": round(p.seconds, 1),
                "objects": len(p.objects),
            }
            for p in (outcome.upstream, outcome.ours)
        },
        "covered": {k: [asdict(d) for d in v] for k, v in outcome.covered.items()},
        "unexplained": [asdict(d) for d in outcome.unexplained],
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500, help="generated TrainJobs (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    parser.add_argument("--nodes", type=int, default=16, help="KWOK nodes (default 16)")
    parser.add_argument("--settle", type=float, default=600, help="seconds to wait per run")
    parser.add_argument("--out", type=Path, help="write the whole record here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the bed's folder (logs)")
    parser.add_argument(
        "--only", default="", help="run only the TrainJobs whose name matches this regex"
    )
    parser.add_argument(
        "--dump",
        type=Path,
        help="write both sides' normalised objects here (upstream.yaml, ours.yaml)",
    )
    args = parser.parse_args()
    if not netns.inside():
        return subprocess.call(netns.wrap([sys.executable, *sys.argv]))
    started = time.monotonic()
    corpus = corpus_for(args.count, args.seed)
    if args.only:
        corpus.trainjobs = [
            j for j in corpus.trainjobs if re.search(args.only, j["metadata"]["name"])
        ]
    say(
        f"corpus: {len(corpus.trainjobs)} TrainJobs, {len(corpus.runtimes)} TrainingRuntimes, "
        f"{len(corpus.cluster_runtimes)} ClusterTrainingRuntimes"
    )
    try:
        bed = beds.start_bed(nodes=args.nodes, gpus_per_node=8, say=say)
    except BedError as exc:
        say(f"error: {exc}")
        return 1
    try:
        install_parts(bed, ("jobset", "trainer"), say)
        addons.install_podgroup_crds(bed)
        outcome = asyncio.run(compare(bed, corpus, "c", args.settle))
    finally:
        bed.stop(keep=args.keep)
    for line in report_lines(outcome):
        print(line)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        for phase in (outcome.upstream, outcome.ours):
            (args.dump / f"{phase.controller}.yaml").write_text(
                yaml.safe_dump({"verdicts": phase.verdicts, "objects": phase.objects})
            )
    if args.out:
        args.out.write_text(json.dumps(to_json(outcome), indent=1, default=str))
    say(f"done in {time.monotonic() - started:.0f} s")
    return 1 if outcome.unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
