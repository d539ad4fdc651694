"""``trainer crds``: print the CustomResourceDefinitions this version serves."""

from __future__ import annotations

from typing import Annotated

import typer

from trainer.api import crds as gen
from trainer.machinery import yamlout


def crds(
    jobset: Annotated[
        bool,
        typer.Option(
            "--jobset",
            help="Also print the JobSet CRD (for a cluster without JobSet; normally install "
            "JobSet itself).",
        ),
    ] = False,
) -> None:
    """Print the Trainer CRDs as a YAML stream, ready for `kubectl apply -f -`."""
    objects = gen.trainer_crds()
    if jobset:
        objects.append(gen.jobset_crd())
    typer.echo(yamlout.dump_all(objects), nl=False)
