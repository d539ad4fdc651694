"""The last line of defence of the ``trainer`` command: no input ends in a traceback.

Every verb reports the errors it expects in one ``error: ...`` line with its documented exit
code. Anything else that escapes a command (a bug) is turned into one line naming the
exception and exit code 1 here; the traceback is printed only with ``-v``/``--verbose`` or
``TRAINER_DEBUG=1``. ``RecursionError`` and ``MemoryError`` are reported the same way, with
a hint that the input is too deeply nested or too large.
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

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, ClickException):
            raise
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
