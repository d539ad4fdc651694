"""A generated corpus of hostile inputs for every ``trainer`` verb that reads files.

Each entry writes its input under a directory and returns the path to pass (or a path that
cannot be opened). ``kind`` says what a verb must make of it: ``unreadable`` (the reader
refuses it: one ``error:`` line naming the file, the verb's code for unreadable input) or
``invalid`` (readable, but not a valid object: the verb's code for invalid objects).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.machinery.safeload import FILE_LIMITS

TRAINJOB_HEAD = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n"


def billion_laughs() -> str:
    """Nine levels of nine aliases: 9**9 (387 million) strings from under 1 KB."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return (
        TRAINJOB_HEAD
        + "metadata: {name: bomb}\nspec:\n  x:\n"
        + "".join(f"    {line}\n" for line in lines)
    )


def _text(text: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / "input.yaml"
        p.write_text(text, encoding="utf-8")
        return p

    return make


def _bytes(data: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / "input.yaml"
        p.write_bytes(data)
        return p

    return make


def _huge(d: Path) -> Path:
    p = d / "huge.yaml"
    with open(p, "wb") as f:
        f.write(TRAINJOB_HEAD.encode() + b"metadata: {name: huge}\nspec: {x: '")
        f.truncate(FILE_LIMITS.max_bytes + 10)  # zeros after the head: sparse, instant
    return p


def _directory(d: Path) -> Path:
    sub = d / "dir"
    sub.mkdir()
    (sub / "notes.txt").write_text("not yaml")
    return sub


def _missing(d: Path) -> Path:
    return d / "does-not-exist.yaml"


def _symlink_loop(d: Path) -> Path:
    a, b = d / "loop-a.yaml", d / "loop-b.yaml"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def _unreadable(d: Path) -> Path:
    p = d / "secret.yaml"
    p.write_text(TRAINJOB_HEAD + "metadata: {name: x}\n")
    p.chmod(0)
    return p


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], Path]
    kind: str  # "unreadable" or "invalid"
    needs_non_root: bool = False


CASES: list[Case] = [
    Case("alias-bomb", _text(billion_laughs()), "unreadable"),
    Case("recursive-alias", _text("a: &a [*a]\n"), "unreadable"),
    Case("deep-list-50k", _text("[" * 50_000 + "]" * 50_000 + "\n"), "unreadable"),
    Case("deep-block-list-50k", _text("- " * 50_000 + "x\n"), "unreadable"),
    Case("deep-map-3k", _text("{a: " * 3000 + "1" + "}" * 3000 + "\n"), "unreadable"),
    Case("deep-block-map-1k", _text("".join(" " * i + "a:\n" for i in range(1000))), "unreadable"),
    Case("deep-json-10k", _text('{"a":' * 10_000 + "1" + "}" * 10_000), "unreadable"),
    Case(
        "int-5000-digits",
        _text(TRAINJOB_HEAD + "metadata: {name: x}\nspec:\n  n: " + "9" * 5000 + "\n"),
        "unreadable",
    ),
    Case(
        "int-over-int64",
        _text(TRAINJOB_HEAD + "metadata: {name: x}\nspec:\n  n: 9223372036854775808\n"),
        "unreadable",
    ),
    Case(
        "float-inf", _text(TRAINJOB_HEAD + "metadata: {name: x}\nspec: {n: .inf}\n"), "unreadable"
    ),
    Case(
        "non-utf8",
        _bytes(TRAINJOB_HEAD.encode() + b"metadata: {name: \xff\xfe\xfa}\n"),
        "unreadable",
    ),
    Case("utf16", _bytes((TRAINJOB_HEAD + "metadata: {name: x}\n").encode("utf-16")), "unreadable"),
    Case(
        "utf16-no-bom",
        _bytes((TRAINJOB_HEAD + "metadata: {name: x}\n").encode("utf-16-le")),
        "unreadable",
    ),
    Case("nul-bytes", _bytes(TRAINJOB_HEAD.encode() + b"metadata: {name: a\x00b}\n"), "unreadable"),
    Case("control-char", _text(TRAINJOB_HEAD + 'metadata: {name: "a\x07"}\n'), "unreadable"),
    Case("empty", _text(""), "unreadable"),
    Case("only-comments", _text("# nothing\n---\n"), "unreadable"),
    Case("bare-scalar", _text("hello\n"), "unreadable"),
    Case("bare-list", _text("- a\n- b\n"), "unreadable"),
    Case("yaml-syntax", _text("kind: [TrainJob\n"), "unreadable"),
    Case(
        "duplicate-key",
        _text(TRAINJOB_HEAD + "kind: TrainJob\nmetadata: {name: x}\n"),
        "unreadable",
    ),
    Case("binary-tag", _text(TRAINJOB_HEAD + "metadata: {name: !!binary aGk=}\n"), "unreadable"),
    Case("list-key", _text(TRAINJOB_HEAD + "metadata:\n  ? [a, b]\n  : x\n"), "unreadable"),
    Case("kind-list-items-scalar", _text("apiVersion: v1\nkind: List\nitems: 5\n"), "unreadable"),
    Case(
        "kind-list-junk-items",
        _text("apiVersion: v1\nkind: List\nitems: [1, hello, null, [a]]\n"),
        "unreadable",
    ),
    Case("huge-file", _huge, "unreadable"),
    Case("directory-without-yaml", _directory, "unreadable"),
    Case("missing-file", _missing, "unreadable"),
    Case("symlink-loop", _symlink_loop, "unreadable"),
    Case("unreadable-file", _unreadable, "unreadable", needs_non_root=True),
    Case("metadata-hello", _text(TRAINJOB_HEAD + "metadata: hello\nspec: {}\n"), "invalid"),
    Case(
        "wrong-apiversion",
        _text(
            "apiVersion: trainer.kubeflow.org/v9\nkind: TrainJob\nmetadata: {name: x}\n"
            "spec: {runtimeRef: {name: torch-distributed}}\n"
        ),
        "invalid",
    ),
    Case("no-kind", _text("metadata: {name: x}\n"), "invalid"),
    Case(
        "spec-junk",
        _text(TRAINJOB_HEAD + "metadata: {name: x, labels: hello}\nspec: [1, 2]\nstatus: 7\n"),
        "invalid",
    ),
    Case(
        "kind-list-bad-object",
        _text("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: 5}\n"),
        "invalid",
    ),
]


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
