"""``trainer convert``: Training Operator v1 jobs -> TrainJob + TrainingRuntime YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from trainer.cli.files import read_or_exit
from trainer.cli.render import to_yaml_stream
from trainer.convert import RUNTIME_MODES, Converted, ConvertError, convert
from trainer.runtime.builtin import builtin_runtime_documents


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def convert_cmd(
    files: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            help="v1 job YAML/JSON (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob): "
            "a file, a directory or - for stdin. Repeat for several.",
        ),
    ],
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            "-o",
            help="Write <namespace>-<name>.yaml (or <name>.yaml) per job into this directory "
            "instead of printing one YAML stream.",
        ),
    ] = None,
    runtime_mode: Annotated[
        str,
        typer.Option(
            "--runtime-mode",
            help="auto: reference a built-in ClusterTrainingRuntime when it renders the same "
            "pods as the job's own runtime, else write its own TrainingRuntime; builtin: fail "
            "unless a built-in fits; own: always write the job's own TrainingRuntime.",
        ),
    ] = "auto",
) -> None:
    """Convert Training Operator v1 jobs into TrainJobs and the TrainingRuntimes they run on.

    For each job: a TrainJob referencing a built-in ClusterTrainingRuntime when one renders
    the same pods (--runtime-mode), else a TrainingRuntime named like the job (its pod
    templates, ML policy, gang scheduling, retries and TTL) and a TrainJob referencing it,
    ready for kubectl apply. Which runtime each job uses, and why, is an info line on stderr.
    Fields without a v2 equivalent are reported on stderr as warnings naming the field and
    what the converted job does instead. Exits 1 with a one-line error, writing nothing, when
    any input is unreadable or not a v1 job.
    """
    docs = read_or_exit(files, 1)
    if runtime_mode not in RUNTIME_MODES:
        raise _fail(
            f"--runtime-mode must be one of {', '.join(RUNTIME_MODES)}, not {runtime_mode!r}"
        )
    builtins = {
        str(d["metadata"]["name"]): d  # type: ignore[index]
        for d in builtin_runtime_documents()
    }
    results: list[Converted] = []
    for doc in docs:
        try:
            results.append(
                convert(doc.data, doc.label, builtins=builtins, runtime_mode=runtime_mode)
            )
        except ConvertError as exc:
            raise _fail(str(exc)) from None
    for result in results:
        for line in result.info:
            typer.echo(f"info: {result.kind}/{result.name}: {line}", err=True)
        for warning in result.warnings:
            typer.echo(f"warning: {result.kind}/{result.name}: {warning}", err=True)
    if output_dir is None:
        objects: list[dict[str, Any]] = [o for r in results for o in r.objects]
        typer.echo(to_yaml_stream(objects), nl=False)
        return
    outputs: dict[Path, str] = {}
    for result in results:
        stem = f"{result.namespace}-{result.name}" if result.namespace else result.name
        path = output_dir / f"{stem}.yaml"
        if path in outputs:
            raise _fail(f"two jobs convert to the same file {path}")
        outputs[path] = to_yaml_stream(result.objects)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        for path, text in outputs.items():
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {exc.filename}: {exc.strerror}") from None
    for path in outputs:
        typer.echo(f"wrote {path}")
