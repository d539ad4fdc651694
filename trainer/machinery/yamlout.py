"""Writing Kubernetes manifests as YAML that every reader takes back exactly as written.

One home for the rule, used by every writer of YAML a user feeds to ``kubectl``: ``trainer
render`` and ``trainer convert``, ``trainer manifests`` and the generated ``manifests/`` tree,
and ``trainer crds``.

Why it is needed: PyYAML quotes a string only when its own resolver would read the plain form
back as something else, but kubectl reads YAML with go-yaml v2 (through sigs.k8s.io/yaml),
which follows YAML 1.1 further than PyYAML does. A plain ``y`` or ``N`` is a boolean there,
``1e3`` a float (no dot needed), ``0o17``, ``0X1F`` and ``0B11`` integers (Go's
``strconv.ParseInt`` with base 0, after every ``_`` is removed), and ``.5e3`` a float. Left
plain, ``command: [y]`` reaches the API server as ``true`` and is refused (``must be of type
string``); a label value ``"n"`` would become ``false``. Upstream's Flux LAMMPS example passes
``-v y 4`` as separate arguments, so this is not hypothetical.

:func:`needs_quotes` is the rule (go-yaml v2's ``resolve``: its table of booleans, nulls and
special floats, and its integer and float parsing; and the YAML 1.1 float, which also takes
``1.2.3``); :class:`ManifestDumper` applies it to every
string, map keys included, and writes multi-line strings as ``|`` blocks. Whatever PyYAML's
resolver would retype (YAML 1.1 sexagesimals ``12:30:00``, timestamps, ``=``, ``<<``, ...) it
already quotes by itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

import yaml

# go-yaml v2 resolve.go, resolveMapList: the words it reads as booleans, nulls and floats.
_WORDS: Final = frozenset(
    [
        "y",
        "Y",
        "yes",
        "Yes",
        "YES",
        "n",
        "N",
        "no",
        "No",
        "NO",
        "true",
        "True",
        "TRUE",
        "false",
        "False",
        "FALSE",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "OFF",
        "~",
        "null",
        "Null",
        "NULL",
        ".nan",
        ".NaN",
        ".NAN",
        ".inf",
        ".Inf",
        ".INF",
        "+.inf",
        "+.Inf",
        "+.INF",
        "-.inf",
        "-.Inf",
        "-.INF",
        "<<",
    ]
)
# strconv.ParseInt/ParseUint with base 0 (a sign, then 0x/0o/0b prefixes in either case, a
# leading 0 for octal, or decimal), applied after go-yaml removes every "_".
_GO_INT: Final = re.compile(
    r"[-+]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)"
)
# go-yaml's yamlStyleFloat (then strconv.ParseFloat), also after removing "_".
_GO_FLOAT: Final = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
# A plain scalar starting with "." goes straight to strconv.ParseFloat.
_GO_DOT_FLOAT: Final = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
# The YAML 1.1 float of https://yaml.org/type/float.html, whose "[0-9.]*" also takes "1.2.3"
# and "0.0.0.0" (PyYAML's own resolver does not, so it leaves them plain).
_YAML11_FLOAT: Final = re.compile(r"[-+]?(?:[0-9][0-9_]*)?\.[0-9.]*(?:[eE][-+][0-9]+)?")


def needs_quotes(value: str) -> bool:
    """Whether a YAML 1.1 reader such as kubectl's would read the plain scalar ``value`` as
    something other than this string (PyYAML already quotes what its own resolver retypes)."""
    if value in _WORDS or not value or _YAML11_FLOAT.fullmatch(value):
        return True
    first = value[0]
    if first.isdigit() or first in "+-":
        plain = value.replace("_", "")
        return bool(_GO_INT.fullmatch(plain) or _GO_FLOAT.fullmatch(plain))
    if first == ".":
        return bool(_GO_DOT_FLOAT.fullmatch(value))
    return False


class ManifestDumper(yaml.SafeDumper):
    """PyYAML's safe dumper with :func:`needs_quotes` applied to every string and multi-line
    strings (scripts, hostfiles, configuration files) written as ``|`` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style: str | None = None
    if "\n" in value:
        style = "|"
    elif needs_quotes(value):
        style = "'"
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


ManifestDumper.add_representer(str, _represent_str)

WIDTH: Final = 100


def dump_all(objects: Iterable[Any], *, allow_unicode: bool = False) -> str:
    """A multi-document YAML stream (``---`` between documents), keys in their given order."""
    return yaml.dump_all(
        list(objects),
        Dumper=ManifestDumper,
        sort_keys=False,
        width=WIDTH,
        allow_unicode=allow_unicode,
    )


def dump(obj: Any, *, allow_unicode: bool = False) -> str:
    """One YAML document, keys in their given order."""
    return yaml.dump(
        obj, Dumper=ManifestDumper, sort_keys=False, width=WIDTH, allow_unicode=allow_unicode
    )


def scalar(value: str) -> str:
    """``value`` as an inline YAML scalar for a template slot (``key: {{ value }}``): plain
    when every reader takes it back as written, else quoted ("" stays "")."""
    if not value:
        return ""
    text = yaml.dump({"k": value}, Dumper=ManifestDumper, width=2**31, allow_unicode=True)
    return text[len("k: ") :].rstrip("\n")
