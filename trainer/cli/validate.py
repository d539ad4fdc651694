"""``trainer validate``: check TrainJobs and runtimes offline with every rule the API server
and the admission webhook apply."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from trainer.cli.checks import check_documents, print_outcomes
from trainer.cli.files import read_or_exit


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
    runtimes: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            "-r",
            help="Runtime files or directories TrainJobs are checked against; repeatable. "
            "Without it, the built-in runtimes (plus runtimes given with -f) are used.",
        ),
    ] = None,
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
    """Check objects offline against every rule a cluster running this controller applies:
    the CRD schemas (types, required fields, enums, limits, CEL rules) and the admission
    webhook (runtime references, initializers, runtimePatches, per-framework rules, the JobSet
    name budget). TrainJobs are checked against their runtime as on create.

    Warnings go to stderr. Exit status: 0 when every object is valid (warnings allowed), 1 when
    any is not (one `path: message` line per error), 2 when a file cannot be read.
    """
    docs = read_or_exit(files, 2)
    runtime_docs = read_or_exit(runtimes, 2) if runtimes else []

    outcomes = check_documents(
        docs,
        runtime_docs,
        strict_fields=strict_fields,
        with_builtins=not runtimes,
        catalog_source="given with --runtime or -f" if runtimes else "built in or given with -f",
    )
    failed = sum(1 for o in outcomes if not o.ok)
    if output is Output.json:
        report = [
            {
                "source": o.source,
                "kind": o.kind,
                "name": o.name,
                "valid": o.ok,
                "warnings": o.warnings,
                "errors": [
                    {"field": e.path, "type": e.type, "message": e.message, "text": str(e)}
                    for e in o.errors
                ],
            }
            for o in outcomes
        ]
        typer.echo(json.dumps(report, indent=2))
    else:
        print_outcomes(outcomes)
        typer.echo(f"{len(outcomes) - failed} valid, {failed} invalid")
    if failed:
        raise typer.Exit(1)
