"""The eviction subresource's decisions (trainer/local/apiserver/core/eviction.py), as
kube-apiserver's EvictionREST makes them, and the label selectors budgets use
(trainer/machinery/labels.py). The requests themselves: tests/integration/test_eviction.py."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.local.apiserver.core import eviction
from trainer.local.apiserver.errors import APIError
from trainer.machinery.labels import SelectorError, selector_matches

NOW = "2026-01-01T12:00:00Z"


def budget(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "pdb", "namespace": "default", "generation": generation},
        "spec": {"minAvailable": 1},
        "status": {"observedGeneration": 1, **status},
    }


def test_spending_one_disruption_records_the_pod() -> None:
    pdb = budget(disruptionsAllowed=2, disruptedPods={"x": "2026-01-01T11:00:00Z"})
    spent = eviction.decremented(pdb, "p", NOW, dry_run=False)
    assert spent["status"]["disruptionsAllowed"] == 1
    assert spent["status"]["disruptedPods"] == {"x": "2026-01-01T11:00:00Z", "p": NOW}
    assert "conditions" not in spent["status"]  # only the last disruption flips it
    last = eviction.decremented(spent, "q", NOW, dry_run=False)
    assert last["status"]["conditions"][0]["reason"] == "InsufficientPods"
    assert pdb["status"]["disruptionsAllowed"] == 2  # the stored budget is not changed
    dry = eviction.decremented(pdb, "p", NOW, dry_run=True)
    assert "p" not in dry["status"]["disruptedPods"]


@pytest.mark.parametrize(
    ("pdb", "code", "message"),
    [
        (budget(generation=2, disruptionsAllowed=1), 429, "still being processed"),
        (budget(disruptionsAllowed=-1), 403, "pdb disruptions allowed is negative"),
        (
            budget(disruptionsAllowed=1, disruptedPods={str(i): NOW for i in range(2001)}),
            403,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ),
        (
            budget(disruptionsAllowed=0, desiredHealthy=3, currentHealthy=2),
            429,
            "The disruption budget pdb needs 3 healthy pods and has 2 currently",
        ),
    ],
    ids=["generation-behind", "negative", "too-many-unconfirmed", "none-left"],
)
def test_a_budget_refuses(pdb: dict[str, Any], code: int, message: str) -> None:
    with pytest.raises(APIError) as refused:
        eviction.decremented(pdb, "p", NOW, dry_run=False)
    err = refused.value
    assert err.code == code
    assert message in err.message + str(err.details)
    if code == 403:
        assert err.message == f'poddisruptionbudget.policy "pdb" is forbidden: {message}'


@pytest.mark.parametrize(
    ("phase", "deleting", "ignored", "pinned"),
    [
        ("Running", False, False, True),
        ("Pending", False, True, True),
        ("Succeeded", False, True, False),
        ("Failed", False, True, False),
        ("Running", True, True, False),
    ],
)
def test_which_pods_skip_the_budget(
    phase: str, deleting: bool, ignored: bool, pinned: bool
) -> None:
    pod: dict[str, Any] = {"metadata": {}, "status": {"phase": phase}}
    if deleting:
        pod["metadata"]["deletionTimestamp"] = NOW
    assert eviction.can_ignore_budget(pod) is ignored
    assert eviction.pins_resource_version(pod) is pinned


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {"a": "1"}, False),
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["2"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_label_selectors(selector: Any, labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(selector, labels) is matches


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ({"key": "a", "operator": "In"}, "for 'in', 'notin' operators, values set can't be empty"),
        (
            {"key": "a", "operator": "Exists", "values": ["x"]},
            "values set must be empty for exists and does not exist",
        ),
        ({"key": "a", "operator": "Near"}, '"Near" is not a valid label selector operator'),
    ],
)
def test_a_broken_selector_is_an_error(expression: dict[str, Any], message: str) -> None:
    with pytest.raises(SelectorError) as err:
        selector_matches({"matchExpressions": [expression]}, {"a": "1"})
    assert str(err.value) == message
