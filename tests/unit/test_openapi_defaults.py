"""Defaulting and pruning against structural schemas."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.machinery.openapi import apply_defaults, prune

OBJ = "object"

SCHEMA: dict[str, Any] = {
    "type": OBJ,
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": OBJ},
        "spec": {
            "type": OBJ,
            "properties": {
                "suspend": {"type": "boolean", "default": False},
                "numNodes": {"type": "integer", "default": 1},
                "comment": {"type": "string", "nullable": True, "default": "none"},
                "policy": {
                    "type": OBJ,
                    "default": {},
                    "properties": {
                        "order": {"type": "string", "default": "AnyOrder"},
                        "timeout": {"type": "integer"},
                    },
                },
                "jobs": {
                    "type": "array",
                    "items": {
                        "type": OBJ,
                        "properties": {
                            "name": {"type": "string"},
                            "replicas": {"type": "integer", "default": 1},
                        },
                    },
                },
                "ports": {"type": "array", "items": {"type": "integer", "default": 80}},
                "env": {
                    "type": OBJ,
                    "additionalProperties": {
                        "type": OBJ,
                        "properties": {"value": {"type": "string", "default": "x"}},
                    },
                },
                "free": {"type": OBJ, "x-kubernetes-preserve-unknown-fields": True},
                "mixed": {
                    "type": OBJ,
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {
                        "known": {"type": OBJ, "properties": {"a": {"type": "string"}}},
                    },
                },
                "anything": {"type": OBJ, "additionalProperties": True},
                "template": {
                    "type": OBJ,
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": OBJ, "properties": {"a": {}}}},
                },
            },
        },
    },
}


def spec(**fields: Any) -> dict[str, Any]:
    return {"spec": fields}


BASE_DEFAULTS = {
    "suspend": False,
    "numNodes": 1,
    "comment": "none",
    "policy": {"order": "AnyOrder"},
}

DEFAULT_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("absent properties, and into a defaulted object", spec(), spec(**BASE_DEFAULTS)),
    (
        "present values are kept",
        spec(suspend=True, numNodes=4),
        spec(**{**BASE_DEFAULTS, "suspend": True, "numNodes": 4}),
    ),
    ("non-nullable null takes the default", spec(numNodes=None), spec(**BASE_DEFAULTS)),
    ("nullable null is kept", spec(comment=None), spec(**{**BASE_DEFAULTS, "comment": None})),
    (
        "into a present object",
        spec(policy={"timeout": 5}),
        spec(**{**BASE_DEFAULTS, "policy": {"order": "AnyOrder", "timeout": 5}}),
    ),
    (
        "into list items",
        spec(jobs=[{"name": "a"}, {"name": "b", "replicas": 3}]),
        spec(**BASE_DEFAULTS, jobs=[{"name": "a", "replicas": 1}, {"name": "b", "replicas": 3}]),
    ),
    (
        "null list items take the items default",
        spec(ports=[None, 8080]),
        spec(**BASE_DEFAULTS, ports=[80, 8080]),
    ),
    (
        "into map values",
        spec(env={"A": {}, "B": {"value": "y"}}),
        spec(**BASE_DEFAULTS, env={"A": {"value": "x"}, "B": {"value": "y"}}),
    ),
    (
        "unknown fields are left alone",
        spec(extra={"numNodes": None}),
        spec(**BASE_DEFAULTS, extra={"numNodes": None}),
    ),
]


@pytest.mark.parametrize(
    ("obj", "expected"), [c[1:] for c in DEFAULT_CASES], ids=[c[0] for c in DEFAULT_CASES]
)
def test_apply_defaults(obj: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    assert apply_defaults(SCHEMA, obj) == expected
    assert obj == before


def test_defaults_are_copied_not_shared() -> None:
    first = apply_defaults(SCHEMA, spec())
    first["spec"]["policy"]["order"] = "changed"
    assert apply_defaults(SCHEMA, spec())["spec"]["policy"] == {"order": "AnyOrder"}
    assert SCHEMA["properties"]["spec"]["properties"]["policy"]["default"] == {}


def test_scalars_and_mismatched_types_pass_through() -> None:
    assert apply_defaults(SCHEMA, 3) == 3
    assert apply_defaults(SCHEMA, {"spec": [1]}) == {"spec": [1]}


PRUNE_CASES: list[tuple[str, Any, Any, list[str]]] = [
    ("known fields stay", spec(numNodes=2), spec(numNodes=2), []),
    (
        "unknown fields go",
        spec(numNodes=2, foo=1, bar={"x": 1}),
        spec(numNodes=2),
        ["spec.foo", "spec.bar"],
    ),
    ("unknown at the root", {"status": {}, "spec": {}}, {"spec": {}}, ["status"]),
    (
        "in list items",
        spec(jobs=[{"name": "a", "x": 1}, {"y": 2}]),
        spec(jobs=[{"name": "a"}, {}]),
        ["spec.jobs[0].x", "spec.jobs[1].y"],
    ),
    (
        "in map values",
        spec(env={"A": {"value": "v", "z": 1}}),
        spec(env={"A": {"value": "v"}}),
        ["spec.env[A].z"],
    ),
    (
        "preserve-unknown-fields",
        spec(free={"a": {"b": [1, {"c": None}]}}),
        spec(free={"a": {"b": [1, {"c": None}]}}),
        [],
    ),
    (
        "preserve keeps unknown, prunes known",
        spec(mixed={"other": {"q": 1}, "known": {"a": "1", "b": "2"}}),
        spec(mixed={"other": {"q": 1}, "known": {"a": "1"}}),
        ["spec.mixed.known.b"],
    ),
    (
        "additionalProperties: true",
        spec(anything={"k": {"deep": 1}}),
        spec(anything={"k": {"deep": 1}}),
        [],
    ),
    (
        "embedded resource",
        spec(
            template={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "bogus": 1},
                "spec": {"a": 1, "b": 2},
                "status": {},
            }
        ),
        spec(
            template={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"a": 1},
            }
        ),
        ["spec.template.metadata.bogus", "spec.template.spec.b", "spec.template.status"],
    ),
    (
        "root metadata keeps ObjectMeta fields",
        {"metadata": {"name": "a", "labels": {"k": "v"}, "annotations": {}, "foo": 1}},
        {"metadata": {"name": "a", "labels": {"k": "v"}, "annotations": {}}},
        ["metadata.foo"],
    ),
    (
        "non-nullable nulls are dropped",
        spec(numNodes=None, comment=None, jobs=[None]),
        spec(comment=None, jobs=[None]),
        [],
    ),
    ("scalar where an object is expected", spec(policy=3), spec(policy=3), []),
    (
        "object where a scalar is expected",
        spec(numNodes={"a": 1}),
        spec(numNodes={}),
        ["spec.numNodes.a"],
    ),
]


@pytest.mark.parametrize(
    ("obj", "expected", "removed"), [c[1:] for c in PRUNE_CASES], ids=[c[0] for c in PRUNE_CASES]
)
def test_prune(obj: Any, expected: Any, removed: list[str]) -> None:
    before = copy.deepcopy(obj)
    assert prune(SCHEMA, obj) == (expected, removed)
    assert obj == before


def test_prune_keeps_nulls_on_request() -> None:
    assert prune(SCHEMA, spec(numNodes=None), drop_nulls=False) == (spec(numNodes=None), [])


def test_resource_root_keeps_apiversion_kind_metadata() -> None:
    schema = {"type": OBJ, "properties": {"spec": {"type": OBJ}}}
    obj = {"apiVersion": "v1", "kind": "K", "metadata": {"name": "n"}, "spec": {}}
    assert prune(schema, obj) == (obj, [])
    pruned, removed = prune(schema, obj, resource_root=False)
    assert pruned == {"spec": {}}
    assert removed == ["apiVersion", "kind", "metadata"]


def test_kubectl_like_warnings() -> None:
    _, removed = prune(SCHEMA, spec(numNode=3))
    assert [f'unknown field "{p}"' for p in removed] == ['unknown field "spec.numNode"']


# --- properties -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["spec", "numNodes", "policy", "jobs", "env", "free", "x", "template"])
            | st.text(max_size=3),
            children,
            max_size=4,
        )
    ),
    max_leaves=15,
)


@settings(max_examples=200, deadline=None)
@given(obj=json_values | st.builds(lambda s: {"spec": s}, json_values))
def test_defaulting_and_pruning_never_mutate_their_input(obj: Any) -> None:
    before = copy.deepcopy(obj)
    schema_before = copy.deepcopy(SCHEMA)
    defaulted = apply_defaults(SCHEMA, obj)
    pruned, removed = prune(SCHEMA, obj)
    assert obj == before
    assert schema_before == SCHEMA
    assert all(isinstance(p, str) for p in removed)
    assert apply_defaults(SCHEMA, defaulted) == defaulted
    assert prune(SCHEMA, pruned) == (pruned, [])
    # The results share no mutable structure with the input or the schema.
    _scribble(defaulted)
    _scribble(pruned)
    assert obj == before
    assert schema_before == SCHEMA


def _scribble(value: Any) -> None:
    """Change every dict and list inside ``value``."""
    if isinstance(value, dict):
        for item in list(value.values()):
            _scribble(item)
        value["__scribbled__"] = True
    elif isinstance(value, list):
        for item in list(value):
            _scribble(item)
        value.append("__scribbled__")
