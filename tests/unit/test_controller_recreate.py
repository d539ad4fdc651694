"""When the controller recreates a JobSet instead of applying to it: a change JobSet forbids on
an existing object (its webhook), or, while suspended, a pod-template field taken away that
JobSet's resume would leave on the Jobs it already made."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.controller.applydiff import drops_mutable, needs_recreate, refused_as_immutable


def jobset(image: str = "img", **pod: Any) -> dict[str, Any]:
    meta = {k: pod.pop(k) for k in ("labels", "annotations") if k in pod}
    return {
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "node",
                    "template": {
                        "spec": {
                            "template": {
                                "metadata": meta,
                                "spec": {"containers": [{"name": "node", "image": image}], **pod},
                            }
                        }
                    },
                }
            ],
        }
    }


FLAVOR_A = {"pool": "a", "spot": "true"}
TOL = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("live", "desired", "drops"),
    [
        (jobset(nodeSelector=FLAVOR_A), jobset(nodeSelector={"pool": "b"}), True),
        (jobset(nodeSelector={"pool": "a"}), jobset(nodeSelector={"pool": "b"}), False),
        (jobset(), jobset(nodeSelector=FLAVOR_A), False),
        (jobset(tolerations=[TOL]), jobset(), True),
        (jobset(tolerations=[TOL]), jobset(tolerations=[TOL]), False),
        (jobset(labels={"kueue.x-k8s.io/podset": "node"}), jobset(), True),
        (jobset(annotations={"a": "1"}), jobset(annotations={"a": "2"}), False),
        (jobset(schedulingGates=[{"name": "g"}]), jobset(schedulingGates=[]), True),
    ],
)
def test_drops_mutable(live: dict[str, Any], desired: dict[str, Any], drops: bool) -> None:
    assert drops_mutable(live, desired) is drops
    assert not needs_recreate(live, desired)  # all of these JobSet allows while suspended


def test_an_image_change_needs_a_recreate() -> None:
    assert needs_recreate(jobset("old"), jobset("new"))
    assert not drops_mutable(jobset("old"), jobset("new"))


def test_a_field_taken_away_is_recreated_once_jobset_refuses_it_while_suspended() -> None:
    """needs_recreate cannot tell a field taken away from one of JobSet's defaults; JobSet's
    refusal tells (a suspended JobSet with nothing active is recreated)."""
    live = jobset(terminationGracePeriodSeconds=7)
    assert not needs_recreate(live, jobset())
    refusal = 'JobSet.jobset.x-k8s.io "f" is invalid: spec.replicatedJobs: ...: field is immutable'
    assert refused_as_immutable(422, refusal, live)
    running = {**live, "spec": {**live["spec"], "suspend": False}}
    assert not refused_as_immutable(422, refusal, running)
    active = {**live, "status": {"replicatedJobsStatus": [{"name": "node", "active": 1}]}}
    assert not refused_as_immutable(422, refusal, active)
    assert not refused_as_immutable(422, "spec.replicatedJobs[0].name: Invalid value", live)
    assert not refused_as_immutable(403, refusal, live)


def _with_resources(limits: dict[str, Any], volume_limit: Any = "1Gi") -> dict[str, Any]:
    obj = jobset()
    pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["resources"] = {"limits": limits}
    pod["volumes"] = [{"name": "v", "emptyDir": {"sizeLimit": volume_limit}}]
    return obj


def test_quantities_a_go_webhook_rewrote_are_the_same_quantities() -> None:
    # JobSet's defaulting webhook stores Go's canonical form: 2 -> "2", 1000m -> "1".
    written = _with_resources({"nvidia.com/gpu": 2, "cpu": "1000m"}, 1073741824)
    stored = _with_resources({"nvidia.com/gpu": "2", "cpu": "1"}, "1Gi")
    assert not needs_recreate(stored, written)
    more = _with_resources({"nvidia.com/gpu": 3, "cpu": "1000m"}, 1073741824)
    assert needs_recreate(stored, more)
