"""``defaults_are_pruned``: when every default survives pruning, pruning and defaulting an object
twice gives what once gives (the admission chain then skips the second pass for an object no
mutating webhook changed); a schema that breaks it is reported, so the pass still runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.machinery.openapi import apply_defaults, defaults_are_pruned, prune

ROOT = Path(__file__).resolve().parents[2]
CRDS = [
    *sorted((ROOT / "manifests/base/crds").glob("trainer.kubeflow.org_*.yaml")),
    ROOT / "manifests/local/jobset.x-k8s.io_jobsets.yaml",
]


def obj_schema(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props}


@pytest.mark.parametrize("path", CRDS, ids=lambda p: p.name)
def test_the_project_crds_defaults_are_pruned(path: Path) -> None:
    crd = yaml.safe_load(path.read_text())
    for version in crd["spec"]["versions"]:
        assert defaults_are_pruned(version["schema"]["openAPIV3Schema"])


def test_a_default_with_an_unknown_field_is_not_pruned() -> None:
    inner = {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"b": "x"}}
    assert not defaults_are_pruned(obj_schema({"spec": inner}))


def test_a_null_default_of_a_non_nullable_field_is_not_pruned() -> None:
    assert not defaults_are_pruned(obj_schema({"n": {"type": "integer", "default": None}}))
    nullable = {"type": "integer", "default": None, "nullable": True}
    assert defaults_are_pruned(obj_schema({"n": nullable}))


def test_a_default_under_metadata_is_not_pruned() -> None:
    meta = {"type": "object", "properties": {"x": {"type": "string", "default": "d"}}}
    assert not defaults_are_pruned(obj_schema({"metadata": meta}))


SCHEMA = obj_schema(
    {
        "spec": {
            "type": "object",
            "properties": {
                "mode": {"type": "string", "default": "fast"},
                "limits": {
                    "type": "object",
                    "default": {"cpu": 1},
                    "properties": {"cpu": {"type": "integer"}, "mem": {"type": "integer"}},
                },
                "tags": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"k": {"type": "string", "default": "key"}},
                    },
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    }
)

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=3))
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
spec = st.fixed_dictionaries(
    {},
    optional={
        "mode": json_value,
        "limits": json_value,
        "tags": st.lists(st.dictionaries(st.sampled_from(["k", "z"]), json_value), max_size=3),
        "labels": json_value,
        "unknown": json_value,
    },
)


@settings(max_examples=200, deadline=None)
@given(obj=st.fixed_dictionaries({"spec": spec}, optional={"extra": json_value}))
def test_pruning_and_defaulting_again_changes_nothing(obj: dict[str, Any]) -> None:
    assert defaults_are_pruned(SCHEMA)
    once = apply_defaults(SCHEMA, prune(SCHEMA, obj)[0])
    twice = apply_defaults(SCHEMA, prune(SCHEMA, once)[0])
    assert twice == once
