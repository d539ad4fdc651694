"""``x-kubernetes-validations`` CEL rules, evaluated through :func:`validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.machinery.errors import DUPLICATE, FORBIDDEN, INVALID, REQUIRED, FieldError
from trainer.machinery.openapi import (
    ABSENT,
    BLOCKED_RULES_MESSAGE,
    compile_rule,
    evaluate_rule,
    validate,
)
from trainer.machinery.openapi.cel import escape_property_name

Triple = tuple[str, str, str]

NAME_RULE = "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
ONE_POLICY = (
    "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost), has(self.flux)]"
    ".filter(x, x).size() <= 1"
)
URI_RULE = "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')"
MANAGED_BY = "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']"
NO_NODE = "!self.exists(c, c == 'node')"
STARTUP = (
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
    "self.replicatedJobs.exists(x, has(x.dependsOn)))"
)


def triples(errors: list[FieldError]) -> list[Triple]:
    return [(e.path, e.type, e.message) for e in errors]


def ruled(node: dict[str, Any], *rules: str | dict[str, Any]) -> dict[str, Any]:
    specs = [{"rule": r} if isinstance(r, str) else r for r in rules]
    return dict(node, **{"x-kubernetes-validations": specs})


def at_spec(field: str, node: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {field: node}}},
    }


STRING = {"type": "string"}
POLICY = {
    "type": "object",
    "properties": {
        name: {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        for name in ("torch", "mpi", "jax", "xgboost", "flux")
    },
}
JOBSET_SPEC = {
    "type": "object",
    "properties": {
        "startupPolicy": {
            "type": "object",
            "properties": {"startupPolicyOrder": {"type": "string"}},
        },
        "replicatedJobs": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "dependsOn": {"type": "array", "items": {"type": "object"}},
                },
            },
        },
    },
}
STATUS = {
    "type": "object",
    "properties": {
        "trainerStatus": {"type": "object", "properties": {"progress": {"type": "integer"}}},
        "lastUpdatedTime": {"type": "string", "format": "date-time"},
    },
}

# (case, field schema with rules, value, expected errors)
RULE_CASES: list[tuple[str, dict[str, Any], Any, list[Triple]]] = [
    ("name ok", ruled(STRING, NAME_RULE), "my-job-1", []),
    (
        "name uppercase",
        ruled(STRING, NAME_RULE),
        "My-job",
        [("spec.f", INVALID, f"failed rule: {NAME_RULE}")],
    ),
    (
        "name trailing dash",
        ruled(STRING, NAME_RULE),
        "job-",
        [("spec.f", INVALID, f"failed rule: {NAME_RULE}")],
    ),
    (
        "name leading digit",
        ruled(STRING, NAME_RULE),
        "1job",
        [("spec.f", INVALID, f"failed rule: {NAME_RULE}")],
    ),
    ("size 63", ruled(STRING, "size(self) <= 63"), "a" * 63, []),
    (
        "size 64",
        ruled(STRING, "size(self) <= 63"),
        "a" * 64,
        [("spec.f", INVALID, "failed rule: size(self) <= 63")],
    ),
    ("size counts code points", ruled(STRING, "size(self) <= 2"), "éé", []),
    ("no policy", ruled(POLICY, ONE_POLICY), {}, []),
    ("one policy", ruled(POLICY, ONE_POLICY), {"torch": {}}, []),
    (
        "two policies",
        ruled(POLICY, ONE_POLICY),
        {"torch": {}, "mpi": {"x": 1}},
        [("spec.f", INVALID, f"failed rule: {ONE_POLICY}")],
    ),
    ("empty uri", ruled(STRING, URI_RULE), "", []),
    ("uri", ruled(STRING, URI_RULE), "hf://meta-llama/Llama-3.2-1B", []),
    (
        "not a uri",
        ruled(STRING, URI_RULE),
        "s3://",
        [("spec.f", INVALID, f"failed rule: {URI_RULE}")],
    ),
    ("self >= 1 ok", ruled({"type": "integer"}, "self >= 1"), 1, []),
    (
        "self >= 1 fails",
        ruled({"type": "integer"}, "self >= 1"),
        0,
        [("spec.f", INVALID, "failed rule: self >= 1")],
    ),
    ("number field is a double", ruled({"type": "number"}, "self > 0.5"), 1, []),
    (
        "double field against an int",
        ruled({"type": "number"}, "self >= 1"),
        0.5,
        [("spec.f", INVALID, "failed rule: self >= 1")],
    ),
    ("managedBy ok", ruled(STRING, MANAGED_BY), "kueue.x-k8s.io/multikueue", []),
    (
        "managedBy other",
        ruled(STRING, MANAGED_BY),
        "me/ctl",
        [("spec.f", INVALID, f"failed rule: {MANAGED_BY}")],
    ),
    (
        "no node container",
        ruled({"type": "array", "items": STRING}, NO_NODE),
        ["init", "sidecar"],
        [],
    ),
    (
        "node container",
        ruled({"type": "array", "items": STRING}, NO_NODE),
        ["init", "node"],
        [("spec.f", INVALID, f"failed rule: {NO_NODE}")],
    ),
    (
        "startup without policy",
        ruled(JOBSET_SPEC, STARTUP),
        {"replicatedJobs": [{"name": "a", "dependsOn": []}]},
        [],
    ),
    (
        "startup AnyOrder",
        ruled(JOBSET_SPEC, STARTUP),
        {
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "replicatedJobs": [{"name": "a", "dependsOn": []}],
        },
        [],
    ),
    (
        "startup InOrder, no dependsOn",
        ruled(JOBSET_SPEC, STARTUP),
        {"startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": [{"name": "a"}]},
        [],
    ),
    (
        "startup InOrder with dependsOn",
        ruled(JOBSET_SPEC, STARTUP),
        {
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "replicatedJobs": [{"name": "a"}, {"name": "b", "dependsOn": [{}]}],
        },
        [("spec.f", INVALID, f"failed rule: {STARTUP}")],
    ),
    (
        "lastUpdatedTime present",
        ruled(STATUS, "has(self.lastUpdatedTime)"),
        {"lastUpdatedTime": "2024-01-01T00:00:00Z"},
        [],
    ),
    (
        "lastUpdatedTime absent",
        ruled(STATUS, "has(self.lastUpdatedTime)"),
        {"trainerStatus": {}},
        [("spec.f", INVALID, "failed rule: has(self.lastUpdatedTime)")],
    ),
    (
        "has() ignores undeclared fields",
        ruled({"type": "object", "properties": {"a": STRING}}, "!has(self.b)"),
        {"b": "x"},
        [],
    ),
]


@pytest.mark.parametrize(
    ("node", "value", "expected"),
    [c[1:] for c in RULE_CASES],
    ids=[c[0] for c in RULE_CASES],
)
def test_rules(node: dict[str, Any], value: Any, expected: list[Triple]) -> None:
    errors = validate(at_spec("f", node), {"spec": {"f": value}})
    assert triples(errors) == expected
    for error in errors:
        assert error.value == value


# --- object-level rules on metadata ---------------------------------------------------------

ROOT = {
    "type": "object",
    "x-kubernetes-validations": [
        {
            "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "message": "metadata.name must match RFC 1035 DNS label format",
        },
        {
            "rule": "size(self.metadata.name) <= 63",
            "message": "metadata.name must be no more than 63 characters",
        },
    ],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {"type": "object"},
    },
}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("job", []),
        ("Job", [("<nil>", INVALID, "metadata.name must match RFC 1035 DNS label format")]),
        ("j" * 64, [("<nil>", INVALID, "metadata.name must be no more than 63 characters")]),
        (
            "J" * 64,
            [
                ("<nil>", INVALID, "metadata.name must match RFC 1035 DNS label format"),
                ("<nil>", INVALID, "metadata.name must be no more than 63 characters"),
            ],
        ),
    ],
)
def test_object_level_name_rules(name: str, expected: list[Triple]) -> None:
    obj = {"apiVersion": "v1", "kind": "TrainJob", "metadata": {"name": name}, "spec": {}}
    assert triples(validate(ROOT, obj)) == expected


def test_metadata_is_reachable_at_the_root_even_when_undeclared() -> None:
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self.metadata.name == 'a'"}]}
    assert validate(schema, {"metadata": {"name": "a"}}) == []


def test_missing_key_is_an_evaluation_error() -> None:
    errors = validate(ROOT, {"apiVersion": "v1", "kind": "TrainJob", "metadata": {}})
    assert triples(errors) == [
        (
            "<nil>",
            INVALID,
            "rule evaluation error: no such key: name evaluating rule: "
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        ),
        (
            "<nil>",
            INVALID,
            "rule evaluation error: no such key: name evaluating rule: "
            "size(self.metadata.name) <= 63",
        ),
    ]


# --- transition rules -----------------------------------------------------------------------

IMMUTABLE = {"rule": "self == oldSelf", "message": "field is immutable"}
LIST_OF_STRINGS = {"type": "array", "items": STRING}
REF = {"type": "object", "properties": {"name": STRING, "kind": STRING}}

TRANSITION_CASES: list[tuple[str, dict[str, Any], Any, Any, list[Triple]]] = [
    ("string same", ruled(STRING, IMMUTABLE), "a", "a", []),
    (
        "string changed",
        ruled(STRING, IMMUTABLE),
        "b",
        "a",
        [("spec.f", INVALID, "field is immutable")],
    ),
    (
        "object same",
        ruled(REF, IMMUTABLE),
        {"name": "a", "kind": "K"},
        {"kind": "K", "name": "a"},
        [],
    ),
    (
        "object changed",
        ruled(REF, IMMUTABLE),
        {"name": "a"},
        {"name": "a", "kind": "K"},
        [("spec.f", INVALID, "field is immutable")],
    ),
    ("list same", ruled(LIST_OF_STRINGS, IMMUTABLE), ["a", "b"], ["a", "b"], []),
    (
        "list reordered",
        ruled(LIST_OF_STRINGS, IMMUTABLE),
        ["b", "a"],
        ["a", "b"],
        [("spec.f", INVALID, "field is immutable")],
    ),
    (
        "set reordered is equal",
        ruled(dict(LIST_OF_STRINGS, **{"x-kubernetes-list-type": "set"}), IMMUTABLE),
        ["b", "a"],
        ["a", "b"],
        [],
    ),
    (
        "set changed",
        ruled(dict(LIST_OF_STRINGS, **{"x-kubernetes-list-type": "set"}), IMMUTABLE),
        ["a", "c"],
        ["a", "b"],
        [("spec.f", INVALID, "field is immutable")],
    ),
    ("absent in old: skipped", ruled(STRING, IMMUTABLE), "b", ABSENT, []),
    ("ratchet-free growth", ruled({"type": "integer"}, "self >= oldSelf"), 3, 2, []),
    (
        "no shrinking",
        ruled({"type": "integer"}, {"rule": "self >= oldSelf", "message": "may not shrink"}),
        1,
        2,
        [("spec.f", INVALID, "may not shrink")],
    ),
]


@pytest.mark.parametrize(
    ("node", "new", "old", "expected"),
    [c[1:] for c in TRANSITION_CASES],
    ids=[c[0] for c in TRANSITION_CASES],
)
def test_transition_rules(node: dict[str, Any], new: Any, old: Any, expected: list[Triple]) -> None:
    schema = at_spec("f", node)
    old_obj = {"spec": {} if old is ABSENT else {"f": old}}
    assert triples(validate(schema, {"spec": {"f": new}}, old_obj)) == expected


def test_transition_rules_do_not_run_on_create() -> None:
    schema = at_spec("f", ruled(STRING, IMMUTABLE))
    assert validate(schema, {"spec": {"f": "b"}}) == []


def test_transition_rule_on_the_root() -> None:
    schema = ruled({"type": "object", "properties": {"a": STRING}}, IMMUTABLE)
    assert triples(validate(schema, {"a": "x"}, {"a": "y"})) == [
        ("<nil>", INVALID, "field is immutable")
    ]


def test_list_map_items_are_correlated_by_key() -> None:
    items = ruled(
        {"type": "object", "properties": {"name": STRING, "image": STRING}},
        {"rule": "self.image == oldSelf.image", "message": "image is immutable"},
    )
    node = {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": items,
    }
    old = {"spec": {"f": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}
    new = {
        "spec": {
            "f": [
                {"name": "b", "image": "1"},
                {"name": "a", "image": "2"},
                {"name": "c", "image": "9"},
            ]
        }
    }
    errors = validate(at_spec("f", node), new, old)
    assert triples(errors) == [("spec.f[1]", INVALID, "image is immutable")]


def test_atomic_list_items_have_no_old_value() -> None:
    node = {"type": "array", "items": ruled(STRING, IMMUTABLE)}
    assert validate(at_spec("f", node), {"spec": {"f": ["x"]}}, {"spec": {"f": ["y"]}}) == []


def test_map_values_are_correlated_by_key() -> None:
    node = {"type": "object", "additionalProperties": ruled(STRING, IMMUTABLE)}
    errors = validate(
        at_spec("f", node), {"spec": {"f": {"a": "1", "b": "2"}}}, {"spec": {"f": {"a": "0"}}}
    )
    assert triples(errors) == [("spec.f[a]", INVALID, "field is immutable")]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (ABSENT, "x", []),
        ("a", "a", []),
        (
            "a",
            "b",
            [("spec.f", INVALID, "failed rule: !oldSelf.hasValue() || oldSelf.value() == self")],
        ),
    ],
)
def test_optional_old_self(old: Any, new: str, expected: list[Triple]) -> None:
    rule = "!oldSelf.hasValue() || oldSelf.value() == self"
    node = ruled(STRING, {"rule": rule, "optionalOldSelf": True})
    old_obj = {"spec": {} if old is ABSENT else {"f": old}}
    assert triples(validate(at_spec("f", node), {"spec": {"f": new}}, old_obj)) == expected


def test_optional_old_self_runs_on_create() -> None:
    node = ruled(STRING, {"rule": "oldSelf.orValue('') == 'set'", "optionalOldSelf": True})
    assert [e.path for e in validate(at_spec("f", node), {"spec": {"f": "x"}})] == ["spec.f"]


# --- messages, fieldPath, reason ------------------------------------------------------------

MESSAGE_CASES: list[tuple[str, dict[str, Any], Triple, bool]] = [
    ("default message", {"rule": "self > 5"}, ("spec.f", INVALID, "failed rule: self > 5"), True),
    (
        "message",
        {"rule": "self > 5", "message": " too small "},
        ("spec.f", INVALID, "too small"),
        True,
    ),
    (
        "messageExpression wins",
        {"rule": "self > 5", "message": "m", "messageExpression": "'got ' + string(self)"},
        ("spec.f", INVALID, "got 3"),
        True,
    ),
    (
        "messageExpression failing falls back",
        {"rule": "self > 5", "message": "m", "messageExpression": "self.nope"},
        ("spec.f", INVALID, "m"),
        True,
    ),
    (
        "blank messageExpression falls back",
        {"rule": "self > 5", "messageExpression": "''"},
        ("spec.f", INVALID, "failed rule: self > 5"),
        True,
    ),
    (
        "forbidden",
        {"rule": "self > 5", "reason": "FieldValueForbidden", "message": "no"},
        ("spec.f", FORBIDDEN, "no"),
        False,
    ),
    (
        "required",
        {"rule": "self > 5", "reason": "FieldValueRequired", "message": "no"},
        ("spec.f", REQUIRED, "no"),
        False,
    ),
    (
        "duplicate",
        {"rule": "self > 5", "reason": "FieldValueDuplicate", "message": "no"},
        ("spec.f", DUPLICATE, ""),  # field.Duplicate carries no detail
        True,
    ),
    (
        "invalid reason",
        {"rule": "self > 5", "reason": "FieldValueInvalid", "message": "no"},
        ("spec.f", INVALID, "no"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("rule", "expected", "has_value"),
    [c[1:] for c in MESSAGE_CASES],
    ids=[c[0] for c in MESSAGE_CASES],
)
def test_messages_and_reasons(rule: dict[str, Any], expected: Triple, has_value: bool) -> None:
    (error,) = validate(at_spec("f", ruled({"type": "integer"}, rule)), {"spec": {"f": 3}})
    assert (error.path, error.type, error.message) == expected
    assert error.has_value == has_value


@pytest.mark.parametrize(
    ("field_path", "path"),
    [
        (".startupPolicy", "spec.f.startupPolicy"),
        (".startupPolicy.startupPolicyOrder", "spec.f.startupPolicy.startupPolicyOrder"),
        (".labels['app.kubernetes.io/name']", "spec.f.labels[app.kubernetes.io/name]"),
        ("['startupPolicy']", "spec.f.startupPolicy"),
    ],
)
def test_field_path(field_path: str, path: str) -> None:
    node = {
        "type": "object",
        "properties": {
            "startupPolicy": {
                "type": "object",
                "properties": {"startupPolicyOrder": STRING},
            },
            "labels": {"type": "object", "additionalProperties": STRING},
        },
    }
    rule = {"rule": "false", "fieldPath": field_path, "message": "m"}
    (error,) = validate(at_spec("f", ruled(node, rule)), {"spec": {"f": {}}})
    assert (error.path, error.message) == (path, "m")
    assert error.value == {}


def test_rendering_like_kube() -> None:
    node = ruled({"type": "object", "properties": {"name": STRING}}, IMMUTABLE)
    (error,) = validate(
        at_spec("runtimeRef", node),
        {"spec": {"runtimeRef": {"name": "b"}}},
        {"spec": {"runtimeRef": {"name": "a"}}},
    )
    # kube-apiserver leaves out the value of an object (field.OmitValueType).
    assert str(error) == "spec.runtimeRef: Invalid value: field is immutable"


# --- failures never raise -------------------------------------------------------------------

FAILURE_CASES: list[tuple[str, str, Any, str]] = [
    (
        "syntax error",
        "self.foo(",
        1,
        "rule compile error: syntax error at line 1, column 9: self.foo(",
    ),
    (
        "missing key",
        "self.x == 1",
        {},
        "rule evaluation error: no such key: x evaluating rule: self.x == 1",
    ),
    (
        "division by zero",
        "1 / (self - self) == 1",
        1,
        "rule evaluation error: modulus or divide by zero evaluating rule: 1 / (self - self) == 1",
    ),
    (
        "not a bool",
        "self + 1",
        1,
        "rule evaluation error: rule did not evaluate to a bool: self + 1",
    ),
    ("undeclared function", "self.frobnicate()", 1, ""),
    ("bad regex", "self.matches('(')", "x", ""),
    ("type mismatch", "'a' + self", 1, ""),
]


@pytest.mark.parametrize(
    ("rule", "value", "message"),
    [c[1:] for c in FAILURE_CASES],
    ids=[c[0] for c in FAILURE_CASES],
)
def test_rule_failures_are_errors(rule: str, value: Any, message: str) -> None:
    schema = at_spec("f", {"x-kubernetes-validations": [{"rule": rule}]})
    (error,) = validate(schema, {"spec": {"f": value}})
    assert (error.path, error.type) == ("spec.f", INVALID)
    if message:
        assert error.message == message
    else:
        assert error.message.startswith("rule evaluation error: ")


def test_huge_int_is_an_evaluation_error() -> None:
    schema = at_spec("f", {"x-kubernetes-validations": [{"rule": "self > 0"}]})
    (error,) = validate(schema, {"spec": {"f": 2**80}})
    assert error.message.startswith("rule evaluation error: ")
    # Typed as an integer, it is a float64 to kube-apiserver (beyond int64): a type error,
    # which keeps the rules from running.
    typed = at_spec("f", ruled({"type": "integer"}, "self > 0"))
    assert [e.message for e in validate(typed, {"spec": {"f": 2**80}})] == [
        'spec.f in body must be of type integer: "number"',
        "Checked value must be of type integer (default format) in spec.f",
        BLOCKED_RULES_MESSAGE,
    ]


def test_null_values_skip_rules() -> None:
    schema = at_spec("f", ruled({"type": "string", "nullable": True}, "self == 'x'"))
    assert validate(schema, {"spec": {"f": None}}) == []


def test_compiled_rules_are_cached() -> None:
    assert compile_rule("self == 1") is compile_rule("self == 1")
    assert compile_rule("self == oldSelf").transition
    assert not compile_rule("self.oldSelf == 'oldSelf'").transition


# --- CEL dialect ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "variables", "expected"),
    [
        ("true == 1", {}, False),
        ("1 == 1.0", {}, True),
        ("1 < 1.5 && 1 >= 1.0 && 2 > 1u", {}, True),
        ("self == null", {"self": None}, True),
        ("1 == null", {}, False),
        ("'a' in ['a', 'b']", {}, True),
        ("true in [1]", {}, False),
        ("'k' in {'k': 1}", {}, True),
        ("{'a': [1]} == {'a': [1]}", {}, True),
        ("'AbC'.lowerAscii() == 'abc' && 'AbC'.upperAscii() == 'ABC'", {}, True),
        ("' x '.trim() == 'x'", {}, True),
        ("'a-b-c'.replace('-', '.') == 'a.b.c'", {}, True),
        (
            "'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']",
            {},
            True,
        ),
        ("['a', 'b'].join('/') == 'a/b' && ['a'].join() == 'a'", {}, True),
        ("'hello'.indexOf('l') == 2 && 'hello'.lastIndexOf('l') == 3", {}, True),
        ("[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2", {}, True),
        ("'hello'.substring(1, 3) == 'el' && 'hello'.charAt(4) == 'o'", {}, True),
        ("[1, 2, 3].isSorted() && ![2, 1].isSorted()", {}, True),
        ("[1, 2, 3].sum() == 6 && [2, 7, 3].max() == 7", {}, True),
        ("'abc123'.find('[0-9]+') == '123' && 'a1b2'.findAll('[0-9]') == ['1', '2']", {}, True),
        (
            "self.startsWith('tr') && self.endsWith('er') && self.contains('ain')",
            {"self": "trainer"},
            True,
        ),
        ("self.all(k, k.startsWith('a'))", {"self": {"ab": 1, "ac": 2}}, True),
        ("self.exists_one(x, x > 1)", {"self": [1, 2]}, True),
        ("self.map(x, x * 2) == [2, 4]", {"self": [1, 2]}, True),
    ],
)
def test_dialect(rule: str, variables: dict[str, Any], expected: bool) -> None:
    result, error = evaluate_rule(rule, variables)
    assert error == ""
    assert bool(result) is expected


def test_property_names_are_escaped() -> None:
    node = {
        "type": "object",
        "properties": {"x-y": STRING, "namespace": STRING, "a.b": STRING, "c__d": STRING},
    }
    rule = (
        "self.x__dash__y == '1' && self.__namespace__ == '2' && self.a__dot__b == '3' "
        "&& self.c__underscores__d == '4'"
    )
    value = {"x-y": "1", "namespace": "2", "a.b": "3", "c__d": "4"}
    assert validate(at_spec("f", ruled(node, rule)), {"spec": {"f": value}}) == []


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        ("plain", "plain"),
        ("x-y", "x__dash__y"),
        ("a/b", "a__slash__b"),
        ("in", "__in__"),
        ("1abc", None),
        ("a b", None),
    ],
)
def test_escape_property_name(name: str, escaped: str | None) -> None:
    assert escape_property_name(name) == escaped


def test_date_time_fields_are_timestamps() -> None:
    node = ruled(
        {"type": "string", "format": "date-time"},
        "self > timestamp('2020-01-01T00:00:00Z')",
    )
    schema = at_spec("f", node)
    assert validate(schema, {"spec": {"f": "2024-01-01T00:00:00Z"}}) == []
    assert [e.path for e in validate(schema, {"spec": {"f": "2019-01-01T00:00:00Z"}})] == ["spec.f"]


# --- the project's CRDs -----------------------------------------------------------------------

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def _crd_rules() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []

    def walk(node: Any, source: str) -> None:
        if isinstance(node, dict):
            for spec in node.get("x-kubernetes-validations") or []:
                found.extend((source, spec[k]) for k in ("rule", "messageExpression") if k in spec)
            for child in node.values():
                walk(child, source)
        elif isinstance(node, list):
            for child in node:
                walk(child, source)

    # Not the Helm chart's templates (Go templates; the chart reads the CRDs from base/).
    for path in sorted(p for p in MANIFESTS.rglob("*.yaml") if "templates" not in p.parts):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                walk(doc, path.name)
    return found


def test_every_rule_in_our_crds_compiles() -> None:
    rules = _crd_rules()
    if not rules:
        pytest.skip("no CRDs under manifests/")
    failures = [(src, rule, compile_rule(rule).error) for src, rule in rules]
    assert [f for f in failures if f[2]] == []
