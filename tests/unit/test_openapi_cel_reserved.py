"""CEL field access to properties named like CEL reserved words.

Kubernetes escapes such a property as ``__word__`` in CEL; from 1.32 (the version the local
API server reports) the plain name is accepted too, so JobSet's rule
``self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)``
is enforced.
"""

from __future__ import annotations

from typing import Any

import pytest

from trainer.machinery.openapi import validate
from trainer.machinery.openapi.cel import escape_property_name

RESERVED = [
    "namespace",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "return",
    "var",
    "void",
    "while",
    "true",
    "false",
    "null",
]
STRING = {"type": "string"}


def schema_with(prop: str, rule: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {prop: STRING, "other": STRING},
                "x-kubernetes-validations": [{"rule": rule, "message": "refused"}],
            }
        },
    }


def verdict(prop: str, rule: str, spec: dict[str, Any]) -> list[str]:
    return [f"{e.path}: {e.message}" for e in validate(schema_with(prop, rule), {"spec": spec})]


@pytest.mark.parametrize("word", RESERVED)
def test_every_reserved_word_is_escaped(word: str) -> None:
    assert escape_property_name(word) == f"__{word}__"


@pytest.mark.parametrize("word", RESERVED)
def test_the_escaped_name_reads_the_property(word: str) -> None:
    rule = f"!has(self.__{word}__) || self.__{word}__ == 'ok'"
    assert verdict(word, rule, {word: "ok"}) == []
    assert verdict(word, rule, {}) == []
    assert verdict(word, rule, {word: "bad"}) == ["spec: refused"]


@pytest.mark.parametrize("word", [w for w in RESERVED if w not in ("true", "false", "null", "in")])
def test_the_plain_name_reads_the_property_as_from_kubernetes_1_32(word: str) -> None:
    rule = f"!has(self.{word}) || self.{word} == 'ok'"
    assert verdict(word, rule, {word: "ok"}) == []
    assert verdict(word, rule, {}) == []
    assert verdict(word, rule, {word: "bad"}) == ["spec: refused"]


def test_the_property_counts_once() -> None:
    rule = "size(self) == 2 && self.all(k, k in ['__namespace__', 'other'])"
    assert verdict("namespace", rule, {"namespace": "a", "other": "b"}) == []


def test_an_absent_reserved_property_is_not_there_under_either_name() -> None:
    rule = "!has(self.namespace) && !has(self.__namespace__)"
    assert verdict("namespace", rule, {"other": "x"}) == []
    assert verdict("namespace", rule, {"namespace": "x"}) == ["spec: refused"]


# JobSet v0.12.0's rule on volumeClaimPolicies templates, on the schema shape its CRD has
# (PersistentVolumeClaim templates whose metadata declares name and namespace).
JOBSET_TEMPLATES_RULE = (
    "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)"
)
POLICY = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "volumeClaimPolicies": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "templates": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "metadata": {
                                            "type": "object",
                                            "properties": {"name": STRING, "namespace": STRING},
                                        },
                                        "spec": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                    },
                                },
                            }
                        },
                        "x-kubernetes-validations": [
                            {
                                "rule": JOBSET_TEMPLATES_RULE,
                                "message": "namespace cannot be set for VolumeClaimPolicies "
                                "templates",
                            }
                        ],
                    },
                }
            },
        }
    },
}


def claims(metadata: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"volumeClaimPolicies": [{"templates": [{"metadata": metadata}]}]}}


def test_jobset_rule_on_claim_template_namespaces() -> None:
    assert validate(POLICY, claims({"name": "data"})) == []
    assert validate(POLICY, claims({"name": "data", "namespace": ""})) == []
    errors = validate(POLICY, claims({"name": "data", "namespace": "other"}))
    assert [(e.path, e.message) for e in errors] == [
        ("spec.volumeClaimPolicies[0]", "namespace cannot be set for VolumeClaimPolicies templates")
    ]
