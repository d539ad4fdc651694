"""Compiling CEL rules once per text, and running a compiled rule without raising.

:func:`compile_rule` parses a rule with cel-python, binds the functions of
:mod:`.cel_library`, and records what the rule needs to be run cheaply: whether it is a
transition rule (it names ``oldSelf``) and what it reads of ``self`` and ``oldSelf``
(:mod:`.readset`). Compilations are cached by rule text, so the same rule in many schemas (or
in many versions of one CRD) compiles once; :func:`compile_rules` compiles a whole schema up
front, as kube-apiserver does when a CRD is registered, so the first custom resource written
does not pay for compiling them.

Nothing here raises on a bad rule or a bad value: a compile error is kept in the
:class:`CompiledRule`, and :func:`evaluate` returns the error text, worded the way
kube-apiserver words the common ones (``no such key: x``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import celpy
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from .cel_library import FUNCTIONS
from .cel_values import to_cel
from .readset import ReadSet, read_set


@dataclass(frozen=True)
class CompiledRule:
    """A rule compiled once: either a program or the compile error, never both."""

    rule: str
    program: Any = None
    error: str = ""
    transition: bool = False
    reads_self: ReadSet = None
    """What the rule reads of ``self`` (:mod:`.readset`); None: all of it."""
    reads_old: ReadSet = None


class _Runner(celpy.InterpretedRunner):
    """cel-python's interpreter, with the base activation built once per program.

    ``InterpretedRunner`` rebuilds it (loading every well-known type annotation) on each
    evaluation; the evaluator only ever clones it to bind the variables, so one is enough.
    """

    _base: Any = None

    def new_activation(self) -> Any:
        if self._base is None:
            self._base = super().new_activation()
        return self._base


@functools.cache
def _environment() -> Any:
    return celpy.Environment(runner_class=_Runner)


@functools.lru_cache(maxsize=4096)
def compile_rule(rule: str) -> CompiledRule:
    """Compile a CEL expression (cached per text); errors are returned, not raised."""
    env = _environment()
    try:
        ast = env.compile(rule)
        program = env.program(ast, functions=FUNCTIONS)
    except CELParseError as exc:
        line = getattr(exc, "line", None)
        column = getattr(exc, "column", None)
        where = f" at line {line}, column {column}" if line is not None else ""
        return CompiledRule(rule, error=f"syntax error{where}: {rule.strip()}")
    except Exception as exc:
        return CompiledRule(rule, error=exception_text(exc))
    return CompiledRule(
        rule,
        program=program,
        transition=_references_old_self(ast),
        reads_self=read_set(ast, "self"),
        reads_old=read_set(ast, "oldSelf"),
    )


def _references_old_self(ast: Any) -> bool:
    """Whether the parse tree uses the variable ``oldSelf`` (not a field or string of that name)."""
    find_data = getattr(ast, "find_data", None)
    if find_data is None:
        return False
    return any(
        isinstance(child, str) and child == "oldSelf"
        for node in find_data("ident")
        for child in node.children
    )


_NO_SUCH_MEMBER: Final = re.compile(r"^no such member in mapping: '(.*)'$")


def exception_text(exc: BaseException) -> str:
    """The text of an evaluation or conversion error, as it goes into a rule's message."""
    if isinstance(exc, CELEvalError) and exc.args and isinstance(exc.args[0], str):
        text = exc.args[0]
        missing = _NO_SUCH_MEMBER.match(text)
        if missing:
            return f"no such key: {missing.group(1)}"
        return text
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def evaluate(compiled: CompiledRule, activation: Mapping[str, Any]) -> tuple[Any, str]:
    """Run a compiled rule: ``(result, "")`` or ``(None, error text)``. Never raises."""
    if compiled.program is None:
        return None, compiled.error or "not compiled"
    try:
        result = compiled.program.evaluate(dict(activation))
    except Exception as exc:
        return None, exception_text(exc)
    if isinstance(result, CELEvalError):
        return None, exception_text(result)
    return result, ""


def evaluate_rule(rule: str, variables: Mapping[str, Any]) -> tuple[Any, str]:
    """Compile (cached) and run ``rule`` on plain JSON ``variables``; for ad-hoc checks."""
    compiled = compile_rule(rule)
    if compiled.error:
        return None, f"rule compile error: {compiled.error}"
    try:
        activation = {name: to_cel(value) for name, value in variables.items()}
    except (TypeError, ValueError) as exc:
        return None, f"rule evaluation error: {exception_text(exc)}"
    result, error = evaluate(compiled, activation)
    if error:
        return None, f"rule evaluation error: {error}"
    return result, ""


def compile_rules(schema: Any) -> int:
    """Compile every rule and messageExpression of a schema now (cached by text), as
    kube-apiserver does when a CRD is registered, rather than on the first write; the count."""
    count = 0
    if isinstance(schema, Mapping):
        specs = schema.get("x-kubernetes-validations")
        for spec in specs if isinstance(specs, list) else ():
            if not isinstance(spec, Mapping):
                continue
            for text in (spec.get("rule"), spec.get("messageExpression")):
                if isinstance(text, str) and text.strip():
                    compile_rule(text)
                    count += 1
        children: Iterable[Any] = schema.values()
    elif isinstance(schema, list):
        children = schema
    else:
        return 0
    return count + sum(compile_rules(v) for v in children)
