"""The first failure of a TrainJob's pods, pure (trainer/controller/failures.py)."""

from __future__ import annotations

from typing import Any

from trainer.controller.failures import (
    MAX_OUTPUT_BYTES,
    first_failure,
    jobset_failures,
    last_output,
    slim_pod,
)
from trainer.jobset import contract as jsc

SECOND = "2026-01-01T00:00:05Z"


def pod(
    name: str,
    code: int,
    finished: str = SECOND,
    reason: str = "Error",
    attempt: int = 0,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "labels": {
            jsc.LABEL_JOBSET_NAME: "job",
            jsc.LABEL_JOBSET_UID: "js-1",
            jsc.LABEL_REPLICATED_JOB: "node",
            jsc.LABEL_RESTART_ATTEMPT: str(attempt),
            "batch.kubernetes.io/job-completion-index": name[-1],
            "unrelated": "dropped",
        },
    }
    if deleting:  # deleted at 00:00:05 with a 30 s grace period
        meta["deletionTimestamp"] = "2026-01-01T00:00:35Z"
        meta["deletionGracePeriodSeconds"] = 30
    terminated = {"exitCode": code, "reason": reason, "finishedAt": finished, "message": "m"}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "node", "image": "img"}]},
        "status": {"containerStatuses": [{"name": "node", "state": {"terminated": terminated}}]},
    }


def test_a_container_killed_by_its_pods_deletion_is_not_the_cause_even_in_the_same_second() -> None:
    pods = [pod("job-node-0-0", 143, deleting=True), pod("job-node-0-1", 3, deleting=True)]
    first = first_failure(pods, "js-1")
    assert first is not None and (first.node_index, first.exit_code) == ("1", 3)
    # Only killed ones (JobSet failed for a reason of its own): no cause at all.
    assert first_failure([pod("job-node-0-0", 143, deleting=True)], "js-1") is None
    # Over its memory limit while being deleted: still a cause.
    oom = [pod("job-node-0-0", 137, reason="OOMKilled", deleting=True), pod("job-node-0-1", 3)]
    first = first_failure(oom, "js-1")
    assert first is not None and first.reason == "OOMKilled"


def test_the_latest_restart_attempt_and_this_jobset_only() -> None:
    pods = [
        pod("job-node-0-0", 1, finished="2026-01-01T00:00:01Z", attempt=0),
        pod("job-node-0-1", 2, finished="2026-01-01T00:00:09Z", attempt=1),
    ]
    assert [f.exit_code for f in jobset_failures(pods, "js-1")] == [2]
    assert jobset_failures(pods, "another-jobset") == []


def test_the_quoted_output_is_the_last_80_lines_and_2_kib() -> None:
    assert last_output("\n".join(f"line {i}" for i in range(200))).splitlines()[0] == "line 120"
    long = last_output("\n".join("x" * 100 for _ in range(60)))
    assert len(long.encode()) <= MAX_OUTPUT_BYTES and long.startswith("x" * 100)


def test_the_pod_cache_keeps_no_spec_and_only_jobsets_labels() -> None:
    slim = slim_pod(pod("job-node-0-1", 3))
    assert "spec" not in slim
    assert "unrelated" not in slim["metadata"]["labels"]
    assert slim["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
