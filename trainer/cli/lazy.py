"""Commands of ``trainer`` imported only when they are used.

Importing every command module at start costs about 1.3 s on a 2-core machine (the local API
server, the controller, the webhook, kubernetes_asyncio, the CRD models), and every ``trainer``
process paid it: ``trainer version`` as much as ``trainer up``, and each data-cache pod, whose
entrypoint is ``trainer data-cache serve``, before it could load its table. A
:class:`LazyCommands` mapping stands in for a click group's ``commands``: it knows every
command's name and where it lives, and imports the module on first access by name. Running one
command imports only that command's module; ``trainer --help`` lists every command and so
imports them all, as before.

A command is either a function (made into a click command as ``Typer.command`` would) or a
``typer.Typer`` sub-application (made into a group as ``Typer.add_typer`` would).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

import typer
from typer._click.core import Command

from trainer.cli.helptext import HELP_MARKUP, reflowing_help


def load_command(name: str, module: str, attribute: str) -> Command:
    """The click command ``name`` built from ``module.attribute`` (a function or a Typer)."""
    target = getattr(importlib.import_module(module), attribute)
    holder = typer.Typer(
        add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=HELP_MARKUP
    )
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
        group = typer.main.get_command(holder)
        command: Command = group.commands[name]  # type: ignore[attr-defined]
    else:
        # One command and no callback: Typer builds that command itself, not a group.
        holder.command(name=name)(target)
        command = typer.main.get_command(holder)
    command.name = name
    return reflowing_help(command)


class LazyCommands(MutableMapping[str, Command]):
    """A group's commands: those given already built, the others imported on first access."""

    def __init__(self, built: dict[str, Command], lazy: dict[str, tuple[str, str]]) -> None:
        self._built = dict(built)
        self._lazy = {name: where for name, where in lazy.items() if name not in built}
        self._order = [*self._lazy, *self._built]

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            if name not in self._lazy:
                raise KeyError(name)
            self._built[name] = load_command(name, *self._lazy[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        if name not in self._order:
            self._order.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._order:
            raise KeyError(name)
        self._order.remove(name)
        self._built.pop(name, None)
        self._lazy.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._order
