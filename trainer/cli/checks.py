"""The offline checks of ``trainer validate``, shared with ``trainer run`` (which refuses to
apply anything until every object in its files passes them).

An object passes when the API server with our CRDs installed would store it (apiVersion and
kind known, CRD schema, CEL rules, unknown fields when strict) and the admission webhook
would admit it (runtime references, per-framework rules, the JobSet name budget).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import typer

from trainer.admission.runtime import validate_runtime
from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView
from trainer.api.load import Document, check_object, parse_object
from trainer.api.v1alpha1 import TrainJob
from trainer.cli.catalog import RuntimeCatalog, is_runtime
from trainer.machinery.errors import FieldError
from trainer.runtime.builtin import builtin_runtime_documents


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


def check_documents(
    docs: Iterable[Document],
    runtime_docs: list[Document],
    *,
    strict_fields: bool = True,
    with_builtins: bool = True,
    catalog_source: str = "built in or given with -f",
) -> list[Outcome]:
    """One outcome per document: schema and CEL errors, then the admission rules (TrainJobs
    against the runtimes of ``runtime_docs``, the built-ins when ``with_builtins``, and the
    runtimes among ``docs``)."""
    catalog = RuntimeCatalog(catalog_source)
    sources: list[Any] = [d.data for d in runtime_docs]
    if with_builtins:
        sources += builtin_runtime_documents()
    outcomes: list[Outcome] = []
    for i, data in enumerate(sources):
        result = check_object(data, strict_fields=False)
        obj = parse_object(result.stored) if result.ok else None
        if obj is not None and is_runtime(obj):
            catalog.add(obj)  # type: ignore[arg-type]
        elif not result.ok and i < len(runtime_docs):
            # A runtime file given with --runtime that the API server would refuse.
            label = runtime_docs[i].label
            outcomes.append(Outcome(label, result.kind, result.name, list(result.errors)))

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
    return outcomes


def print_outcomes(outcomes: list[Outcome], *, only_invalid: bool = False) -> None:
    """validate's text report: warnings on stderr, a valid/INVALID line per object with one
    ``path: message`` line per error."""
    for o in outcomes:
        for w in o.warnings:
            typer.echo(f"Warning: {o.source}: {o.what}: {w}", err=True)
        if o.ok:
            if not only_invalid:
                typer.echo(f"valid    {o.what}  ({o.source})")
        else:
            typer.echo(f"INVALID  {o.what}  ({o.source})")
            for err in o.errors:
                typer.echo(f"  {err}")
