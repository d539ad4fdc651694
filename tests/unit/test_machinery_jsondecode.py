"""What the API answers, decoded (trainer/machinery/jsondecode.py): the same values the
standard library gives, for every JSON text, and the same error for what is not JSON."""

from __future__ import annotations

import json

import pytest

from trainer.machinery import jsondecode
from trainer.machinery.requests import watch_event


def test_the_same_values_as_the_standard_library() -> None:
    text = '{"a": [1, 2.5, "x", true, null, {"b": "é"}], "c": -0.0, "d": 1e3}'
    assert jsondecode.loads(text) == json.loads(text)
    assert jsondecode.loads(text.encode()) == json.loads(text)


def test_an_integer_beyond_64_bits_is_decoded() -> None:
    big = 2**70
    assert jsondecode.loads(f'{{"n": {big}}}') == {"n": big}


def test_what_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        jsondecode.loads(b"{not json")


def test_a_watch_event_is_decoded() -> None:
    line = b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p"}}}\n'
    assert watch_event(line) == {
        "type": "ADDED",
        "object": {"kind": "Pod", "metadata": {"name": "p"}},
    }
