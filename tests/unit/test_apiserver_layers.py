"""The local API server's modules share only public names: no module reads another object's
private attribute (``x._name`` where ``x`` is not ``self`` or ``cls``) or imports a private
name from another module. The import direction (HTTP above the core) and the absence of
cycles are import-linter contracts in pyproject.toml."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "trainer" / "local" / "apiserver"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(source: str) -> list[str]:
    """Where ``source`` uses another object's or module's private name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom):
            found += [
                f"line {node.lineno}: import {a.name}" for a in node.names if _private(a.name)
            ]
    return found


def test_the_check_finds_a_private_reach() -> None:
    assert private_reaches("server._commit_update(x)\nself._ok()\n") == ["line 1: ._commit_update"]
    assert private_reaches("from m import _helper, public\n") == ["line 1: import _helper"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reaches_into_private_members(path: Path) -> None:
    assert private_reaches(path.read_text(encoding="utf-8")) == []


def test_every_advertised_verb_and_subresource_has_a_handler() -> None:
    """Discovery's verbs and the routed subresources are all served by the handler table
    (a verb or subresource added to a kind without its handler would answer 405)."""
    from trainer.local.apiserver import builtin  # noqa: PLC0415
    from trainer.local.apiserver.http import handlers, routing  # noqa: PLC0415

    missing = []
    for rt in builtin.new_registry():
        subresources = [""] + [s for s, served in routing.SUBRESOURCES.items() if served(rt)]
        for verb in rt.verbs:
            for sub in subresources:
                route = routing.Route(rt, "", "x" if sub else "", sub)
                if handlers.handler_for(route, verb) is None:
                    missing.append(f"{rt.plural}/{sub} {verb}")
    assert missing == []
