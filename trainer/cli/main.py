"""Entry point of the ``trainer`` command. Commands run under :class:`GuardedGroup`: an
unexpected exception is one ``error: internal error`` line and exit 1, never a traceback."""

from __future__ import annotations

import typer

from trainer import __version__
from trainer.cli import apiserver as apiserver_cmd
from trainer.cli import controller as controller_cmd
from trainer.cli import convert as convert_cmd
from trainer.cli import crds as crds_cmd
from trainer.cli import dashboard as dashboard_cmd
from trainer.cli import datacache as datacache_cmd
from trainer.cli import manifests as manifests_cmd
from trainer.cli import render as render_cmd
from trainer.cli import run as run_cmd
from trainer.cli import validate as validate_cmd
from trainer.cli import webhook as webhook_cmd
from trainer.cli.guard import GuardedGroup

app = typer.Typer(
    name="trainer",
    help="Kubeflow Trainer v2.3, reimplemented in Python on JobSet.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=GuardedGroup,
)
app.command(name="run")(run_cmd.run)
app.command(name="up")(run_cmd.up)
app.command(name="render")(render_cmd.render)
app.command(name="validate")(validate_cmd.validate)
app.command(name="crds")(crds_cmd.crds)
app.command(name="apiserver")(apiserver_cmd.apiserver)
app.command(name="webhook")(webhook_cmd.webhook)
app.command(name="controller")(controller_cmd.controller)
app.command(name="convert")(convert_cmd.convert_cmd)
app.command(name="manifests")(manifests_cmd.manifests)
app.add_typer(datacache_cmd.app, name="data-cache")
app.command(name="dashboard")(dashboard_cmd.dashboard)


@app.command()
def version() -> None:
    """Print the version of this tool and the Trainer API it serves."""
    typer.echo(f"trainer {__version__} (API trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2.3)")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
