"""``trainer crds``: print the CustomResourceDefinitions this version serves."""

from __future__ import annotations

from typing import Annotated

import typer
import yaml

from trainer.api import crds as gen


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
    typer.echo(yaml.safe_dump_all(objects, sort_keys=False, width=100), nl=False)
