"""Reading the files and directories given with ``-f``, as kubectl does.

Every byte goes through :mod:`trainer.machinery.safeload` (UTF-8 only, bounded size, depth,
aliases and numbers); problems are :class:`~trainer.machinery.safeload.InputError` naming the file,
which the commands print as one ``error: FILE: line L, column C: message`` line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import typer

from trainer.api.load import Document, load_documents
from trainer.machinery.safeload import FILE_LIMITS, InputError, read_bytes, read_stream

SUFFIXES = (".yaml", ".yml", ".json")


def expand(paths: Iterable[str]) -> list[str]:
    """Files named directly, and the YAML/JSON files of directories (recursively, sorted;
    symbolic links to directories are not followed, so a link loop cannot recurse)."""
    out: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append(raw)
            continue
        path = Path(raw)
        if path.is_dir():
            try:
                found = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
            except OSError as exc:
                raise InputError(raw, f"cannot list the directory: {exc.strerror or exc}") from None
            if not found:
                raise InputError(raw, "the directory has no .yaml, .yml or .json file")
            out.extend(str(p) for p in found)
        else:
            out.append(raw)
    return out


def read_documents(paths: Iterable[str]) -> list[Document]:
    """Every document of every file; raises :class:`InputError` naming the file."""
    docs: list[Document] = []
    for name in expand(paths):
        if name == "-":
            data = read_stream(sys.stdin.buffer, "<stdin>", FILE_LIMITS)
            source = "<stdin>"
        else:
            data = read_bytes(name, FILE_LIMITS)
            source = name
        docs.extend(load_documents(data, source))
    return docs


def read_or_exit(paths: list[str], code: int) -> list[Document]:
    """:func:`read_documents`, or one ``error:`` line on stderr and exit ``code`` (also when
    the files hold no object at all)."""
    try:
        docs = read_documents(paths)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code) from None
    if not docs:
        names = ", ".join("<stdin>" if p == "-" else p for p in paths)
        typer.echo(f"error: {names}: no objects found", err=True)
        raise typer.Exit(code)
    return docs
