"""Structural-schema validation: the paths, error types and messages users see."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.machinery.errors import (
    DUPLICATE,
    INVALID,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    TYPE_INVALID_REASON,
    UNSUPPORTED,
    FieldError,
)
from trainer.machinery.openapi import BLOCKED_RULES_MESSAGE, check, validate

Triple = tuple[str, str, str]


def triples(errors: list[FieldError]) -> list[Triple]:
    return [(e.path, e.type, e.message) for e in errors]


def spec_of(**props: Any) -> dict[str, Any]:
    """A schema with ``spec`` holding the given properties."""
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": props}},
    }


# --- types ----------------------------------------------------------------------------------

TYPE_CASES: list[tuple[str, dict[str, Any], Any, list[Triple]]] = [
    ("integer ok", {"type": "integer"}, 3, []),
    ("integral float is an integer", {"type": "integer"}, 3.0, []),
    (
        "string as integer",
        {"type": "integer"},
        "3",
        [("spec.f", INVALID, 'spec.f in body must be of type integer: "string"')],
    ),
    (
        "bool as integer",
        {"type": "integer"},
        True,
        [("spec.f", INVALID, 'spec.f in body must be of type integer: "boolean"')],
    ),
    (
        "fraction as integer",
        {"type": "integer"},
        1.5,
        [
            ("spec.f", INVALID, 'spec.f in body must be of type integer: "number"'),
            ("<nil>", INVALID, "Checked value must be of type integer (default format) in spec.f"),
        ],
    ),
    ("int as number", {"type": "number"}, 2, []),
    ("float as number", {"type": "number"}, 2.5, []),
    (
        "bool as number",
        {"type": "number"},
        False,
        [("spec.f", INVALID, 'spec.f in body must be of type number: "boolean"')],
    ),
    ("string ok", {"type": "string"}, "x", []),
    (
        "int as string",
        {"type": "string"},
        1,
        [("spec.f", INVALID, 'spec.f in body must be of type string: "integer"')],
    ),
    ("bool ok", {"type": "boolean"}, False, []),
    (
        "string as bool",
        {"type": "boolean"},
        "yes",
        [("spec.f", INVALID, 'spec.f in body must be of type boolean: "string"')],
    ),
    ("list ok", {"type": "array"}, [], []),
    (
        "map as array",
        {"type": "array"},
        {},
        [("spec.f", INVALID, 'spec.f in body must be of type array: "object"')],
    ),
    ("map ok", {"type": "object"}, {}, []),
    (
        "list as object",
        {"type": "object"},
        [1],
        [("spec.f", INVALID, 'spec.f in body must be of type object: "array"')],
    ),
    (
        "null not nullable",
        {"type": "string"},
        None,
        [("spec.f", INVALID, 'spec.f in body must be of type string: "null"')],
    ),
    ("null nullable", {"type": "string", "nullable": True}, None, []),
    ("untyped accepts anything", {}, {"a": [1]}, []),
    ("int-or-string int", {"x-kubernetes-int-or-string": True}, 3, []),
    ("int-or-string str", {"x-kubernetes-int-or-string": True}, "50%", []),
    (
        "int-or-string bool",
        {"x-kubernetes-int-or-string": True},
        True,
        [("spec.f", INVALID, 'spec.f in body must be of type integer,string: "boolean"')],
    ),
    (
        "int-or-string null",
        {"x-kubernetes-int-or-string": True},
        None,
        [("spec.f", INVALID, 'spec.f in body must be of type integer,string: "null"')],
    ),
]


@pytest.mark.parametrize(
    ("field_schema", "value", "expected"),
    [c[1:] for c in TYPE_CASES],
    ids=[c[0] for c in TYPE_CASES],
)
def test_types(field_schema: dict[str, Any], value: Any, expected: list[Triple]) -> None:
    assert triples(validate(spec_of(f=field_schema), {"spec": {"f": value}})) == expected


def test_type_error_carries_the_value_and_reads_like_kube() -> None:
    (error,) = validate(spec_of(n={"type": "integer"}), {"spec": {"n": "three"}})
    assert error.value == "string"  # kube-apiserver shows the value's type, not the value
    assert error.reason == TYPE_INVALID_REASON
    assert str(error) == (
        'spec.n: Invalid value: "string": spec.n in body must be of type integer: "string"'
    )


def test_type_error_stops_checks_below_the_node() -> None:
    schema = spec_of(
        trainer={
            "type": "object",
            "required": ["image"],
            "properties": {"numNodes": {"type": "integer", "minimum": 1}},
        }
    )
    errors = validate(schema, {"spec": {"trainer": ["not", "an", "object"]}})
    assert triples(errors) == [
        ("spec.trainer", INVALID, 'spec.trainer in body must be of type object: "array"')
    ]


# --- value validations ----------------------------------------------------------------------

VALUE_CASES: list[tuple[str, dict[str, Any], Any, list[Triple]]] = [
    # format
    ("int32 max", {"type": "integer", "format": "int32"}, 2**31 - 1, []),
    (
        "int32 overflow",
        {"type": "integer", "format": "int32"},
        2**31,
        [("<nil>", INVALID, "Checked value must be of type integer with format int32 in spec.f")],
    ),
    (
        "int32 underflow",
        {"type": "integer", "format": "int32"},
        -(2**31) - 1,
        [("<nil>", INVALID, "Checked value must be of type integer with format int32 in spec.f")],
    ),
    (
        "int64 overflow",
        {"type": "integer", "format": "int64"},
        2**63,
        [
            ("spec.f", INVALID, 'spec.f in body must be of type int64: "float64"'),
            ("<nil>", INVALID, "Checked value must be of type integer with format int64 in spec.f"),
        ],
    ),
    ("date-time ok", {"type": "string", "format": "date-time"}, "2024-05-01T10:00:00Z", []),
    (
        "date-time bad",
        {"type": "string", "format": "date-time"},
        "yesterday",
        [("spec.f", INVALID, 'spec.f in body must be of type date-time: "yesterday"')],
    ),
    # enum
    ("enum ok", {"type": "string", "enum": ["a", "b"]}, "a", []),
    (
        "enum bad",
        {"type": "string", "enum": ["a", "b"]},
        "c",
        [("spec.f", UNSUPPORTED, 'supported values: "a", "b"')],
    ),
    (
        "enum of ints",
        {"type": "integer", "enum": [1, 2]},
        3,
        [("spec.f", UNSUPPORTED, 'supported values: "1", "2"')],
    ),
    ("enum int matches float", {"type": "number", "enum": [1]}, 1.0, []),
    # numbers
    ("minimum ok", {"type": "integer", "minimum": 0}, 0, []),
    (
        "minimum",
        {"type": "integer", "minimum": 0},
        -1,
        [("spec.f", INVALID, "spec.f in body should be greater than or equal to 0")],
    ),
    (
        "exclusive minimum",
        {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
        0,
        [("spec.f", INVALID, "spec.f in body should be greater than 0")],
    ),
    (
        "maximum",
        {"type": "integer", "maximum": 100},
        101,
        [("spec.f", INVALID, "spec.f in body should be less than or equal to 100")],
    ),
    (
        "exclusive maximum",
        {"type": "number", "maximum": 1.5, "exclusiveMaximum": True},
        1.5,
        [("spec.f", INVALID, "spec.f in body should be less than 1.5")],
    ),
    ("multipleOf ok", {"type": "number", "multipleOf": 0.1}, 0.3, []),
    (
        "multipleOf",
        {"type": "integer", "multipleOf": 4},
        6,
        [("spec.f", INVALID, "spec.f in body should be a multiple of 4")],
    ),
    # strings
    ("maxLength in code points", {"type": "string", "maxLength": 3}, "ééé", []),
    (
        "maxLength",
        {"type": "string", "maxLength": 63},
        "a" * 64,
        [("spec.f", TOO_LONG, "may not be more than 63 bytes")],
    ),
    (
        "minLength",
        {"type": "string", "minLength": 1},
        "",
        [("spec.f", INVALID, "spec.f in body should be at least 1 chars long")],
    ),
    ("pattern searches", {"type": "string", "pattern": "[0-9]"}, "a1b", []),
    (
        "pattern",
        {"type": "string", "pattern": "^[a-z]+$"},
        "ABC",
        [("spec.f", INVALID, "spec.f in body should match '^[a-z]+$'")],
    ),
    (
        "pattern $ is the end of text (RE2), not before a final newline",
        {"type": "string", "pattern": "^[a-z]+$"},
        "abc\n",
        [("spec.f", INVALID, "spec.f in body should match '^[a-z]+$'")],
    ),
    # arrays
    (
        "minItems",
        {"type": "array", "minItems": 1, "items": {"type": "string"}},
        [],
        [("spec.f", INVALID, "spec.f in body should have at least 1 items")],
    ),
    (
        "maxItems",
        {"type": "array", "maxItems": 2, "items": {"type": "string"}},
        ["a", "b", "c"],
        [("spec.f", TOO_MANY, "must have at most 2 items")],
    ),
    (
        "uniqueItems",
        {"type": "array", "uniqueItems": True},
        [1, {"a": 1}, {"a": 1}],
        [("spec.f", INVALID, "spec.f in body shouldn't contain duplicates")],
    ),
    ("uniqueItems true is not 1", {"type": "array", "uniqueItems": True}, [1, True], []),
    (
        "items get index paths",
        {"type": "array", "items": {"type": "integer", "minimum": 1}},
        [1, 0, "x"],
        [
            ("spec.f[1]", INVALID, "spec.f[1] in body should be greater than or equal to 1"),
            ("spec.f[2]", INVALID, 'spec.f[2] in body must be of type integer: "string"'),
        ],
    ),
    # objects
    (
        "minProperties",
        {"type": "object", "minProperties": 1},
        {},
        [("spec.f", INVALID, "spec.f in body should have at least 1 properties")],
    ),
    (
        "maxProperties",
        {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
        {"a": "1", "b": "2"},
        [("spec.f", TOO_MANY, "must have at most 1 item")],
    ),
    (
        "required names the missing child",
        {"type": "object", "required": ["name", "kind"], "properties": {"name": {}}},
        {"kind": "x"},
        [("spec.f.name", REQUIRED, "")],
    ),
    (
        "map values get key paths",
        {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
        {"ok": "abc", "foo": "abcd", "n": 1},
        [
            ("spec.f.foo", TOO_LONG, "may not be more than 3 bytes"),
            ("spec.f.n", INVALID, 'spec.f.n in body must be of type string: "integer"'),
        ],
    ),
    (
        "unknown fields are not errors",
        {"type": "object", "properties": {"a": {"type": "string"}}},
        {"a": "x", "b": 1},
        [],
    ),
    (
        "preserve-unknown-fields",
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        {"anything": {"at": ["all"]}},
        [],
    ),
]


@pytest.mark.parametrize(
    ("field_schema", "value", "expected"),
    [c[1:] for c in VALUE_CASES],
    ids=[c[0] for c in VALUE_CASES],
)
def test_value_validations(
    field_schema: dict[str, Any], value: Any, expected: list[Triple]
) -> None:
    assert triples(validate(spec_of(f=field_schema), {"spec": {"f": value}})) == expected


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (
            validate(spec_of(f={"type": "string", "enum": ["a", "b"]}), {"spec": {"f": "c"}})[0],
            'spec.f: Unsupported value: "c": supported values: "a", "b"',
        ),
        (
            validate(spec_of(f={"type": "integer", "minimum": 1}), {"spec": {"f": 0}})[0],
            "spec.f: Invalid value: 0: spec.f in body should be greater than or equal to 1",
        ),
        (
            validate(spec_of(f={"type": "string", "maxLength": 2}), {"spec": {"f": "abc"}})[0],
            "spec.f: Too long: may not be more than 2 bytes",
        ),
        (
            validate(spec_of(f={"type": "string", "minLength": 1}), {"spec": {"f": ""}})[0],
            'spec.f: Invalid value: "": spec.f in body should be at least 1 chars long',
        ),
        (
            validate(spec_of(f={"type": "array", "maxItems": 1}), {"spec": {"f": [1, 2]}})[0],
            "spec.f: Too many: 2: must have at most 1 item",
        ),
        (
            validate(spec_of(f={"type": "object", "required": ["x"]}), {"spec": {"f": {}}})[0],
            "spec.f.x: Required value",
        ),
    ],
)
def test_rendering(error: FieldError, text: str) -> None:
    assert str(error) == text


def test_too_many_carries_the_count() -> None:
    (error,) = validate(spec_of(f={"type": "array", "maxItems": 1}), {"spec": {"f": [1, 2, 3]}})
    assert error.value == 3


def test_all_errors_are_returned() -> None:
    schema = spec_of(
        a={"type": "integer", "minimum": 1},
        b={"type": "string", "maxLength": 1},
        c={"type": "object", "required": ["x", "y"]},
    )
    errors = validate(schema, {"spec": {"a": 0, "b": "ab", "c": {}}})
    assert triples(errors) == [
        ("spec.a", INVALID, "spec.a in body should be greater than or equal to 1"),
        ("spec.b", TOO_LONG, "may not be more than 1 byte"),
        ("spec.c.x", REQUIRED, ""),
        ("spec.c.y", REQUIRED, ""),
    ]


def test_path_prefix() -> None:
    errors = validate({"type": "object", "required": ["name"]}, {}, path="spec.template")
    assert triples(errors) == [("spec.template.name", REQUIRED, "")]


def test_root_type_error() -> None:
    assert triples(validate({"type": "object"}, [])) == [
        ("<nil>", INVALID, ' in body must be of type object: "array"')
    ]


def test_map_values_are_named_with_a_dot_in_schema_errors() -> None:
    schema = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "labels": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "maxLength": 63},
                    }
                },
            }
        },
    }
    errors = validate(schema, {"metadata": {"labels": {"foo": "x" * 64}}})
    assert triples(errors) == [("metadata.labels.foo", TOO_LONG, "may not be more than 63 bytes")]


# --- list types -----------------------------------------------------------------------------

REPLICATED_JOBS = {
    "type": "array",
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "replicas": {"type": "integer"}},
    },
}


def test_list_map_duplicate_keys() -> None:
    obj = {"spec": {"replicatedJobs": [{"name": "node"}, {"name": "node"}, {"name": "init"}]}}
    errors = validate(spec_of(replicatedJobs=REPLICATED_JOBS), obj)
    assert triples(errors) == [("spec.replicatedJobs[1]", DUPLICATE, "")]
    assert str(errors[0]) == 'spec.replicatedJobs[1]: Duplicate value: {"name":"node"}'


def test_list_map_with_two_keys() -> None:
    schema = dict(REPLICATED_JOBS, **{"x-kubernetes-list-map-keys": ["name", "replicas"]})
    obj = {
        "spec": {
            "rj": [
                {"name": "a", "replicas": 1},
                {"name": "a", "replicas": 2},
                {"name": "a", "replicas": 1},
            ]
        }
    }
    errors = validate(spec_of(rj=schema), obj)
    assert [str(e) for e in errors] == ['spec.rj[2]: Duplicate value: {"name":"a","replicas":1}']


def test_list_map_missing_key_is_reported_by_required() -> None:
    obj = {"spec": {"replicatedJobs": [{"replicas": 1}]}}
    errors = validate(spec_of(replicatedJobs=REPLICATED_JOBS), obj)
    assert triples(errors) == [("spec.replicatedJobs[0].name", REQUIRED, "")]


def test_list_set_duplicates() -> None:
    schema = spec_of(
        names={"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
    )
    errors = validate(schema, {"spec": {"names": ["a", "b", "a", "a"]}})
    assert triples(errors) == [("spec.names[2]", DUPLICATE, ""), ("spec.names[3]", DUPLICATE, "")]
    assert str(errors[0]) == 'spec.names[2]: Duplicate value: "a"'


def test_atomic_lists_may_repeat() -> None:
    schema = spec_of(names={"type": "array", "items": {"type": "string"}})
    assert validate(schema, {"spec": {"names": ["a", "a"]}}) == []


# --- embedded resources ---------------------------------------------------------------------

EMBEDDED = spec_of(
    template={
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "x-kubernetes-preserve-unknown-fields": True,
    }
)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}, []),
        (
            {"metadata": {}},
            [
                ("spec.template.apiVersion", REQUIRED, "must not be empty"),
                ("spec.template.kind", REQUIRED, "must not be empty"),
            ],
        ),
        (
            {"apiVersion": "a/b/c", "kind": ""},
            [
                ("spec.template.apiVersion", INVALID, "unexpected GroupVersion string: a/b/c"),
                ("spec.template.kind", INVALID, "must not be empty"),
            ],
        ),
        (
            {"apiVersion": 1, "kind": "Pod", "metadata": "x"},
            [
                ("spec.template.apiVersion", INVALID, "must be a string"),
                ("spec.template.metadata", INVALID, "must be an object"),
            ],
        ),
    ],
)
def test_embedded_resource(template: dict[str, Any], expected: list[Triple]) -> None:
    assert triples(validate(EMBEDDED, {"spec": {"template": template}})) == expected


# --- junctors -------------------------------------------------------------------------------

JUNCTOR_CASES: list[tuple[str, dict[str, Any], Any, list[Triple]]] = [
    (
        "allOf",
        {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 3}]},
        5,
        [
            ("spec.f", INVALID, "spec.f in body should be less than or equal to 3"),
            ("<nil>", INVALID, '"spec.f" must validate all the schemas (allOf)'),
        ],
    ),
    (
        "anyOf passes",
        {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {"b": 1},
        [],
    ),
    (
        "anyOf fails",
        {"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {},
        [
            ("<nil>", INVALID, '"spec.f" must validate at least one schema (anyOf)'),
            ("spec.f.a", REQUIRED, ""),
        ],
    ),
    (
        "oneOf two match",
        {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {"a": 1, "b": 2},
        [
            (
                "<nil>",
                INVALID,
                '"spec.f" must validate one and only one schema (oneOf). '
                "Found 2 valid alternatives",
            )
        ],
    ),
    (
        "oneOf one matches",
        {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {"a": 1},
        [],
    ),
    (
        "not",
        {"type": "string", "not": {"enum": ["forbidden"]}},
        "forbidden",
        [("<nil>", INVALID, '"spec.f" must not validate the schema (not)')],
    ),
    (
        "int-or-string with the generated anyOf",
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": "^[0-9]+%$",
        },
        "50%",
        [],
    ),
]


@pytest.mark.parametrize(
    ("field_schema", "value", "expected"),
    [c[1:] for c in JUNCTOR_CASES],
    ids=[c[0] for c in JUNCTOR_CASES],
)
def test_junctors(field_schema: dict[str, Any], value: Any, expected: list[Triple]) -> None:
    assert triples(validate(spec_of(f=field_schema), {"spec": {"f": value}})) == expected


# --- CEL blocking and check() ---------------------------------------------------------------

RULED = spec_of(
    n={"type": "integer", "x-kubernetes-validations": [{"rule": "self >= 1"}]},
    mode={"type": "string", "enum": ["a"]},
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"n": 0}, [("spec.n", INVALID, "failed rule: self >= 1")]),
        (
            {"n": "x"},
            [
                ("spec.n", INVALID, 'spec.n in body must be of type integer: "string"'),
                ("<nil>", INVALID, BLOCKED_RULES_MESSAGE),
            ],
        ),
        (
            {"n": 0, "mode": "b"},
            [
                ("spec.mode", UNSUPPORTED, 'supported values: "a"'),
                ("<nil>", INVALID, BLOCKED_RULES_MESSAGE),
            ],
        ),
    ],
)
def test_type_and_enum_errors_block_cel(spec: dict[str, Any], expected: list[Triple]) -> None:
    assert triples(validate(RULED, {"spec": spec})) == expected


def test_check_prunes_defaults_and_validates() -> None:
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {
                    "numNodes": {"type": "integer", "default": 1, "minimum": 1},
                    "suspend": {"type": "boolean", "default": False},
                    "image": {"type": "string", "minLength": 1},
                },
            },
        },
    }
    obj = {
        "apiVersion": "v1",
        "kind": "X",
        "metadata": {"name": "a", "labels": {"k": "v"}, "bogus": 1},
        "spec": {"image": "", "extra": True, "suspend": None},
    }
    unknown: list[str] = []
    stored, errors = check(schema, obj, unknown_fields=unknown)
    assert stored == {
        "apiVersion": "v1",
        "kind": "X",
        "metadata": {"name": "a", "labels": {"k": "v"}},
        "spec": {"image": "", "numNodes": 1, "suspend": False},
    }
    assert unknown == ["metadata.bogus", "spec.extra"]
    assert triples(errors) == [
        ("spec.image", INVALID, "spec.image in body should be at least 1 chars long")
    ]
    assert obj["spec"] == {"image": "", "extra": True, "suspend": None}


def test_check_passes_old_to_transition_rules() -> None:
    schema = spec_of(
        name={"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}
    )
    _, errors = check(schema, {"spec": {"name": "b"}}, {"spec": {"name": "a"}})
    assert triples(errors) == [("spec.name", INVALID, "failed rule: self == oldSelf")]
    _, errors = check(schema, {"spec": {"name": "b"}})
    assert errors == []


def test_invalid_schema_pattern_is_an_error_not_an_exception() -> None:
    errors = validate(spec_of(f={"type": "string", "pattern": "("}), {"spec": {"f": "x"}})
    assert [(e.path, e.type) for e in errors] == [("spec.f", INVALID)]
    assert errors[0].message.startswith("spec.f in body should match '(, but pattern is invalid: ")


# --- properties -----------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)

SMALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "x-kubernetes-validations": [
        {"rule": "has(self.name) && size(self.name) <= 5"},
        {"rule": "self.name.startsWith('a')", "messageExpression": "'bad ' + self.name"},
    ],
    "properties": {
        "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]*$"},
        "count": {"type": "integer", "format": "int32", "minimum": 0},
        "ratio": {"type": "number", "maximum": 1},
        "tags": {
            "type": "array",
            "x-kubernetes-list-type": "set",
            "items": {"type": "string"},
            "x-kubernetes-validations": [{"rule": "self.all(t, t != '')"}],
        },
        "jobs": REPLICATED_JOBS,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "port": {"x-kubernetes-int-or-string": True},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}

objects = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values | st.text(max_size=7),
        "count": json_values | st.integers(),
        "ratio": json_values,
        "tags": json_values | st.lists(st.text(max_size=2), max_size=4),
        "jobs": json_values | st.lists(st.fixed_dictionaries({"name": st.text(max_size=2)})),
        "labels": json_values,
        "mode": json_values,
        "port": json_values,
        "free": json_values,
        "other": json_values,
    },
)


@settings(max_examples=150, deadline=None)
@given(obj=objects | json_values, old=objects | json_values)
def test_validate_never_raises(obj: Any, old: Any) -> None:
    errors = validate(SMALL_SCHEMA, obj, old)
    assert all(isinstance(e, FieldError) for e in errors)
    _, more = check(SMALL_SCHEMA, obj, old)
    assert all(isinstance(e, FieldError) for e in more)
