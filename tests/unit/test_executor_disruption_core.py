"""The disruption controller's policy (trainer/local/executor/disruption_core.py): a
PodDisruptionBudget's status from the budget, its pods, their controllers' scale and the clock,
as kube-controller-manager's disruption controller computes it. Tables, no API."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from trainer.local.executor import disruption_core as core
from trainer.machinery import disruption as pdbs

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
STAMP = "2026-01-01T12:00:00Z"
LABELS = {"app": "web"}


def pod(
    name: str,
    *,
    ready: bool = True,
    owner: tuple[str, str, str, str] | None = None,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": LABELS if labels is None else labels,
    }
    if owner is not None:
        api_version, kind, owner_name, uid = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": uid,
                "controller": True,
            }
        ]
    if deleting:
        meta["deletionTimestamp"] = STAMP
    return {
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def budget(
    *,
    min_available: Any = None,
    max_unavailable: Any = None,
    selector: Any = "labels",
    status: dict[str, Any] | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if selector == "labels":
        spec["selector"] = {"matchLabels": LABELS}
    elif selector is not None:
        spec["selector"] = selector
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "pdb", "namespace": "default", "generation": generation},
        "spec": spec,
        "status": status or {},
    }


def workload(kind: str, name: str, uid: str, replicas: int, *, owner: Any = None) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"kind": kind, "metadata": meta, "spec": {"replicas": replicas}}


RS = ("apps/v1", "ReplicaSet", "web-rs", "rs-uid")
DEPLOYMENT_REF = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "name": "web",
    "uid": "dep-uid",
    "controller": True,
}
OBJECTS = {
    ("apps", "ReplicaSet", "web-rs"): workload("ReplicaSet", "web-rs", "rs-uid", 4),
    ("apps", "ReplicaSet", "web-dep-rs"): workload(
        "ReplicaSet", "web-dep-rs", "rs2-uid", 3, owner=DEPLOYMENT_REF
    ),
    ("apps", "Deployment", "web"): workload("Deployment", "web", "dep-uid", 5),
    ("apps", "StatefulSet", "db"): workload("StatefulSet", "db", "ss-uid", 3),
}


def find(group: str, kind: str, name: str) -> Any:
    return OBJECTS.get((group, kind, name))


def figures(status: dict[str, Any]) -> tuple[int, int, int, int]:
    return (
        status["expectedPods"],
        status["desiredHealthy"],
        status["currentHealthy"],
        status["disruptionsAllowed"],
    )


CASES = [
    # (id, budget, pods, (expected, desired, current, allowed))
    ("minAvailable 1 of two ready", budget(min_available=1), [pod("a"), pod("b")], (2, 1, 2, 1)),
    ("minAvailable 2 of two ready", budget(min_available=2), [pod("a"), pod("b")], (2, 2, 2, 0)),
    (
        "an unready pod is not healthy",
        budget(min_available=1),
        [pod("a"), pod("b", ready=False)],
        (2, 1, 1, 0),
    ),
    (
        "a pod being deleted is not healthy",
        budget(min_available=1),
        [pod("a"), pod("b", deleting=True)],
        (2, 1, 1, 0),
    ),
    ("no pod: nothing allowed", budget(min_available=0), [], (0, 0, 0, 0)),
    (
        "minAvailable 50% of a ReplicaSet of 4 rounds up",
        budget(min_available="50%"),
        [pod(n, owner=RS) for n in "abc"],
        (4, 2, 3, 1),
    ),
    (
        "minAvailable 30% of 4 is 2 (ceil 1.2)",
        budget(min_available="30%"),
        [pod(n, owner=RS) for n in "abcd"],
        (4, 2, 4, 2),
    ),
    (
        "maxUnavailable 1 of a ReplicaSet of 4",
        budget(max_unavailable=1),
        [pod(n, owner=RS) for n in "abcd"],
        (4, 3, 4, 1),
    ),
    (
        "maxUnavailable 30% of 4 rounds up to 2 unavailable",
        budget(max_unavailable="30%"),
        [pod(n, owner=RS) for n in "abcd"],
        (4, 2, 4, 2),
    ),
    (
        "maxUnavailable larger than the scale: desired 0",
        budget(max_unavailable=9),
        [pod(n, owner=RS) for n in "ab"],
        (4, 0, 2, 2),
    ),
    (
        "a ReplicaSet of a Deployment counts the Deployment's replicas",
        budget(max_unavailable=1),
        [pod("a", owner=("apps/v1", "ReplicaSet", "web-dep-rs", "rs2-uid"))],
        (5, 4, 1, 0),
    ),
    (
        "a StatefulSet's replicas",
        budget(min_available="100%"),
        [pod(n, owner=("apps/v1", "StatefulSet", "db", "ss-uid")) for n in "abc"],
        (3, 3, 3, 0),
    ),
    (
        "pods without a controller count for nothing in a scale",
        budget(max_unavailable=1),
        [pod("a"), pod("b")],
        (0, 0, 2, 0),
    ),
    (
        "another namespace's pods are not selected",
        budget(min_available=1),
        [pod("a"), pod("b", namespace="other")],
        (1, 1, 1, 0),
    ),
    (
        "an empty selector selects every pod of the namespace",
        budget(min_available=1, selector={}),
        [pod("a"), pod("b", labels={})],
        (2, 1, 2, 1),
    ),
    (
        "no selector selects nothing",
        budget(min_available=0, selector=None),
        [pod("a")],
        (0, 0, 0, 0),
    ),
    (
        "matchExpressions",
        budget(
            min_available=1,
            selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
        ),
        [pod("a"), pod("b"), pod("c", labels={"app": "db"})],
        (2, 1, 2, 1),
    ),
]


@pytest.mark.parametrize(("pdb", "pods", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_status_figures(pdb: dict[str, Any], pods: list[Any], want: tuple[int, ...]) -> None:
    result = core.sync(pdb, pods, find, NOW)
    assert result.status is not None
    assert figures(result.status) == want
    assert result.status["observedGeneration"] == 1
    allowed = want[3] > 0
    assert result.status["conditions"] == [
        {
            "type": "DisruptionAllowed",
            "status": "True" if allowed else "False",
            "observedGeneration": 1,
            "lastTransitionTime": STAMP,
            "reason": "SufficientPods" if allowed else "InsufficientPods",
            "message": "",
        }
    ]


def test_an_up_to_date_status_is_not_written_again() -> None:
    pdb = budget(min_available=1)
    first = core.sync(pdb, [pod("a"), pod("b")], find, NOW)
    assert first.status is not None
    again = core.sync({**pdb, "status": first.status}, [pod("a"), pod("b")], find, NOW)
    assert again.status is None
    # A new generation is observed even when the figures stay.
    newer = {**pdb, "metadata": {**pdb["metadata"], "generation": 2}, "status": first.status}
    written = core.sync(newer, [pod("a"), pod("b")], find, NOW).status
    assert written is not None
    assert written["observedGeneration"] == 2


def test_a_granted_eviction_is_not_healthy_until_its_pod_is_seen_deleted() -> None:
    granted = "2026-01-01T11:59:30Z"  # 30 s ago: within the 2-minute DeletionTimeout
    pdb = budget(min_available=1, status={"disruptedPods": {"a": granted}})
    result = core.sync(pdb, [pod("a"), pod("b")], find, NOW)
    assert result.status is not None
    assert result.status["disruptedPods"] == {"a": granted}
    assert figures(result.status) == (2, 1, 1, 0)
    assert result.recheck_after == 90.0
    # Once the pod is gone, its entry goes.
    gone = core.sync(pdb, [pod("b")], find, NOW)
    assert gone.status is not None
    assert "disruptedPods" not in gone.status
    assert figures(gone.status) == (1, 1, 1, 0)
    assert gone.recheck_after is None


def test_an_eviction_not_carried_out_expires_with_a_warning() -> None:
    pdb = budget(min_available=1, status={"disruptedPods": {"a": "2026-01-01T11:57:00Z"}})
    a = pod("a")
    result = core.sync(pdb, [a, pod("b")], find, NOW)
    assert result.status is not None
    assert "disruptedPods" not in result.status
    assert figures(result.status) == (2, 1, 2, 1)
    assert result.events == [
        (
            a,
            "Warning",
            "NotDeleted",
            "Pod was expected by PDB default/default to be deleted but it wasn't",
        )
    ]


@pytest.mark.parametrize(
    ("owner", "message"),
    [
        (
            ("batch/v1", "Job", "train", "job-uid"),
            "jobs.batch does not implement the scale subresource",
        ),
        (("apps/v1", "ReplicaSet", "gone", "x"), 'found no controllers for pod "a"'),
        (("apps/v1", "ReplicaSet", "web-rs", "other-uid"), 'found no controllers for pod "a"'),
    ],
    ids=["job-has-no-scale", "controller-missing", "controller-replaced"],
)
def test_a_scale_that_cannot_be_read_fails_safe(owner: Any, message: str) -> None:
    previous = {
        "disruptionsAllowed": 3,
        "currentHealthy": 4,
        "desiredHealthy": 1,
        "expectedPods": 4,
    }
    pdb = budget(max_unavailable="25%", status={**previous, "observedGeneration": 1})
    result = core.sync(pdb, [pod("a", owner=owner)], find, NOW)
    assert result.status is not None
    assert result.status["disruptionsAllowed"] == 0
    assert result.status["currentHealthy"] == 4  # the rest is left as it was
    assert result.status["conditions"] == [
        {
            "type": "DisruptionAllowed",
            "status": "False",
            "observedGeneration": 1,
            "lastTransitionTime": STAMP,
            "reason": "SyncFailed",
            "message": message,
        }
    ]
    assert result.events == [
        (
            pdb,
            "Warning",
            "CalculateExpectedPodCountFailed",
            f"Failed to calculate the number of expected pods: {message}",
        )
    ]


def test_a_selector_that_does_not_parse_fails_safe() -> None:
    selector = {"matchExpressions": [{"key": "app", "operator": "In"}]}
    result = core.sync(budget(min_available=1, selector=selector), [pod("a")], find, NOW)
    assert result.status is not None
    why = "for 'in', 'notin' operators, values set can't be empty"
    assert result.status["conditions"][0]["message"] == why
    assert result.events[0][1:] == ("Warning", "NoPods", f"Failed to get pods: {why}")


def test_events_for_no_pods_and_unmanaged_pods() -> None:
    pdb = budget(min_available=1)
    assert core.sync(pdb, [], find, NOW).events == [
        (pdb, "Normal", "NoPods", "No matching pods found")
    ]
    pct = budget(min_available="50%")
    events = core.sync(pct, [pod("a")], find, NOW).events
    assert [(t, r) for _, t, r, _ in events] == [("Warning", "UnmanagedPods")]
    assert events[0][3].startswith(
        "Pods selected by this PodDisruptionBudget (selector: &LabelSelector{MatchLabels:"
        "map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{},}) were "
        "found to be unmanaged."
    )


def test_what_is_read_for_the_scale() -> None:
    pods = [
        pod("a", owner=RS),
        pod("b", owner=("apps/v1", "ReplicaSet", "web-dep-rs", "rs2-uid")),
        pod("c", owner=("batch/v1", "Job", "j", "u")),
        pod("d"),
    ]
    assert core.scale_targets(pods) == {
        ("apps", "ReplicaSet", "web-rs"),
        ("apps", "ReplicaSet", "web-dep-rs"),
    }
    assert core.owner_targets(OBJECTS.values()) == {("apps", "Deployment", "web")}
    assert core.needs_scale(budget(min_available="10%"))
    assert core.needs_scale(budget(max_unavailable=0))
    assert not core.needs_scale(budget(min_available=3))


def test_the_transition_time_stays_while_the_condition_holds() -> None:
    before = "2026-01-01T10:00:00Z"
    old = {
        "type": "DisruptionAllowed",
        "status": "True",
        "observedGeneration": 1,
        "lastTransitionTime": before,
        "reason": "SufficientPods",
        "message": "",
    }
    status: dict[str, Any] = {"disruptionsAllowed": 2, "observedGeneration": 1, "conditions": [old]}
    pdbs.update_disruption_allowed_condition(status, STAMP)
    assert status["conditions"] == [old]
    status["disruptionsAllowed"] = 0
    pdbs.update_disruption_allowed_condition(status, STAMP)
    assert status["conditions"][0]["lastTransitionTime"] == STAMP
    assert status["conditions"][0]["reason"] == "InsufficientPods"


@pytest.mark.parametrize(
    ("value", "total", "round_up", "want"),
    [
        (3, 10, True, 3),
        ("50%", 3, True, 2),
        ("50%", 3, False, 1),
        ("0%", 7, True, 0),
        ("100%", 7, True, 7),
    ],
)
def test_scaled_value(value: Any, total: int, round_up: bool, want: int) -> None:
    assert pdbs.scaled_value(value, total, round_up=round_up) == want


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("5", "invalid value for IntOrString: invalid type: string is not a percentage"),
        (
            "x%",
            'invalid value for IntOrString: invalid value "x%": strconv.Atoi: parsing "x": '
            "invalid syntax",
        ),
    ],
)
def test_scaled_value_refuses_what_is_not_a_count(value: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        pdbs.scaled_value(value, 4, round_up=True)
    assert str(err.value) == message
