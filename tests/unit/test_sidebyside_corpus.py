"""hack/sidebyside/corpus.py, the TrainJobs of the side-by-side test against upstream's
controller: deterministic, the size asked for, names that are valid and unique, every
dimension covered, only v2.3 fields, and our own offline validator (``trainer validate``'s
checks) admitting exactly the TrainJobs annotated valid."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.api.load import Document
from trainer.cli.checks import check_documents

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack/sidebyside"))

import corpus

pytestmark = pytest.mark.skipif(
    not corpus.RELEASED_RUNTIMES.is_dir(),
    reason=f"{corpus.RELEASED_RUNTIMES} (upstream's released runtimes) is absent",
)

COUNT = 500
RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Fields upstream v2.3 does not have: removed ones, and this project's additions.
NOT_V23 = {
    "podTemplateOverrides",
    "ttlSecondsAfterFinished",
    "elasticPolicy",
    "tensorflow",
    "paddle",
    "runPolicy",
    "MPICH",
    "Intel",
}
DIMENSIONS = [
    "runtimeRef.kind:ClusterTrainingRuntime",
    "runtimeRef.kind:TrainingRuntime",
    "runtimeRef.kind:default",
    "runtimeRef.apiGroup:set",
    "runtimeRef.apiGroup:default",
    *(f"numNodes:{n}" for n in ("absent", 0, 1, 2, 3, 4)),
    "numProcPerNode:int",
    "numProcPerNode:absent",
    *(
        f"resourcesPerNode.{part}.{name}"
        for part in ("requests", "limits")
        for name in ("cpu", "memory", "nvidia.com/gpu")
    ),
    "trainer.image",
    "trainer.command",
    "trainer.command:tune-run",
    "trainer.args",
    "trainer.env:value",
    "trainer.env:fieldRef",
    "trainer:absent",
    "trainer:empty",
    "initializer.dataset",
    "initializer.model",
    "initializer.storageUri",
    "initializer.env",
    "initializer.secretRef",
    "runtimePatches:1",
    "runtimePatches:2",
    *(
        f"runtimePatches.{kind}"
        for kind in (
            "jobset-metadata",
            "job-metadata",
            "pod-metadata",
            "nodeSelector",
            "tolerations",
            "volumes",
            "serviceAccountName",
            "containers.env",
            "containers.volumeMounts",
        )
    ),
    "suspend:True",
    "suspend:False",
    "suspend:absent",
    "managedBy:absent",
    "managedBy:trainer.kubeflow.org/trainjob-controller",
    "managedBy:kueue.x-k8s.io/multikueue",
    "metadata.labels",
    "metadata.annotations",
    "activeDeadlineSeconds",
]


@pytest.fixture(scope="module")
def jobs() -> list[dict[str, Any]]:
    return corpus.trainjobs(COUNT, 0)


def runtimes() -> list[dict[str, Any]]:
    return corpus.cluster_runtimes() + corpus.namespaced_runtimes()


def expect(job: dict[str, Any]) -> str:
    value: str = job["metadata"]["annotations"][corpus.EXPECT]
    return value


def keys(obj: Any) -> Iterator[str]:
    """Every mapping key and string value in ``obj``, recursively."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield key
            yield from keys(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from keys(item)
    elif isinstance(obj, str):
        yield obj


def test_same_count_and_seed_same_corpus(jobs: list[dict[str, Any]]) -> None:
    assert corpus.trainjobs(COUNT, 0) == jobs
    assert corpus.trainjobs(COUNT, 1) != jobs
    assert corpus.trainjobs(50, 7) == corpus.trainjobs(50, 7)


@pytest.mark.parametrize("count", [0, 1, 13, 120])
def test_as_many_trainjobs_as_asked(count: int) -> None:
    assert len(corpus.trainjobs(count, 3)) == count


def test_trainjobs_are_v1alpha1_without_a_namespace(jobs: list[dict[str, Any]]) -> None:
    for job in jobs:
        assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
        assert job["kind"] == "TrainJob"
        assert "namespace" not in job["metadata"]
        assert expect(job) in ("valid", "invalid")


def test_names_are_unique_and_valid_unless_the_name_is_the_fault(
    jobs: list[dict[str, Any]],
) -> None:
    names = [job["metadata"]["name"] for job in jobs]
    assert len(set(names)) == len(names)
    for job in jobs:
        name = job["metadata"]["name"]
        reason = job["metadata"]["annotations"].get(corpus.REASON, "")
        if reason.startswith("name-"):
            continue
        assert RFC1035.match(name), name
        assert len(name) <= corpus.MAX_NAME_LENGTH, name
        assert name.startswith("c-"), name


def test_runtimes_are_upstreams_verbatim_plus_namespaced_ones() -> None:
    released = sorted(corpus.RELEASED_RUNTIMES.glob("*.yaml"))
    assert corpus.cluster_runtimes() == [yaml.safe_load(p.read_text()) for p in released]
    assert len(released) == 9
    for rt in corpus.namespaced_runtimes():
        assert rt["kind"] == "TrainingRuntime"
        assert "namespace" not in rt["metadata"]
    names = [rt["metadata"]["name"] for rt in runtimes()]
    assert len(set(names)) == len(names)


def test_every_dimension_is_covered(jobs: list[dict[str, Any]]) -> None:
    covered = corpus.kinds_covered(jobs)
    for rt in runtimes():
        assert covered.get(f"runtime:{rt['metadata']['name']}", 0) >= 15, rt["metadata"]["name"]
    for dimension in DIMENSIONS:
        assert covered.get(dimension, 0) >= 5, dimension
    for reason, _, _ in corpus.BREAKERS:
        assert covered.get(f"invalid:{reason}", 0) >= 1, reason
    invalid = covered["expect:invalid"]
    assert 0.07 * COUNT <= invalid <= 0.09 * COUNT
    assert covered["managedBy:kueue.x-k8s.io/multikueue"] == round(0.02 * COUNT)


def test_only_v23_fields(jobs: list[dict[str, Any]]) -> None:
    used = set(keys(jobs)) | set(keys(runtimes()))
    assert not used & NOT_V23


def test_upstream_admitted_cases_are_marked(jobs: list[dict[str, Any]]) -> None:
    for job in jobs:
        annotations = job["metadata"]["annotations"]
        marked = annotations.get(corpus.ADMITTED_UPSTREAM) == "true"
        assert marked == (annotations.get(corpus.REASON) in corpus.UPSTREAM_ADMITS)


def test_our_validator_admits_exactly_the_valid_ones(jobs: list[dict[str, Any]]) -> None:
    rts = runtimes()
    docs = [Document(f"runtime {i}", 0, rt) for i, rt in enumerate(rts)]
    docs += [Document(job["metadata"]["name"], 0, job) for job in jobs]
    outcomes = check_documents(docs, [], with_builtins=False)
    assert len(outcomes) == len(docs)
    for outcome in outcomes[: len(rts)]:
        assert outcome.ok, (outcome.name, [str(e) for e in outcome.errors])
    disputed = {reason for reason, _ in corpus.DISPUTED}
    wrong = []
    for outcome, job in zip(outcomes[len(rts) :], jobs, strict=True):
        annotations = job["metadata"]["annotations"]
        if annotations.get(corpus.REASON) in disputed:
            continue
        if ("valid" if outcome.ok else "invalid") != expect(job):
            errors = [str(e) for e in outcome.errors]
            wrong.append((job["metadata"]["name"], annotations.get(corpus.REASON), errors))
    assert not wrong


def test_the_cli_writes_both_files_and_prints_the_coverage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert corpus.main(["--count", "40", "--seed", "2", "--out", str(tmp_path)]) == 0
    written = list(yaml.safe_load_all((tmp_path / "trainjobs.yaml").read_text()))
    assert written == corpus.trainjobs(40, 2)
    assert list(yaml.safe_load_all((tmp_path / "runtimes.yaml").read_text())) == runtimes()
    assert "expect:valid" in capsys.readouterr().err
