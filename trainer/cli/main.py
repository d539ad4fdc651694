"""Entry point of the ``trainer`` command. Commands run under :class:`GuardedGroup`: an
unexpected exception is one ``error: internal error`` line and exit 1, never a traceback.
Each command's module is imported only when that command runs (:mod:`trainer.cli.lazy`)."""

from __future__ import annotations

import gc
import sys
from typing import Any

import typer

from trainer import __version__
from trainer.cli.guard import GuardedGroup
from trainer.cli.helptext import HELP_MARKUP
from trainer.cli.lazy import LazyCommands
from trainer.cli.pipes import closed_pipe_ends_quietly

# name -> (module, attribute): a command function, or a Typer app for a command group.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("trainer.cli.run", "run"),
    "up": ("trainer.cli.run", "up"),
    "node": ("trainer.cli.node", "node"),
    "render": ("trainer.cli.render", "render"),
    "validate": ("trainer.cli.validate", "validate"),
    "crds": ("trainer.cli.crds", "crds"),
    "apiserver": ("trainer.cli.apiserver", "apiserver"),
    "webhook": ("trainer.cli.webhook", "webhook"),
    "controller": ("trainer.cli.controller", "controller"),
    "convert": ("trainer.cli.convert", "convert_cmd"),
    "manifests": ("trainer.cli.manifests", "manifests"),
    "runtimes": ("trainer.cli.runtimes", "app"),
    "data-cache": ("trainer.cli.datacache", "app"),
    "dashboard": ("trainer.cli.dashboard", "dashboard"),
}


class TrainerGroup(GuardedGroup):
    """The ``trainer`` group: guarded, with its commands imported on use."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(dict(self.commands), COMMANDS)


app = typer.Typer(
    name="trainer",
    help="Kubeflow Trainer v2.3, reimplemented in Python on JobSet.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=HELP_MARKUP,
    cls=TrainerGroup,
)


@app.callback()
def _group() -> None:
    # A callback keeps ``trainer`` a group: with only ``version`` registered here (the other
    # commands are lazy), Typer would otherwise make ``trainer`` that one command.
    pass


@app.command()
def version() -> None:
    """Print the version of this tool and the Trainer API it serves."""
    typer.echo(f"trainer {__version__} (API trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2.3)")


SERVING = frozenset({"apiserver", "controller", "webhook", "up", "run", "node"})
"""Commands that serve for long with large caches: their collector is set for it
(:func:`trainer.machinery.gctuning.tune_for_serving`; docs/local-plane.md, "Python's garbage
collector"). Only here, for the process ``trainer`` runs in, not where a command's function is
called in-process (tests)."""


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in SERVING:
        from trainer.machinery.gctuning import tune_for_serving  # noqa: PLC0415 (serving only)

        tune_for_serving()
    try:
        with closed_pipe_ends_quietly():
            app()
    finally:
        # The command is over and has closed what it opened (``trainer run``: every process
        # ended, sockets closed, files written). What is left is CPython's teardown, whose
        # collections walk every object of the ~1,800 modules loaded: 0.3-0.5 s of a 2-core
        # machine's time after ``trainer run`` has finished. Frozen objects are not walked; they
        # are still freed by reference counting, and atexit handlers still run
        # (docs/local-plane.md, "Stopping").
        gc.freeze()


if __name__ == "__main__":
    main()
