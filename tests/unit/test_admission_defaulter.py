"""The TrainJob defaulter (trainer.admission.defaulter): it stamps runtimePatches[].time on
create and on change, keeps the old stamp for unchanged patches, and never mutates its input."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from tests import builders as b
from trainer.admission.defaulter import default_trainjob
from trainer.api.v1alpha1 import TrainJob

trainjob = partial(b.trainjob_model, namespace="ns", suspend=False)

NOW = "2026-11-22T10:00:00Z"
OLD = "2026-01-01T00:00:00Z"
USER = "2025-05-05T05:05:05Z"


def patch(manager: str, pool: str = "a", time: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {"template": {"spec": {"nodeSelector": {"pool": pool}}}}
                            },
                        }
                    ]
                }
            }
        },
    }
    if time is not None:
        out["time"] = time
    return out


def times(tj: TrainJob) -> dict[str, str | None]:
    assert tj.spec is not None
    return {p.manager: p.time for p in tj.spec.runtime_patches or []}


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        pytest.param([patch("a.io/x")], {"a.io/x": NOW}, id="no-time-gets-now"),
        pytest.param([patch("a.io/x", time=USER)], {"a.io/x": USER}, id="user-time-kept"),
        pytest.param(
            [patch("a.io/x"), patch("b.io/y", time=USER)],
            {"a.io/x": NOW, "b.io/y": USER},
            id="mixed",
        ),
        pytest.param(
            [
                {
                    "manager": "kueue.x-k8s.io/manager",
                    "trainingRuntimeSpec": {"template": {"spec": {}}},
                }
            ],
            {"kueue.x-k8s.io/manager": NOW},
            id="kueue-empty-patch",
        ),
    ],
)
def test_create(new: list[dict[str, Any]], expected: dict[str, str]) -> None:
    assert times(default_trainjob(trainjob(runtime_patches=new), None, NOW)) == expected


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            [patch("a.io/x", time=OLD)],
            [patch("a.io/x")],
            {"a.io/x": OLD},
            id="unchanged-keeps-old",
        ),
        pytest.param(
            [patch("a.io/x", time=OLD)],
            [patch("a.io/x", time=USER)],
            {"a.io/x": OLD},
            id="unchanged-user-time-ignored",
        ),
        pytest.param(
            [patch("a.io/x", time=OLD)],
            [patch("a.io/x", pool="b")],
            {"a.io/x": NOW},
            id="changed-gets-now",
        ),
        pytest.param(
            [patch("a.io/x", time=OLD)],
            [patch("a.io/x", pool="b", time=OLD)],
            {"a.io/x": NOW},
            id="changed-user-time-ignored",
        ),
        pytest.param(
            [patch("a.io/x", time=OLD)],
            [patch("a.io/x", time=OLD), patch("b.io/y")],
            {"a.io/x": OLD, "b.io/y": NOW},
            id="new-manager-gets-now",
        ),
        pytest.param(
            [patch("a.io/x", time=OLD)],
            [patch("a.io/x"), patch("b.io/y", time=USER)],
            {"a.io/x": OLD, "b.io/y": USER},
            id="new-manager-user-time-kept",
        ),
        pytest.param(
            [patch("a.io/x")],
            [patch("a.io/x")],
            {"a.io/x": NOW},
            id="unchanged-old-without-time-gets-now",
        ),
        pytest.param(
            [patch("a.io/x", time=OLD), patch("b.io/y", time=OLD)],
            [patch("b.io/y", time=OLD)],
            {"b.io/y": OLD},
            id="removed-manager",
        ),
        pytest.param(None, [patch("a.io/x")], {"a.io/x": NOW}, id="first-patch-on-update"),
        pytest.param([patch("a.io/x", time=OLD)], None, {}, id="all-patches-removed"),
    ],
)
def test_update(
    old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None, expected: dict[str, str]
) -> None:
    out = default_trainjob(
        trainjob(runtime_patches=new, suspend=True),
        trainjob(runtime_patches=old, suspend=True),
        NOW,
    )
    assert times(out) == expected


def test_unsuspend_only_keeps_every_time() -> None:
    old = trainjob(runtime_patches=[patch("kueue.x-k8s.io/manager", time=OLD)], suspend=True)
    new = trainjob(runtime_patches=[patch("kueue.x-k8s.io/manager", time=OLD)], suspend=False)
    out = default_trainjob(new, old, NOW)
    assert times(out) == {"kueue.x-k8s.io/manager": OLD}
    assert out.to_wire() == new.to_wire()


def test_inputs_are_not_mutated_and_the_rest_is_kept() -> None:
    new = trainjob(runtime_patches=[patch("a.io/x"), patch("b.io/y", pool="b")])
    old = trainjob(runtime_patches=[patch("a.io/x", time=OLD)])
    new_before, old_before = new.to_wire(), old.to_wire()
    out = default_trainjob(new, old, NOW)
    assert new.to_wire() == new_before
    assert old.to_wire() == old_before
    assert out is not new
    wire = out.to_wire()
    assert [p["time"] for p in wire["spec"]["runtimePatches"]] == [OLD, NOW]
    for p in wire["spec"]["runtimePatches"]:
        p.pop("time")
    assert wire == new_before


def test_no_patches_returns_an_equal_copy() -> None:
    new = trainjob(runtime_patches=None)
    out = default_trainjob(new, None, NOW)
    assert out is not new
    assert out.to_wire() == new.to_wire()
