"""``trainer validate``: check TrainJobs and runtimes offline with every rule the API server
and the admission webhook apply."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

import typer

from trainer.admission.runtime import validate_runtime
from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView
from trainer.api.errors import FieldError
from trainer.api.load import ObjectError, check_object, parse_object
from trainer.api.v1alpha1 import TrainJob
from trainer.builtin import builtin_runtime_documents
from trainer.cli.catalog import RuntimeCatalog, is_runtime
from trainer.cli.files import read_documents


class Output(StrEnum):
    text = "text"
    json = "json"


@dataclass
class Outcome:
    source: str
    kind: str
    name: str
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def what(self) -> str:
        return f"{self.kind}/{self.name}" if self.kind else "object"


def _read(paths: list[str]) -> list[Any]:
    try:
        return read_documents(paths)
    except ObjectError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot read {exc.filename}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None


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
    docs = _read(files)
    runtime_docs = _read(runtimes) if runtimes else []
    if not docs:
        typer.echo("error: no objects found in the given files", err=True)
        raise typer.Exit(2)

    catalog = RuntimeCatalog(
        "given with --runtime or -f" if runtimes else "built in or given with -f"
    )
    sources = runtime_docs if runtimes else []
    for data in [d.data for d in sources] or builtin_runtime_documents():
        result = check_object(data, strict_fields=False)
        obj = parse_object(result.stored) if result.ok else None
        if obj is not None and is_runtime(obj):
            catalog.add(obj)  # type: ignore[arg-type]

    outcomes: list[Outcome] = []
    checked: list[tuple[Outcome, Any]] = []
    for doc in docs:
        result = check_object(doc.data, strict_fields=strict_fields)
        outcome = Outcome(doc.label, result.kind, result.name, list(result.errors))
        outcomes.append(outcome)
        if result.ok and result.model is not None:
            checked.append((outcome, result.model))
            if is_runtime(result.model):
                catalog.add(result.model)  # type: ignore[arg-type]
    for outcome, model in checked:
        if isinstance(model, TrainJob):
            runtime, problem = catalog.find(model)
            view = ClusterView(runtime=runtime, runtime_error=problem or None)
            verdict = validate_trainjob(model, None, view)
        elif is_runtime(model):
            verdict = validate_runtime(model, None)
        else:
            continue
        outcome.errors += verdict.errors
        outcome.warnings += verdict.warnings

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
        for o in outcomes:
            for w in o.warnings:
                typer.echo(f"Warning: {o.source}: {o.what}: {w}", err=True)
            if o.ok:
                typer.echo(f"valid    {o.what}  ({o.source})")
            else:
                typer.echo(f"INVALID  {o.what}  ({o.source})")
                for err in o.errors:
                    typer.echo(f"  {err}")
        typer.echo(f"{len(outcomes) - failed} valid, {failed} invalid")
    if failed:
        raise typer.Exit(1)
