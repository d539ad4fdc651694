"""When the controller writes a TrainJob's status (``status_patch``): our additive fields
(``state``, ``startTime``, ``completionTime``) never cost a write of their own on a TrainJob
without a status, where upstream's controller would write nothing; they ride along with
upstream's fields, and a status that exists gets them as soon as they differ."""

from __future__ import annotations

from trainer.controller.reconcile import status_patch

START = "2026-01-01T00:00:00Z"
JOBS = [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]
SUSPENDED = {
    "type": "Suspended",
    "status": "True",
    "reason": "Suspended",
    "message": "TrainJob is suspended",
    "lastTransitionTime": START,
}


def test_no_first_write_of_additive_fields_alone() -> None:
    assert status_patch({}, {"state": "Pending", "startTime": START}) is None


def test_a_trainer_status_alone_is_no_status_of_ours() -> None:
    current = {"trainerStatus": {"progressPercentage": 5}}
    assert status_patch(current, {"state": "Pending", "startTime": START}) is None


def test_the_first_write_carries_upstreams_fields_and_ours_together() -> None:
    desired = {"jobsStatus": JOBS, "state": "Pending", "startTime": START}
    assert status_patch({}, desired) == {"status": desired}


def test_a_condition_is_upstreams_and_brings_the_state_along() -> None:
    desired = {"conditions": [SUSPENDED], "state": "Suspended"}
    assert status_patch({}, desired) == {"status": desired}


def test_an_existing_status_gets_the_additive_fields_alone() -> None:
    """A status upstream's controller wrote (no state), reconciled by ours."""
    desired = {"jobsStatus": JOBS, "state": "Pending", "startTime": START}
    assert status_patch({"jobsStatus": JOBS}, desired) == {"status": desired}
    running = {**desired, "state": "Running"}
    assert status_patch(desired, running) == {"status": running}
