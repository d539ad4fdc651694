"""What this process last applied (``AppliedConfigs``, trainer/controller/applydiff.py): an
object is skipped only when the same configuration was applied to it by this process and the
live object still holds it; a field taken away from the desired object is applied (server-side
apply then removes it). Nothing of it is written into the objects."""

from __future__ import annotations

import copy
from typing import Any

from trainer.controller.applydiff import AppliedConfigs, config_hash

KEY = "default/job"


def config_map(**data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "job-hostfile", "namespace": "default"},
        "data": dict(data),
    }


def live(desired: dict[str, Any]) -> dict[str, Any]:
    """``desired`` as the API returns it: server-set fields added."""
    obj = copy.deepcopy(desired)
    obj["metadata"].update(uid="u", resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z")
    return obj


def test_an_object_this_process_never_applied_is_applied() -> None:
    desired = config_map(a="1")
    assert not AppliedConfigs().unchanged(KEY, live(desired), desired)
    assert not AppliedConfigs().unchanged(KEY, None, desired)


def test_the_same_configuration_on_an_object_that_holds_it_is_skipped() -> None:
    applied = AppliedConfigs()
    desired = config_map(a="1", b="2")
    applied.record(KEY, desired)
    assert applied.unchanged(KEY, live(desired), copy.deepcopy(desired))
    assert not applied.unchanged("default/other", live(desired), desired)  # per TrainJob


def test_a_field_taken_away_is_applied_though_the_live_object_covers_the_rest() -> None:
    applied = AppliedConfigs()
    before = config_map(a="1", b="2")
    applied.record(KEY, before)
    after = config_map(a="1")
    assert not applied.unchanged(KEY, live(before), after)


def test_a_live_object_changed_by_someone_else_is_applied() -> None:
    applied = AppliedConfigs()
    desired = config_map(a="1")
    applied.record(KEY, desired)
    assert not applied.unchanged(KEY, live(config_map(a="2")), desired)


def test_forgotten_with_its_trainjob() -> None:
    applied = AppliedConfigs()
    desired = config_map(a="1")
    applied.record(KEY, desired)
    assert len(applied) == 1
    applied.forget(KEY)
    assert len(applied) == 0
    assert not applied.unchanged(KEY, live(desired), desired)


def test_nothing_is_written_into_the_object() -> None:
    desired = config_map(a="1")
    before = copy.deepcopy(desired)
    applied = AppliedConfigs()
    applied.record(KEY, desired)
    applied.unchanged(KEY, live(desired), desired)
    assert desired == before
    assert config_hash(desired) == config_hash(before)
