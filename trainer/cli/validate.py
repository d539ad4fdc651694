"""``trainer validate``: check TrainJobs and runtimes offline, as the API server would."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from trainer.api.load import CheckResult, ObjectError, check_object
from trainer.cli.files import read_documents


class Output(StrEnum):
    text = "text"
    json = "json"


def validate(
    files: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            help="A YAML/JSON file, a directory (searched recursively) or - for stdin. "
            "Repeat for several.",
        ),
    ],
    strict_fields: Annotated[
        bool,
        typer.Option(
            "--strict-fields/--no-strict-fields",
            help="Treat fields unknown to the schema as errors, like `kubectl apply` "
            "(--validate=strict); without it they are dropped silently, as the API server "
            "prunes them.",
        ),
    ] = True,
    output: Annotated[
        Output, typer.Option("--output", "-o", help="text for people, json for tools.")
    ] = Output.text,
) -> None:
    """Check objects against the TrainJob, TrainingRuntime, ClusterTrainingRuntime and JobSet
    schemas: types, required fields, enums, limits and the CEL rules of the CRDs.

    Exits 0 when every object is valid, 1 when any is not, 2 when a file cannot be read.
    """
    try:
        docs = read_documents(files)
    except ObjectError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot read {exc.filename}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None
    if not docs:
        typer.echo("error: no objects found in the given files", err=True)
        raise typer.Exit(2)

    results: list[tuple[str, CheckResult]] = [
        (doc.label, check_object(doc.data, strict_fields=strict_fields)) for doc in docs
    ]
    failed = sum(1 for _, r in results if not r.ok)
    if output is Output.json:
        report = [
            {
                "source": label,
                "kind": r.kind,
                "name": r.name,
                "valid": r.ok,
                "errors": [
                    {"field": e.path, "type": e.type, "message": e.message, "text": str(e)}
                    for e in r.errors
                ],
            }
            for label, r in results
        ]
        typer.echo(json.dumps(report, indent=2))
    else:
        for label, r in results:
            what = f"{r.kind}/{r.name}" if r.kind else "object"
            if r.ok:
                typer.echo(f"valid    {what}  ({label})")
            else:
                typer.echo(f"INVALID  {what}  ({label})")
                for err in r.errors:
                    typer.echo(f"  - {err}")
        typer.echo(f"{len(results) - failed} valid, {failed} invalid")
    if failed:
        raise typer.Exit(1)
