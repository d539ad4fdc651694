"""Reading the files and directories given with ``-f``, as kubectl does."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from trainer.api.load import Document, load_documents

SUFFIXES = (".yaml", ".yml", ".json")


def expand(paths: Iterable[str]) -> list[str]:
    """Files named directly, and the YAML/JSON files of directories (recursively, sorted)."""
    out: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append(raw)
            continue
        path = Path(raw)
        if path.is_dir():
            out.extend(str(p) for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES)
        else:
            out.append(raw)
    return out


def read_documents(paths: Iterable[str]) -> list[Document]:
    """Every document of every file; raises ObjectError or OSError with the file named."""
    docs: list[Document] = []
    for name in expand(paths):
        if name == "-":
            text = sys.stdin.read()
            source = "<stdin>"
        else:
            text = Path(name).read_text(encoding="utf-8")
            source = name
        docs.extend(load_documents(text, source))
    return docs
