"""The bounded YAML/JSON reader (trainer.machinery.safeload): every rule of docs/input-limits.md,
where it reports the problem, and that ordinary files read exactly as PyYAML reads them."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.machinery import safeload
from trainer.machinery.safeload import (
    FILE_LIMITS,
    INT64_MAX,
    INT64_MIN,
    InputError,
    Limits,
    decode,
    load_json,
    load_yaml,
    load_yaml_documents,
    read_bytes,
    read_stream,
)

ROOT = Path(__file__).resolve().parents[2]


def refused(data: bytes | str, limits: Limits = FILE_LIMITS) -> InputError:
    with pytest.raises(InputError) as info:
        load_yaml_documents(data, "f.yaml", limits)
    assert str(info.value).startswith("f.yaml: ")
    return info.value


def refused_json(data: bytes | str, limits: Limits = FILE_LIMITS) -> InputError:
    with pytest.raises(InputError) as info:
        load_json(data, "body", limits)
    return info.value


def test_ordinary_files_read_exactly_as_pyyaml_reads_them() -> None:
    files = [
        *ROOT.glob("runtimes/*.yaml"),
        # Not the Helm chart's templates: Go templates, YAML only once rendered.
        *(p for p in ROOT.glob("manifests/**/*.yaml") if "templates" not in p.parts),
        *ROOT.glob("examples/**/*.yaml"),
        *ROOT.glob("tests/golden/cases/*/*.yaml"),
    ]
    assert len(files) > 40
    for path in files:
        text = path.read_text()
        expected = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
        assert load_yaml_documents(path.read_bytes(), str(path)) == expected, path


def test_json_text_is_read_as_json_and_equals_the_yaml_reading() -> None:
    text = '{"a": [1, 2.5, true, null, {"b": "c"}], "d": "2024-01-01"}'
    assert load_yaml_documents(text, "x") == [yaml.safe_load(text)]
    assert load_json(text.encode(), "x") == yaml.safe_load(text)


def test_a_utf8_byte_order_mark_is_skipped() -> None:
    assert load_yaml("\ufeffa: 1\n".encode(), "x") == {"a": 1}
    assert load_json("\ufeff{}".encode(), "x") == {}


@pytest.mark.parametrize(
    ("data", "words", "line"),
    [
        (b"a: 1\nb: \xff\xfe\n", "not UTF-8: byte 0xff at byte offset 8", 2),
        ("a: 1\n".encode("utf-16"), "UTF-16", 1),
        ("a: 1\n".encode("utf-16-le"), "NUL byte at offset 1", 1),
        (b"a: 1\nb: x\x00y\n", "NUL byte at offset 9", 2),
    ],
)
def test_only_utf8_text_is_read(data: bytes, words: str, line: int) -> None:
    err = refused(data)
    assert words in err.message
    assert err.line == line
    assert words in refused_json(data).message


def test_control_characters_are_refused_with_their_line() -> None:
    err = refused('a: 1\nb: "\x07"\n')
    assert err.line == 2 and "control character 0x07" in err.message


def test_size_is_bounded_before_decoding() -> None:
    limits = Limits(max_bytes=10)
    assert "larger than the 10 bytes limit" in refused(b"a: 1234567890", limits).message
    assert "larger than" in refused_json(b'{"a": "1234567890"}', limits).message
    with pytest.raises(InputError, match="larger than the 10 bytes limit"):
        read_stream(io.BytesIO(b"x" * 11), "<stdin>", limits)
    assert read_stream(io.BytesIO(b"x" * 10), "<stdin>", limits) == b"x" * 10


def test_files_that_cannot_be_read_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.yaml: cannot read: No such file"):
        read_bytes(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="cannot read: Is a directory"):
        read_bytes(tmp_path)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match="Too many levels of symbolic links"):
        read_bytes(loop)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(InputError, match="larger than the 100 bytes limit"):
        read_bytes(big, Limits(max_bytes=100))


def _nested_flow(depth: int) -> str:
    return "[" * depth + "]" * depth


def _nested_block(depth: int) -> str:
    return "".join(" " * i + "a:\n" for i in range(depth - 1)) + " " * (depth - 1) + "a: 1\n"


@pytest.mark.parametrize("make", [_nested_flow, _nested_block], ids=["flow", "block"])
def test_nesting_is_bounded_at_the_limit(make: object) -> None:
    assert callable(make)
    limits = Limits(max_depth=30)
    load_yaml_documents(make(30), "ok", limits)
    err = refused(make(31), limits)
    assert "nested deeper than the limit of 30 levels" in err.message
    assert err.line is not None


@pytest.mark.parametrize(
    "text",
    ["[" * 50_000 + "]" * 50_000, "- " * 50_000 + "x", "{a: " * 20_000 + "1" + "}" * 20_000],
    ids=["flow-list", "block-list", "flow-map"],
)
def test_very_deep_documents_are_refused_without_recursion(text: str) -> None:
    # libyaml's composer would overflow the C stack here: the depth is checked first.
    started = time.monotonic()
    assert "nested deeper than the limit of 100 levels" in refused(text).message
    assert time.monotonic() - started < 2


def test_json_depth_is_bounded_without_recursion() -> None:
    limits = Limits(max_depth=30)
    assert load_json('{"a":' * 29 + "[1]" + "}" * 29, "x", limits)
    assert "deeper" in refused_json('{"a":' * 30 + "[1]" + "}" * 30, limits).message
    assert "deeper" in refused_json("[" * 100_000 + "]" * 100_000).message


def test_alias_bombs_are_refused_before_anything_is_built() -> None:
    levels = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    levels += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    started = time.monotonic()
    err = refused("\n".join(levels) + "\n")
    assert time.monotonic() - started < 1
    assert "YAML aliases expand this document to more than" in err.message
    assert "10 times its own" in err.message and "at most 1,000,000" in err.message
    assert err.line is not None


def test_reasonable_aliases_and_merge_keys_are_read() -> None:
    text = (
        "base: &base {image: x, env: [{name: A, value: '1'}]}\n"
        + "".join(f"c{i}: *base\n" for i in range(50))
        + "merged: {<<: *base, image: y}\n"
    )
    data = load_yaml(text, "x")
    assert data["c49"] == {"image": "x", "env": [{"name": "A", "value": "1"}]}
    assert data["merged"] == {"image": "y", "env": [{"name": "A", "value": "1"}]}


def test_expansion_beyond_the_ratio_is_refused() -> None:
    limits = Limits(alias_ratio=2, alias_floor=10)
    text = "a: &a [1, 2, 3, 4, 5, 6, 7, 8]\nb: [*a, *a, *a, *a]\n"
    err = refused(text, limits)
    assert "the limit is" in err.message and "2 times its own" in err.message


def test_recursive_aliases_are_refused() -> None:
    assert "refers to its own anchor" in refused("a: &a [1, *a]\n").message


def test_integers_are_64_bit() -> None:
    assert load_yaml(f"a: {INT64_MAX}\nb: {INT64_MIN}\n", "x") == {"a": INT64_MAX, "b": INT64_MIN}
    err = refused(f"a: 1\nb: {INT64_MAX + 1}\n")
    assert err.line == 2 and err.column == 4 and "out of range" in err.message
    assert "out of range" in refused(f"a: {INT64_MIN - 1}\n").message
    assert "5000 characters" in refused("a: " + "9" * 5000 + "\n").message
    assert load_json(f'{{"a": {INT64_MAX}}}', "x") == {"a": INT64_MAX}
    assert "out of range" in refused_json(f'{{"a": {INT64_MAX + 1}}}').message
    assert "5000 digits" in refused_json('{"a": ' + "9" * 5000 + "}").message


def test_numbers_are_finite() -> None:
    assert "not a finite number" in refused("a: .inf\n").message
    assert "not a finite number" in refused("a: 1.0e+999\n").message
    assert "not a finite number" in refused_json('{"a": 1e999}').message
    assert "NaN is not a JSON number" in refused_json('{"a": NaN}').message
    assert "Infinity is not a JSON number" in refused_json("[Infinity]").message


def test_duplicate_keys_are_errors_with_their_line() -> None:
    err = refused("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert (err.line, err.column) == (4, 3) and err.message == 'duplicate key "c"'
    assert load_yaml("a: 1\na: 2\n", "x", allow_duplicate_keys=True) == {"a": 2}


def test_only_json_values_are_built() -> None:
    assert load_yaml("a: 2024-01-01\nb: 2001-12-14t21:59:43.10-05:00\n", "x") == {
        "a": "2024-01-01",
        "b": "2001-12-14t21:59:43.10-05:00",
    }
    assert load_yaml("1: a\ntrue: b\nnull: c\n1.5: d\n", "x") == {
        "1": "a",
        "true": "b",
        "null": "c",
        "1.5": "d",
    }
    for text in ("a: !!binary aGk=\n", "a: !!set {x}\n", "a: !!omap [{x: 1}]\n"):
        assert "is not supported" in refused(text).message
    assert "could not determine a constructor" in refused("a: !foo x\n").message
    assert "mapping keys must be strings" in refused("? [a]\n: b\n").message


def test_syntax_errors_have_line_and_column() -> None:
    err = refused("a: 1\nb: [1, 2\n")
    assert err.line == 3 and err.message.startswith("YAML syntax error: ")
    jerr = refused_json('{"a": 1,\n "b": }')
    assert (jerr.line, jerr.column) == (2, 7)


def test_documents_and_the_single_document_reader() -> None:
    assert load_yaml_documents("a: 1\n---\n---\nb: 2\n", "x") == [{"a": 1}, None, {"b": 2}]
    assert load_yaml("", "x") is None
    with pytest.raises(InputError, match="expected one YAML document, found 2"):
        load_yaml("a: 1\n---\nb: 2\n", "x")


def test_decode_accepts_text() -> None:
    assert decode("\ufeffa", "x") == "a"
    with pytest.raises(InputError, match="NUL"):
        decode("a\x00", "x")


def test_input_error_format() -> None:
    assert str(InputError("f", "m", 3, 4)) == "f: line 3, column 4: m"
    assert str(InputError("f", "m", 3)) == "f: line 3: m"
    assert str(InputError("f", "m")) == "f: m"


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


nested = st.recursive(
    st.integers(min_value=INT64_MIN, max_value=INT64_MAX) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(min_size=1, max_size=3), inner, max_size=3)
    ),
    max_leaves=40,
)


@given(value=nested, flow=st.sampled_from([False, True, None]), indent=st.sampled_from([2, 4]))
@settings(max_examples=300, deadline=None)
def test_the_cheap_depth_bound_is_never_below_the_real_depth(
    value: object, flow: bool | None, indent: int
) -> None:
    # The bound decides whether libyaml's recursive composer may run: it must never be low.
    text = yaml.safe_dump(value, default_flow_style=flow, indent=indent)
    assert safeload._depth_bound(text) >= _depth(value)
    assert load_yaml(text, "x") == value
