"""The last line of defence of the ``trainer`` command: no input ends in a traceback.

Every verb reports the errors it expects in one ``error: ...`` line with its documented exit
code. Anything else that escapes a command (a bug) is turned into one line naming the
exception and exit code 1 here; the traceback is printed only with ``-v``/``--verbose`` or
``TRAINER_DEBUG=1``. ``RecursionError`` and ``MemoryError`` are reported the same way, with
a hint that the input is too deeply nested or too large. A ``BrokenPipeError`` because stdout's
or stderr's reader is gone is no bug: the command ends quietly with status 141
(:mod:`trainer.cli.pipes`).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import typer
from typer._click.core import Context
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

from trainer.cli.helptext import ReflowingContext, reflowing_help
from trainer.cli.pipes import on_broken_pipe

INTERNAL_ERROR_EXIT = 1


def _verbose(ctx: Context) -> bool:
    if os.environ.get("TRAINER_DEBUG", "") not in ("", "0"):
        return True
    # The group's context holds the command's own arguments (typer parses them later).
    return any(a in ("-v", "--verbose") for a in ctx.args)


class GuardedGroup(TyperGroup):
    """A Typer group whose commands never end in a Python traceback (and whose help, and its
    commands', is reflowed to the terminal: :mod:`trainer.cli.helptext`)."""

    context_class = ReflowingContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            reflowing_help(command)

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        # The group's own ``--help`` is printed while its arguments are parsed, here.
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except BrokenPipeError:
            on_broken_pipe()
            raise

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, ClickException):
            raise
        except BrokenPipeError as exc:
            on_broken_pipe()  # stdout's or stderr's reader is gone: exit quietly
            self._report(ctx, exc, "")
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except (RecursionError, MemoryError) as exc:
            self._report(ctx, exc, "the input is too deeply nested or too large")
        except Exception as exc:
            self._report(ctx, exc, "")

    @staticmethod
    def _report(ctx: Context, exc: BaseException, hint: str) -> None:
        if _verbose(ctx):
            traceback.print_exception(exc, file=sys.stderr)
        detail = str(exc).splitlines()[0] if str(exc) else ""
        what = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
        extra = f" ({hint})" if hint else ""
        typer.echo(
            f"error: internal error: {what}{extra}; this is a bug, please report it "
            "(TRAINER_DEBUG=1 or -v prints the traceback)",
            err=True,
        )
        raise typer.Exit(INTERNAL_ERROR_EXIT)
