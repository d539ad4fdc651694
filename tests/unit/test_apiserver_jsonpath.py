"""The JSONPath subset of the embedded API server (printer columns, kubectl-style paths)."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.local.apiserver.jsonpath import JSONPathError, find, first, format_value, parse

TRAINJOB: dict[str, Any] = {
    "metadata": {
        "name": "demo",
        "labels": {"app.kubernetes.io/name": "demo", "team": "ml"},
        "creationTimestamp": "2026-01-01T00:00:00Z",
    },
    "spec": {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": 2, "env": [{"name": "A", "value": "1"}, {"name": "B"}]},
    },
    "status": {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "JobSetCreated"},
            {"type": "Suspended", "status": "False"},
            {"type": "Complete", "status": "True", "observedGeneration": 3},
        ],
        "jobsStatus": [
            {"name": "node", "active": 2, "ready": 1.5, "suspended": False},
            {"name": "initializer", "active": 0, "suspended": True},
        ],
    },
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # fields, brackets and escapes
        (".metadata.name", ["demo"]),
        ("{.metadata.name}", ["demo"]),
        ("$.metadata.name", ["demo"]),
        ("metadata.name", ["demo"]),
        (".spec.runtimeRef['name']", ["torch-distributed"]),
        ('.spec.runtimeRef["name"]', ["torch-distributed"]),
        (".metadata.labels['app.kubernetes.io/name']", ["demo"]),
        (".metadata.labels.app\\.kubernetes\\.io/name", ["demo"]),
        (".metadata.labels['team','missing','app.kubernetes.io/name']", ["ml", "demo"]),
        # indexes and slices
        (".status.conditions[0].type", ["Created"]),
        (".status.conditions[-1].type", ["Complete"]),
        (".status.conditions[-1:].type", ["Complete"]),
        (".status.conditions[1:].type", ["Suspended", "Complete"]),
        (".status.conditions[:2].type", ["Created", "Suspended"]),
        (".status.conditions[::2].type", ["Created", "Complete"]),
        (".status.conditions[0,2].type", ["Created", "Complete"]),
        (".status.conditions[-5:].type", ["Created", "Suspended", "Complete"]),
        # wildcards and recursive descent
        (".status.conditions[*].type", ["Created", "Suspended", "Complete"]),
        (".spec.trainer.env[*].name", ["A", "B"]),
        (".spec.runtimeRef.*", ["torch-distributed"]),
        (".spec..name", ["torch-distributed", "A", "B"]),
        # filters: strings, numbers, bools, paths, existence
        ('.status.conditions[?(@.status=="True")].type', ["Created", "Complete"]),
        (".status.conditions[?(@.status=='True')].type", ["Created", "Complete"]),
        ('.status.conditions[?(@.status != "True")].type', ["Suspended"]),
        ('.status.conditions[?(@.type=="Complete")].observedGeneration', [3]),
        (".status.conditions[?(@.observedGeneration==3)].type", ["Complete"]),
        (".status.conditions[?(@.observedGeneration>=3.0)].type", ["Complete"]),
        (".status.conditions[?(@.observedGeneration<3)].type", []),
        (".status.jobsStatus[?(@.suspended==true)].name", ["initializer"]),
        (".status.jobsStatus[?(@.suspended!=true)].name", ["node"]),
        (".status.jobsStatus[?(@.ready==1.5)].name", ["node"]),
        (".status.jobsStatus[?(@.active>@.ready)].name", ["node"]),
        (".status.conditions[?(@.reason)].type", ["Created"]),
        (".spec.trainer.env[?(@.value)].name", ["A"]),
    ],
)
def test_find(expr: str, expected: list[Any]) -> None:
    assert find(expr, TRAINJOB) == expected


@pytest.mark.parametrize(
    "expr",
    [
        ".metadata.missing",
        ".metadata.name.deeper",  # a field of a string
        ".status.conditions.type",  # a field of a list
        ".status.conditions[7]",
        ".status.conditions[-7]",
        ".status.conditions[5:]",
        ".metadata[0]",  # an index into a map
        ".metadata[?(@.x)]",  # a filter on a map
        ".status.conditions[?(@.status==1)].type",  # a string never equals a number
        ".status.jobsStatus[?(@.suspended==0)].name",  # nor a bool a number
        '.status.conditions[?(@.type<"Z")].type' + "[0].x",
    ],
)
def test_missing_values_give_no_result(expr: str) -> None:
    assert find(expr, TRAINJOB) == []


def test_whole_object_and_first() -> None:
    assert find(".", TRAINJOB) == [TRAINJOB]
    assert first('.status.conditions[?(@.status=="True")].type', TRAINJOB) == "Created"
    assert first(".status.missing", TRAINJOB, "none") == "none"


def test_parse_is_cached_and_reusable() -> None:
    path = parse(".spec.trainer.numNodes")
    assert path is parse(".spec.trainer.numNodes")
    assert path.find(TRAINJOB) == [2]
    assert find(path, {"spec": {"trainer": {"numNodes": 5}}}) == [5]


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty expression"),
        ("{}", "empty expression"),
        (".a[", "expected an index"),
        (".a[x]", "expected an index"),
        (".a['x]", "unterminated string"),
        (".a['x'", "expected ']'"),
        (".a[?(@.x==)]", "expected a path or a literal"),
        (".a[?(@.x=='y')", "expected ']'"),
        (".a[?(1)]", "must test a path"),
        (".a[::0]", "step of a slice must be positive"),
        (".a..", "must be followed by a field"),
        (".a b", "unexpected 'b'"),
    ],
)
def test_syntax_errors_name_the_problem(expr: str, message: str) -> None:
    with pytest.raises(JSONPathError, match=message):
        parse(expr)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("Complete", "Complete"),
        (3, "3"),
        (2.0, "2"),
        (1.5, "1.5"),
        (1e21, "1e+21"),
        (1.5e-05, "1.5e-05"),
        (True, "true"),
        (False, "false"),
        (None, "<nil>"),
        (["a", "b"], '["a","b"]'),
        ({"k": 1}, '{"k":1}'),
    ],
)
def test_format_value_prints_like_client_go(value: Any, text: str) -> None:
    assert format_value(value) == text
