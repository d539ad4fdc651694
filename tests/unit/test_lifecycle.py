"""The lifecycle clocks, pure (trainer/controller/lifecycle.py, docs/lifecycle.md)."""

from __future__ import annotations

import datetime as dt

from tests.builders import trainjob_model
from trainer.api.v1alpha1 import RunPolicy, TrainingRuntime, TrainingRuntimeSpec
from trainer.controller.lifecycle import run_policy, times, ttl_remaining
from trainer.machinery.models.core import Condition

CREATED = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:10:00Z"
T2 = "2026-01-01T01:00:00Z"


def cond(type_: str, status: str, at: str) -> Condition:
    return Condition(type=type_, status=status, reason="R", message="m", last_transition_time=at)


def test_a_trainjob_created_suspended_has_no_start_time_until_it_is_resumed() -> None:
    suspended = [cond("Suspended", "True", CREATED)]
    assert times(suspended, CREATED, True, None, None) == (None, None)
    resumed = [cond("Suspended", "False", T1)]
    assert times(resumed, CREATED, False, None, None) == (T1, None)


def test_the_start_time_is_creation_then_each_resume_and_kept_while_suspended() -> None:
    assert times(None, CREATED, False, None, None) == (CREATED, None)
    again = [cond("Suspended", "True", T1)]
    assert times(again, CREATED, True, CREATED, None) == (CREATED, None)
    assert times([cond("Suspended", "False", T2)], CREATED, False, CREATED, None) == (T2, None)


def test_the_completion_time_is_the_terminal_conditions_and_stays() -> None:
    failed = [cond("Failed", "True", T2)]
    assert times(failed, CREATED, False, CREATED, None) == (CREATED, T2)
    assert times(failed, CREATED, False, CREATED, T1) == (CREATED, T1)
    assert times([cond("Complete", "False", T2)], CREATED, False, CREATED, None)[1] is None


def test_the_trainjobs_own_values_override_the_runtimes_run_policy() -> None:
    runtime = TrainingRuntime(
        spec=TrainingRuntimeSpec(
            run_policy=RunPolicy(active_deadline_seconds=600, ttl_seconds_after_finished=60)
        )
    )
    defaulted = run_policy(trainjob_model("a"), runtime)
    assert (defaulted.active_deadline_seconds, defaulted.ttl_seconds_after_finished) == (600, 60)
    own = run_policy(
        trainjob_model("b", activeDeadlineSeconds=30, ttlSecondsAfterFinished=0), runtime
    )
    assert (own.active_deadline_seconds, own.ttl_seconds_after_finished) == (30, 0)
    assert run_policy(trainjob_model("c"), None).ttl_seconds_after_finished is None


def test_the_ttl_counts_from_the_completion_time_and_only_once_finished() -> None:
    now = dt.datetime(2026, 1, 1, 1, 0, 30, tzinfo=dt.UTC)
    running = trainjob_model("r", status={"conditions": [cond("Suspended", "False", T1).to_wire()]})
    assert ttl_remaining(running, 60, now) is None
    done = trainjob_model(
        "d",
        status={"conditions": [cond("Complete", "True", T2).to_wire()], "completionTime": T2},
    )
    assert ttl_remaining(done, 60, now) == 30.0
    assert ttl_remaining(done, 0, now) == -30.0
    assert ttl_remaining(done, None, now) is None
