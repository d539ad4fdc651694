"""Every YAML writer of manifests users feed to kubectl: strings come back as strings.

The oracle is a YAML 1.1 loader built here from the scalar types of the YAML 1.1 spec
(https://yaml.org/type/: bool, int, float, null, timestamp, merge, value) plus what go-yaml v2,
kubectl's reader, resolves beyond them (a float exponent without a dot, ``0o``/``0X``/``0B``
prefixes, ``_`` anywhere in a number). A string that loader would read as another type is
tagged ``!retyped``, so a writer that leaves it plain fails the round trip.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from trainer.cli.render import to_yaml_stream
from trainer.deploy import render as deploy
from trainer.deploy.values import Values
from trainer.machinery import yamlout

RETYPED = "!retyped"

# https://yaml.org/type/ (YAML 1.1), one pattern per type, as the spec writes them.
YAML11_TYPES = {
    "bool": r"y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF",
    "int": r"[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+"
    r"|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+",
    "float": r"[-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+"
    r"\.[0-9_]*|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)",
    "null": r"~|null|Null|NULL|",
    "timestamp": r"[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
    r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?([Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9]"
    r"(\.[0-9]*)?([ \t]*(Z|[-+][0-9][0-9]?(:[0-9][0-9])?))?",
    "merge": r"<<",
    "value": r"=",
}
# go-yaml v2 (resolve.go): strconv.ParseInt/ParseFloat after removing every "_".
GO_YAML = {
    "int": r"[-+]?(0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|[0-9][0-9_]*)",
    "float": r"[-+]?(\.[0-9][0-9_]*|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?",
}


class Yaml11Loader(yaml.SafeLoader):
    """Reads a plain scalar of any YAML 1.1 / go-yaml type as a :class:`Retyped` value."""


Yaml11Loader.yaml_implicit_resolvers = {}
for pattern in [*YAML11_TYPES.values(), *GO_YAML.values()]:
    Yaml11Loader.add_implicit_resolver(RETYPED, re.compile(f"^(?:{pattern})$"), None)


class Retyped(str):
    """A string a YAML 1.1 reader took as another type."""


def _retyped(loader: yaml.SafeLoader, node: yaml.Node) -> Retyped:
    return Retyped(loader.construct_scalar(node))  # type: ignore[arg-type]


Yaml11Loader.add_constructor(RETYPED, _retyped)


def retyped_strings(value: Any) -> list[str]:
    if isinstance(value, Retyped):
        return [str(value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in retyped_strings(k) + retyped_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in retyped_strings(v)]
    return []


def strings_retyped(written: Any, read: Any) -> list[str]:
    """The strings of ``written`` that the YAML 1.1 reading ``read`` of it took as another type
    (numbers and booleans written as such are read as :class:`Retyped` too, and are fine)."""
    if isinstance(written, str):
        return [written] if isinstance(read, Retyped) or not isinstance(read, str) else []
    if isinstance(written, dict) and isinstance(read, dict):
        keys = [k for k in read if isinstance(k, Retyped)]
        return keys + [s for k, v in written.items() for s in strings_retyped(v, read.get(k))]
    if isinstance(written, list) and isinstance(read, list):
        return [s for w, r in zip(written, read, strict=True) for s in strings_retyped(w, r)]
    return []


ADVERSARIAL = [
    *[
        "y",
        "Y",
        "n",
        "N",
        "yes",
        "Yes",
        "NO",
        "on",
        "On",
        "OFF",
        "true",
        "False",
        "TRUE",
        "~",
        "null",
        "Null",
        "NULL",
    ],
    "",
    *[
        "1e3",
        "1E3",
        "-1e-3",
        "+1e+3",
        "1.5e3",
        ".5e3",
        ".5",
        "+.5",
        "1.",
        "1.2.3",
        "0.0.0.0",
        ".",
        "8",
        "-3",
        "+7",
        "08",
        "017",
        "0o17",
        "0O17",
    ],
    *[
        "0x1F",
        "0X1F",
        "-0x1F",
        "0b101",
        "0B101",
        "1_000",
        "1__0",
        "0x_1F",
        "1_0.5",
        ".inf",
        "-.Inf",
        "+.INF",
        ".nan",
        ".NaN",
    ],
    "12:30:00",
    "190:20:30",
    "1:20.5",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "2001-12-14 21:59:43.10 -5",
    "=",
    "<<",
]
PLAIN = [
    "hello",
    "e3",
    "1e",
    "0o",
    "0x",
    "y z",
    "-v y 4",
    "torchrun",
    "node-0",
    "2Gi",
    "500m",
    "v1.2",
    "ghcr.io/kubeflow/trainer:v2.3.0",
    "_1",
]


def _render(value: str) -> Any:
    return {"command": [value], "env": [{"name": "X", "value": value}], "labels": {value: value}}


WRITERS: dict[str, Callable[[Any], str]] = {
    "render/convert": lambda obj: to_yaml_stream([obj]),
    "manifests": lambda obj: deploy.to_stream([obj]),
    "yamlout.dump": yamlout.dump,
}


@pytest.mark.parametrize("writer", WRITERS)
def test_the_yaml_11_loader_is_an_oracle(writer: str) -> None:
    """The loader retypes plain adversarial scalars (so the test below can fail)."""
    plain = "\n".join(f"- {v}" for v in ADVERSARIAL if v)
    assert retyped_strings(yaml.load(plain, Loader=Yaml11Loader)) == [v for v in ADVERSARIAL if v]
    assert WRITERS[writer]({"a": 1}) == "a: 1\n"


@pytest.mark.parametrize("writer", WRITERS)
def test_every_adversarial_string_round_trips_through_a_yaml_11_reader(writer: str) -> None:
    for value in ADVERSARIAL:
        obj = _render(value)
        text = WRITERS[writer](obj)
        loaded = yaml.load(text, Loader=Yaml11Loader)
        assert retyped_strings(loaded) == [], f"{value!r} is written plain:\n{text}"
        assert loaded == obj
        assert yaml.safe_load(text) == obj


@pytest.mark.parametrize("writer", WRITERS)
def test_ordinary_strings_stay_plain(writer: str) -> None:
    text = WRITERS[writer]({"command": PLAIN})
    assert text == "command:\n" + "".join(f"- {v}\n" for v in PLAIN)


@pytest.mark.parametrize("value", [v for v in ADVERSARIAL if v] + PLAIN)
def test_template_slots_are_quoted_when_needed(value: str) -> None:
    """``trainer manifests`` fills templates with user values (namespace, image, ...)."""
    line = f"image: {yamlout.scalar(value)}\n"
    assert yaml.load(line, Loader=Yaml11Loader) == {"image": value}


def test_install_manifests_keep_user_values_as_strings() -> None:
    values = Values.model_validate({"image": "registry.example/trainer:1e3", "namespace": "on"})
    objects = deploy.install_objects(values)
    text = deploy.to_stream(objects)
    loaded = list(yaml.load_all(text, Loader=Yaml11Loader))
    assert strings_retyped(objects, loaded) == []
    namespaces = {o["metadata"].get("namespace") for o in objects if "metadata" in o}
    assert "on" in namespaces
    images = [
        c["image"]
        for o in objects
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    ]
    assert images == ["registry.example/trainer:1e3"]
