"""The side-by-side comparison's pure parts (hack/sidebyside/objects.py) and its list of
justified differences (hack/sidebyside/differences.yaml): what is normalised away, how a
difference is named, and that every listed difference names a test that exists."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack/sidebyside"))

from objects import (  # noqa: E402
    MIRRORS_ITS_JOBSET,
    Difference,
    allowed_from,
    classify,
    diff,
    jobs_status_as_mirror,
    normalise,
)

NS = "sbs-t-ours"


def _jobset(**annotations: str) -> dict[str, object]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "a",
            "namespace": NS,
            "uid": "0b9c7a56-1111-2222-3333-444455556666",
            "resourceVersion": "17",
            "creationTimestamp": "2026-12-02T05:00:00Z",
            "managedFields": [{"manager": "trainer"}],
            "ownerReferences": [{"kind": "TrainJob", "name": "a", "uid": "x"}],
            **({"annotations": annotations} if annotations else {}),
        },
        "spec": {"network": {"subdomain": "a"}, "replicatedJobs": [{"name": "node"}]},
        "status": {"restarts": 0},
    }


def test_what_no_controller_decides_is_normalised_away() -> None:
    out = normalise(_jobset(), NS)
    assert out["metadata"] == {
        "name": "a",
        "namespace": "$NS",
        "ownerReferences": [{"kind": "TrainJob", "name": "a"}],
    }
    assert "status" not in out  # JobSet's controller writes it


def test_secret_values_and_runtime_snapshots() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "s"}, "data": {"id_rsa": "AAAA"}}
    assert normalise(secret, NS)["data"] == {"id_rsa": "<set>"}
    snapshot = {
        "kind": "ConfigMap",
        "metadata": {"name": "a-runtime-snapshot"},
        "data": {"runtime": "kind: TrainingRuntime\nmetadata: {name: r, resourceVersion: '3'}\n"},
    }
    held = normalise(snapshot, NS)["data"]["runtime"]
    assert held == {"kind": "TrainingRuntime", "metadata": {"name": "r"}}


def test_a_difference_names_the_field_and_how_it_differs() -> None:
    a = {"JobSet/a": normalise(_jobset(), NS)}
    b = {"JobSet/a": normalise(_jobset(extra="1"), NS), "ConfigMap/c": {"kind": "ConfigMap"}}
    found = diff(a, b)
    assert found == [
        Difference("ConfigMap/c", "", "ours-only", None, {"kind": "ConfigMap"}),
        Difference("JobSet/a", "metadata.annotations", "ours-only", None, {"extra": "1"}),
    ]


def test_listed_differences_cover_by_kind_path_and_change() -> None:
    allowed = allowed_from(
        [
            {
                "id": "x", "kind": "JobSet", "path": "spec.replicatedJobs[*].name",
                "change": "value", "reason": "r", "justification": "docs/x.md", "test": "t",
            }
        ]
    )  # fmt: skip
    hit = Difference("JobSet/a", "spec.replicatedJobs[3].name", "value", "p", "q")
    miss = Difference("JobSet/a", "spec.replicatedJobs[3].name", "ours-only", None, "q")
    covered, unexplained = classify([hit, miss], allowed)
    assert covered == {"x": [hit]} and unexplained == [miss]


def test_every_listed_difference_is_justified_and_pinned_by_a_test_that_exists() -> None:
    data = yaml.safe_load((ROOT / "hack/sidebyside/differences.yaml").read_text())
    entries = allowed_from(data["differences"])
    assert len({e.id for e in entries}) == len(entries)
    for entry in entries:
        assert entry.change in ("upstream-only", "ours-only", "value", "any"), entry.id
        assert entry.justification.startswith(("docs/", "https://github.com/")), entry.id
        if entry.justification.startswith("docs/"):
            doc = ROOT / entry.justification.split("#", 1)[0]
            assert doc.is_file(), f"{entry.id}: {doc} does not exist"
        path, _, name = entry.test.partition("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^(async )?def {re.escape(name)}\(", source, re.M), (
            f"{entry.id}: test {entry.test} not found"
        )


def _trainjob(*counts: dict[str, int]) -> dict[str, object]:
    return {
        "kind": "TrainJob",
        "metadata": {"name": "a"},
        "status": {"jobsStatus": [{"name": "node", **c} for c in counts]},
    }


def test_a_trainjob_is_held_to_its_own_jobsets_counts() -> None:
    """KWOK's pod timings differ between the two runs, so an MPI TrainJob's node Job may have
    succeeded on one side and not the other when the launcher ends the JobSet: each side's
    jobsStatus is compared with its own JobSet's counts (absent counts read as zeros)."""
    jobset = {"status": {"replicatedJobsStatus": [{"name": "node", "succeeded": 1, "ready": 0}]}}
    mirrored = jobs_status_as_mirror(_trainjob({"succeeded": 1}), jobset)
    assert mirrored["status"]["jobsStatus"] == MIRRORS_ITS_JOBSET
    stale = jobs_status_as_mirror(_trainjob({"succeeded": 0, "active": 1}), jobset)
    assert stale["status"]["jobsStatus"] == [{"name": "node", "succeeded": 0, "active": 1}]
    assert jobs_status_as_mirror(_trainjob({"succeeded": 1}), None) == _trainjob({"succeeded": 1})
