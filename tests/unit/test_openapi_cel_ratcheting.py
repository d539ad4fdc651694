"""CEL validation ratcheting on update, as kube-apiserver's CRD validation ratcheting: a rule
that does not reference ``oldSelf`` is not held against a value the update left unchanged;
changed values, transition rules and creates are checked as before. Items of lists are
ratcheted only when correlated with an old item (``x-kubernetes-list-type: map``)."""

from __future__ import annotations

from typing import Any

from trainer.machinery.errors import INVALID, FieldError
from trainer.machinery.openapi import validate

SHORT = {"rule": "self.size() <= 3", "message": "too long"}
STRICTLY_GROWS = {"rule": "self > oldSelf", "message": "must grow"}


def triples(errors: list[FieldError]) -> list[tuple[str, str, str]]:
    return [(e.path, e.type, e.message) for e in errors]


def schema(node: dict[str, Any]) -> dict[str, Any]:
    """``spec.f`` is ``node``; ``status.n`` an integer the updates change."""
    return {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"f": node}},
            "status": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }


STRING_SHORT = {"type": "string", "x-kubernetes-validations": [SHORT]}


def test_an_unchanged_value_is_not_held_to_a_rule_it_already_broke() -> None:
    old = {"spec": {"f": "toolong"}, "status": {"n": 1}}
    new = {"spec": {"f": "toolong"}, "status": {"n": 2}}  # a status-only update
    assert validate(schema(STRING_SHORT), new, old) == []


def test_a_changed_value_is_checked() -> None:
    old = {"spec": {"f": "toolong"}, "status": {"n": 1}}
    new = {"spec": {"f": "stilltoolong"}, "status": {"n": 1}}
    assert triples(validate(schema(STRING_SHORT), new, old)) == [("spec.f", INVALID, "too long")]


def test_a_create_is_checked() -> None:
    new = {"spec": {"f": "toolong"}}
    assert triples(validate(schema(STRING_SHORT), new)) == [("spec.f", INVALID, "too long")]


def test_transition_rules_still_run_on_unchanged_values() -> None:
    node = {"type": "integer", "x-kubernetes-validations": [STRICTLY_GROWS]}
    old = {"spec": {"f": 3}, "status": {"n": 1}}
    new = {"spec": {"f": 3}, "status": {"n": 2}}
    assert triples(validate(schema(node), new, old)) == [("spec.f", INVALID, "must grow")]


def test_a_rule_on_a_parent_runs_when_a_child_changed() -> None:
    node = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.a == self.b", "message": "a must equal b"}],
    }
    old = {"spec": {"f": {"a": "x", "b": "y"}}}
    assert validate(schema(node), {"spec": {"f": {"a": "x", "b": "y"}}}, old) == []
    changed = {"spec": {"f": {"a": "x", "b": "z"}}}
    assert triples(validate(schema(node), changed, old)) == [("spec.f", INVALID, "a must equal b")]


def test_map_list_items_are_ratcheted_by_key_and_atomic_list_items_are_not() -> None:
    item = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "v": STRING_SHORT},
        "required": ["name"],
    }
    map_list = {
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    }
    old = {"spec": {"f": [{"name": "a", "v": "toolong"}]}, "status": {"n": 1}}
    reordered = {
        "spec": {"f": [{"name": "b", "v": "ok"}, {"name": "a", "v": "toolong"}]},
        "status": {"n": 1},
    }
    assert validate(schema(map_list), reordered, old) == []  # item "a" is unchanged
    atomic = {"type": "array", "items": item}
    unchanged = {"spec": {"f": [{"name": "a", "v": "toolong"}]}, "status": {"n": 2}}
    assert triples(validate(schema(atomic), unchanged, old)) == [
        ("spec.f[0].v", INVALID, "too long")
    ]
