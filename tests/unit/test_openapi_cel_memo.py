"""Read-set projection and the rule-outcome memo give the errors a direct evaluation gives.

The differential test draws objects (and old objects) for a schema whose rules cover field
chains, ``has()``, quantifier macros, escaped names, transition rules with and without
``optionalOldSelf``, messageExpression (reading fields the rule does not), fieldPath and reason;
each is validated three ways: converting the whole values (the reference), projecting them on
what each rule reads, and projecting with a memo shared across all examples (so later
examples hit entries earlier ones made). All three must give the same errors, message for
message.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import celpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.machinery.errors import FieldError
from trainer.machinery.openapi import ABSENT, RuleMemo, cel, validate
from trainer.machinery.openapi.readset import ITEMS, project, read_set

RULES: list[dict[str, Any]] = [
    {"rule": "size(self.meta.name) <= 5", "messageExpression": "'name ' + self.meta.name"},
    {"rule": "self.meta.name.matches('^[a-z]+$')", "message": "lowercase"},
    {
        "rule": "!has(self.spec.mode) || self.spec.mode != 'x' || self.spec.items.all(i, i.n > 0)",
        "messageExpression": "'bad items: ' + string(size(self.spec.items))",
        "fieldPath": ".spec.items",
    },
    {"rule": "self.spec.items.exists(i, has(i.tag)) || size(self.spec.items) == 0"},
    {"rule": "self.spec.x__dash__y != 'no'", "reason": "FieldValueForbidden"},
    {"rule": "self.spec == oldSelf.spec", "message": "spec is immutable"},
    {
        "rule": "!oldSelf.hasValue() || oldSelf.value().meta.name == self.meta.name",
        "optionalOldSelf": True,
        "messageExpression": "'was ' + oldSelf.value().meta.name",
    },
    {"rule": "self.spec.items.all(i, i.all(k, k != 'bad'))", "reason": "FieldValueRequired"},
    {"rule": "self['spec'].mode != 'z'"},
]

ITEM = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "tag": {"type": "string"}, "bad": {"type": "string"}},
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-validations": RULES,
    "properties": {
        "meta": {"type": "object", "properties": {"name": {"type": "string"}}},
        "spec": {
            "type": "object",
            "properties": {
                "mode": {"type": "string"},
                "x-y": {"type": "string"},
                "items": {
                    "type": "array",
                    "items": ITEM,
                    "x-kubernetes-validations": [{"rule": "self.size() < 4"}],
                },
                "other": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
    },
}

small_text = st.sampled_from(["", "a", "ab", "abcdef", "Ab", "no", "x", "z", "bad"])
items = st.lists(
    st.fixed_dictionaries(
        {}, optional={"n": st.integers(-2, 2), "tag": small_text, "bad": small_text}
    ),
    max_size=5,
)
spec = st.fixed_dictionaries(
    {},
    optional={
        "mode": small_text,
        "x-y": small_text,
        "items": items,
        "other": st.dictionaries(small_text, small_text, max_size=3),
    },
)
objects = st.fixed_dictionaries(
    {"meta": st.fixed_dictionaries({}, optional={"name": small_text}), "spec": spec}
)

ENV = celpy.Environment()  # made first: it raises the recursion limit, once
SHARED = RuleMemo(max_entries=64)  # small: examples also exercise eviction


def rendered(errors: list[FieldError]) -> list[tuple[str, str, str, str]]:
    return [(e.path, e.type, e.message, repr(getattr(e, "value", None))) for e in errors]


def whole(value: Any, reads: Any) -> Any:
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=objects, old=st.one_of(st.just(None), objects))
def test_projection_and_memo_agree_with_direct_evaluation(
    obj: dict[str, Any], old: dict[str, Any] | None
) -> None:
    previous = ABSENT if old is None else old
    with mock.patch.object(cel, "project", whole):
        reference = rendered(validate(SCHEMA, obj, previous))
    projected = rendered(validate(SCHEMA, obj, previous))
    memoised = rendered(validate(SCHEMA, obj, previous, memo=SHARED))
    again = rendered(validate(SCHEMA, obj, previous, memo=SHARED))
    assert projected == reference
    assert memoised == reference
    assert again == reference


def test_the_differential_schema_fails_in_every_way_it_can() -> None:
    """The drawn space reaches failures, messageExpression texts and evaluation errors."""
    memo = RuleMemo()
    obj = {"meta": {"name": "Abcdefg"}, "spec": {"mode": "x", "x-y": "no", "items": [{"n": 0}]}}
    old = {"meta": {"name": "b"}, "spec": {}}
    errors = rendered(validate(SCHEMA, obj, old, memo=memo))
    with mock.patch.object(cel, "project", whole):
        assert errors == rendered(validate(SCHEMA, obj, old))
    messages = [e[2] for e in errors]
    assert "name Abcdefg" in messages
    assert "lowercase" in messages
    assert "bad items: 1" in messages
    assert "spec is immutable" in messages
    assert "was b" in messages
    assert any(e[0] == "spec.items" for e in errors)  # fieldPath
    assert ("<nil>", "Forbidden", "failed rule: self.spec.x__dash__y != 'no'") in [
        e[:3] for e in errors
    ]  # reason
    bare = {"meta": {"name": "a"}, "spec": {}}
    errors_of_bare = rendered(validate(SCHEMA, bare, memo=memo))
    with mock.patch.object(cel, "project", whole):
        assert errors_of_bare == rendered(validate(SCHEMA, bare))
    assert any(e[2].startswith("rule evaluation error: no such key: mode") for e in errors_of_bare)
    assert rendered(validate(SCHEMA, obj, old, memo=memo)) == errors
    assert memo.hits > 0


# --- read sets ------------------------------------------------------------------------------


def reads(rule: str, var: str = "self") -> Any:
    return read_set(ENV.compile(rule), var)


def test_field_chains_and_has_read_only_their_fields() -> None:
    assert reads("size(self.metadata.name) <= 63") == {"metadata": {"name": None}}
    assert reads("has(self.a) && self.b.c == 1") == {"a": None, "b": {"c": None}}
    assert reads("self.a == 1", "oldSelf") == {}


def test_a_quantifier_over_a_list_reads_what_its_body_reads_of_an_item() -> None:
    assert reads("self.l.exists(x, has(x.d))") == {"l": {ITEMS: {"d": None}}}
    assert reads("self.l.all(x, x.all(y, y.c))") == {"l": {ITEMS: {ITEMS: {"c": None}}}}
    assert reads("self.l.all(x, x.a == self.b)") == {"l": {ITEMS: {"a": None}}, "b": None}


def test_other_uses_read_the_whole_value() -> None:
    assert reads("self == oldSelf") is None
    assert reads("self['a'].b == 1") is None
    assert reads("self.size() > 0") is None
    assert reads("self.l.all(self, self.b)") is None  # shadowed
    assert reads("x.self == 1") is None  # the name as a field: not followed
    assert reads("self.l.map(x, x.a).size() > 0") == {"l": None}
    assert reads("self.l.exists(x, x == 1)") == {"l": {ITEMS: None}}


def test_projection_keeps_selected_fields_escaped_names_and_list_items() -> None:
    value = {"a-b": 1, "c": {"d": 2, "e": 3}, "l": [{"x": 1, "y": 2}, "s"], "z": 4, 5: "k"}
    tree = {"a__dash__b": None, "c": {"d": None}, "l": {ITEMS: {"x": None}}}
    assert project(value, tree) == {"a-b": 1, "c": {"d": 2}, "l": [{"x": 1}, "s"], 5: "k"}
    assert project(value, None) is value
    assert project([1, 2], {"a": None}) == [1, 2]  # not a map: whole
    assert project({"l": {"k": 1}}, {"l": {ITEMS: None}}) == {"l": {"k": 1}}  # macro over a map


# --- the memo -------------------------------------------------------------------------------


def name_schema(rule: str) -> dict[str, Any]:
    return {
        "type": "object",
        "x-kubernetes-validations": [{"rule": rule}],
        "properties": {"name": {"type": "string"}, "blob": {"type": "string"}},
    }


def test_the_memo_is_bounded_and_least_recently_used_goes_first() -> None:
    memo = RuleMemo(max_entries=3)
    schema = name_schema("self.name != 'x'")
    for name in ("a", "b", "c", "a", "d"):
        validate(schema, {"name": name}, memo=memo)
    assert len(memo) == 3
    assert (memo.hits, memo.misses) == (1, 4)
    validate(schema, {"name": "a"}, memo=memo)  # kept: used after b
    validate(schema, {"name": "b"}, memo=memo)  # evicted first
    assert (memo.hits, memo.misses) == (2, 5)


def test_values_beyond_the_key_limit_are_evaluated_not_memoised() -> None:
    memo = RuleMemo(max_key_bytes=256)
    schema = name_schema("size(self.blob) < 10")
    big = {"blob": "y" * 1000}
    assert [e.message for e in validate(schema, big, memo=memo)] == [
        "failed rule: size(self.blob) < 10"
    ]
    assert len(memo) == 0 and memo.misses == 0
    validate(schema, {"blob": "y"}, memo=memo)
    assert len(memo) == 1


def test_only_what_a_rule_reads_keys_the_memo() -> None:
    memo = RuleMemo()
    schema = name_schema("self.name.startsWith('a')")
    for blob in ("1", "2", "3"):
        assert validate(schema, {"name": "ab", "blob": blob}, memo=memo) == []
    assert (memo.hits, memo.misses) == (2, 1)


def test_one_rule_entry_shared_by_two_nodes_is_memoised_per_node() -> None:
    """A schema built in code may reuse one entry where the values are typed differently."""
    shared = {"rule": "string(self) == '2'", "message": "prints as 2"}
    schema = {
        "type": "object",
        "properties": {
            "i": {"type": "integer", "x-kubernetes-validations": [shared]},
            "d": {"type": "number", "x-kubernetes-validations": [shared]},
        },
    }
    memo = RuleMemo()
    for _ in range(2):
        errors = validate(schema, {"i": 2, "d": 2}, memo=memo)
        assert [(e.path, e.message) for e in errors] == [("d", "prints as 2")]
