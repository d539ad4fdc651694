"""What a CEL rule reads of ``self`` and ``oldSelf`` (a static read set), and projecting on it.

A rule such as ``size(self.metadata.name) <= 63`` placed at the root of a TrainJob reads one
string of the object, yet converting the whole object to CEL values costs more than evaluating
the rule. Kubernetes converts lazily (cel-go wraps the unstructured object and converts a field
when the rule selects it); cel-python needs its values converted up front, so this module finds,
from the parse tree, which parts of the variable a rule can observe, and keeps only those parts
of the plain JSON value before it is converted (:func:`project`). The projected value is also
small enough to serve as the key of the outcome memo (:mod:`.memo`).

The analysis is conservative: a read set is a tree of field names; every occurrence of the
variable must be the start of a chain of field selections (``self.a.b``, also inside ``has()``),
and the value at the end of a chain is kept whole, whatever the rule does with it. The one
deeper form understood is a quantifier macro over a list (``self.l.all(x, p)``, ``exists``,
``exists_one``): the items are projected on what ``p`` reads of ``x``. Any other use (indexing
``self['a']``, a method call on the variable itself, a macro that shadows a name, the name as a
field) makes the whole value part of the read set. Keeping more than needed is always safe:
the rule cannot observe what it does not select.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final

from lark import Token, Tree

ITEMS: Final = "\0items"
"""Read-set key for "the items of this list, projected on the sub-tree" (not a CEL name)."""

ReadSet = dict[str, Any] | None
"""``None``: the whole value; a dict: only these fields (CEL names), each with its read set."""

_QUANTIFIERS: Final = frozenset({"all", "exists", "exists_one"})
_VARIABLES: Final = ("self", "oldSelf")

_RESERVED: Final = frozenset(
    {
        "true",
        "false",
        "null",
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
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)
"""CEL's reserved words (https://github.com/google/cel-spec/blob/master/doc/langdef.md#syntax),
which Kubernetes escapes in property names as ``__word__``."""
_ESCAPABLE: Final = re.compile(r"^[a-zA-Z_./-][a-zA-Z0-9_./-]*$")


def is_reserved(name: str) -> bool:
    """Whether ``name`` is a CEL reserved word (escaped as ``__name__`` in property names)."""
    return name in _RESERVED


def escape_property_name(name: str) -> str | None:
    """The CEL name of an object property, as Kubernetes escapes it; None if not reachable.

    ``__`` becomes ``__underscores__``, ``.`` ``__dot__``, ``-`` ``__dash__``, ``/``
    ``__slash__``, and a reserved word ``w`` becomes ``__w__``.
    """
    if name in _RESERVED:
        return f"__{name}__"
    if not _ESCAPABLE.match(name):
        return None
    out = name.replace("__", "__underscores__")
    return out.replace(".", "__dot__").replace("-", "__dash__").replace("/", "__slash__")


class _Unanalysable(Exception):
    """The variable is used in a form the analysis does not follow: read it whole."""


def merge(a: ReadSet, b: ReadSet) -> ReadSet:
    """The union of two read sets."""
    if a is None or b is None:
        return None
    out = dict(a)
    for key, sub in b.items():
        out[key] = merge(out[key], sub) if key in out else sub
    return out


def _bare_ident(node: Any) -> str | None:
    """The identifier an expression is, if it is nothing but one (``x`` in ``l.all(x, p)``)."""
    while isinstance(node, Tree):
        if node.data == "ident":
            child = node.children[0] if len(node.children) == 1 else None
            return str(child) if isinstance(child, Token) else None
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return None


def _chain(node: Any, var: str) -> tuple[str, ...] | None:
    """The field path if ``node`` is ``var.f1.f2...`` (a ``member`` node), else None."""
    if not isinstance(node, Tree) or node.data != "member" or len(node.children) != 1:
        return None
    inner = node.children[0]
    if not isinstance(inner, Tree):
        return None
    if inner.data == "primary":
        return () if _bare_ident(inner) == var else None
    if inner.data == "member_dot" and len(inner.children) == 2:
        base = _chain(inner.children[0], var)
        name = inner.children[1]
        if base is not None and isinstance(name, Token):
            return (*base, str(name))
    return None


def _at(path: tuple[str, ...], leaf: ReadSet) -> ReadSet:
    out = leaf
    for name in reversed(path):
        out = {name: out}
    return out


def _scan(node: Any, var: str) -> ReadSet:
    """The read set of ``var`` in ``node`` (``{}``: not read). Raises :class:`_Unanalysable`."""
    if isinstance(node, Token):
        if str(node) == var:
            raise _Unanalysable(var)  # an occurrence no pattern below accounted for
        return {}
    if not isinstance(node, Tree):
        return {}
    path = _chain(node, var)
    if path is not None:
        return _at(path, None)
    if node.data == "member_dot_arg" and len(node.children) == 3:
        receiver, method, args = node.children
        path = _chain(receiver, var)
        if path is not None and isinstance(method, Token) and str(method) in _QUANTIFIERS:
            exprs = args.children if isinstance(args, Tree) else []
            item_var = _bare_ident(exprs[0]) if len(exprs) == 2 else None
            if item_var is not None and item_var not in (var, *_VARIABLES):
                body = exprs[1]
                try:
                    items = _scan(body, item_var)
                except _Unanalysable:
                    items = None
                return merge(_at(path, {ITEMS: items}), _scan(body, var))
    out: ReadSet = {}
    for child in node.children:
        out = merge(out, _scan(child, var))
        if out is None:
            return None
    return out


def read_set(tree: Any, var: str) -> ReadSet:
    """What the parse tree of a rule reads of ``var``; ``None`` is the whole value."""
    try:
        return _scan(tree, var)
    except _Unanalysable:
        return None


@functools.lru_cache(maxsize=4096)
def _cel_name(key: str) -> str | None:
    return escape_property_name(key)


def project(value: Any, reads: ReadSet) -> Any:
    """``value`` with only what ``reads`` selects (a new value; ``value`` is not changed).

    A map keeps a key whose name (as is, or as CEL escapes a property name) is selected, and
    every key that is not a string; a list is projected item by item only when the read set is
    exactly its items; anything else is kept whole.
    """
    if reads is None:
        return value
    if isinstance(value, Mapping):
        if ITEMS in reads:
            return value  # a macro over a map ranges over its keys: keep it all
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                out[key] = item
                continue
            name = _cel_name(key)
            selected = [reads[n] for n in {key, name} if n is not None and n in reads]
            if selected:
                out[key] = project(item, functools.reduce(merge, selected))
        return out
    if isinstance(value, list) and len(reads) == 1 and ITEMS in reads:
        return [project(item, reads[ITEMS]) for item in value]
    return value
