"""Controller status writes leave ``status.trainerStatus`` to the status server: it is not
compared and never sent, so a stale cached copy cannot overwrite a newer report."""

from __future__ import annotations

from trainer.controller.reconcile import status_patch

STALE = {"progressPercentage": 10, "lastUpdatedTime": "2026-01-01T00:00:00Z"}


def test_status_patch_never_carries_trainer_status() -> None:
    current = {"state": "Pending", "trainerStatus": STALE}
    desired = {"state": "Running", "trainerStatus": STALE}
    assert status_patch(current, desired) == {"status": {"state": "Running"}}


def test_only_a_trainer_status_difference_writes_nothing() -> None:
    current = {"state": "Running"}
    desired = {"state": "Running", "trainerStatus": STALE}
    assert status_patch(current, desired) is None


def test_a_newer_trainer_status_in_the_cache_is_not_a_difference() -> None:
    current = {"state": "Running", "trainerStatus": {"progressPercentage": 90}}
    assert status_patch(current, {"state": "Running"}) is None
