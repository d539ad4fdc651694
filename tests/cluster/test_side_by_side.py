"""Upstream's Kubeflow Trainer v2.3.0 controller and ours, one after the other on the session's
bed, given every runtime and TrainJob of upstream's release and of examples/ and a generated
corpus: the same admission verdicts and messages, and the same JobSets, Secrets, ConfigMaps,
PodGroups and TrainJob status, but for the differences hack/sidebyside/differences.yaml lists
with their reasons (docs/side-by-side.md). ``make side-by-side`` runs the full corpus.

The bed runs upstream's install for the first half (hack/testbed/upstream_install.py
``switch``, as an admin moving between the two would), then ours again: the module runs after
every other but test_helm.py (which uninstalls the install) and leaves ours running. Its
PodGroup CRDs stay installed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tests.cluster.conftest import ROOT

sys.path.insert(0, str(ROOT / "hack/sidebyside"))

import addons
import bed as beds
import corpus as generated
import corpus_shapes
import upstream_install
from sidebyside import Outcome, release_corpus, report_lines, run_both

from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube

COUNT = int(os.environ.get("TRAINER_SIDEBYSIDE_COUNT", "30"))
SETTLE = 40.0


def _say(started: float) -> Callable[[str], None]:
    return lambda line: print(f"[{time.monotonic() - started:6.1f} s] {line}", flush=True)


async def _compare(bed: beds.Bed) -> Outcome:
    say = _say(time.monotonic())
    corpus = release_corpus()
    corpus.cluster_runtimes += generated.cluster_runtimes()
    corpus.add(generated.namespaced_runtimes())
    corpus.add(generated.trainjobs(COUNT, seed=1))
    corpus.support = corpus_shapes.support_objects()
    api = await new_api_client(str(bed.kubeconfig))
    try:
        return await run_both(
            Kube(api, timeout=60),
            lambda to: upstream_install.switch(bed, to, say),
            corpus, "t", SETTLE, say,
        )  # fmt: skip
    finally:
        await api.close()


@pytest.fixture(scope="module")
def outcome(bed: beds.Bed) -> Iterator[Outcome]:
    addons.install_podgroup_crds(bed)
    result = asyncio.run(_compare(bed))
    print("\n".join(report_lines(result)))
    yield result


def test_both_controllers_ran_the_whole_corpus(outcome: Outcome) -> None:
    for phase in (outcome.upstream, outcome.ours):
        admitted = [k for k, v in phase.verdicts.items() if v == "admitted"]
        assert len(admitted) > COUNT // 2, phase.verdicts
        jobsets = [k for k in phase.objects if k.startswith("JobSet/")]
        assert len(jobsets) > COUNT // 2
    # Every TrainJob ours left unfinished (no JobSet, or not Complete or Failed when the
    # settle time ran out), upstream's left unfinished too.
    assert set(outcome.ours.unsettled) <= set(outcome.upstream.unsettled), (
        outcome.ours.unsettled,
        outcome.upstream.unsettled,
    )


def test_no_difference_but_the_listed_ones(outcome: Outcome) -> None:
    assert not outcome.unexplained, "\n".join(report_lines(outcome))
