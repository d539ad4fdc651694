"""`trainer render` / `trainer convert` YAML: every string stays a string for a YAML 1.1 reader.

kubectl reads YAML with go-yaml v2 (YAML 1.1), which resolves plain `y`, `n`, `Y`, `N` to
booleans and `1e3` to a number; PyYAML reads those back as strings and so leaves them plain.
The writer must quote them (an unquoted `y` in a command fails with "must be of type string").
"""

from __future__ import annotations

import re

import pytest
import yaml

from trainer.cli.render import to_yaml_stream

# What a YAML 1.1 reader resolves to a non-string (besides what PyYAML itself quotes).
YAML11_BOOL = re.compile(
    r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE"
    r"|on|On|ON|off|Off|OFF)$"
)
YAML11_NUMBER = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?$"
    r"|^0o[0-7_]+$|^0x[0-9a-fA-F_]+$|^0b[01_]+$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
)
YAML11_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")

ADVERSARIAL = [
    "y",
    "n",
    "Y",
    "N",
    "yes",
    "no",
    "on",
    "off",
    "true",
    "False",
    "~",
    "null",
    "",
    "1e3",
    "1E3",
    "-1e-3",
    "1.5e3",
    ".5e3",
    "0o17",
    "0x1F",
    "0b101",
    "1_000",
    "8",
    "-3",
    "1.5",
    ".inf",
    ".NaN",
    "12:30",
    "2024-01-01",
]
PLAIN_STRINGS = ["hello", "e3", "1e", "0o", "y z", "-v y 4", "torchrun", "node-0"]


def _plain_scalars(text: str) -> list[str]:
    """The list items written without quotes."""
    items = [line[2:] for line in text.splitlines() if line.startswith("- ")]
    return [item for item in items if not item.startswith(("'", '"'))]


@pytest.mark.parametrize("value", ADVERSARIAL)
def test_strings_a_yaml_11_reader_would_retype_are_quoted(value: str) -> None:
    text = to_yaml_stream([{"command": [value]}])
    assert yaml.safe_load(text) == {"command": [value]}
    for plain in _plain_scalars(text):
        assert not YAML11_BOOL.match(plain), text
        assert not YAML11_NUMBER.match(plain), text
        assert not YAML11_NULL.match(plain), text


def test_ordinary_strings_stay_plain() -> None:
    text = to_yaml_stream([{"command": PLAIN_STRINGS}])
    assert yaml.safe_load(text) == {"command": PLAIN_STRINGS}
    assert _plain_scalars(text) == PLAIN_STRINGS
