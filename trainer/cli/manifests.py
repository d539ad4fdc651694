"""``trainer manifests``: the whole install as one YAML stream, rendered from the templates
that also generate the kustomize tree under ``manifests/`` (a Helm-free parameterised
install)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainer.deploy.render import install_objects, runtime_objects, to_stream
from trainer.deploy.values import ValuesError, load_values
from trainer.machinery.safeload import CONFIG_LIMITS, InputError, read_bytes


def manifests(
    values_file: Annotated[
        Path | None,
        typer.Option(
            "--values",
            "-f",
            # Our bounded reader reports an unreadable file on one `error:` line (exit 2);
            # typer's default check would print a usage box that wraps long paths.
            readable=False,
            help="YAML values (keys: namespace, image, imagePullPolicy, replicas, logLevel, "
            "resources, nodeSelector, tolerations, priorityClassName, trainJobConcurrency, "
            "featureGates, webhook.failurePolicy, webhook.timeoutSeconds).",
        ),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Install namespace.")
    ] = None,
    image: Annotated[str | None, typer.Option(help="Controller image.")] = None,
    replicas: Annotated[int | None, typer.Option(help="Controller replicas (default 2).")] = None,
    runtimes: Annotated[
        bool,
        typer.Option(
            "--runtimes",
            help="Print the built-in ClusterTrainingRuntimes instead (apply them once the "
            "CRDs are established).",
        ),
    ] = False,
) -> None:
    """Print the install (Namespace, CRDs, RBAC, Deployment, Service, webhook configurations,
    PodDisruptionBudget) for `kubectl apply --server-side -f -`. JobSet is not included: install
    it first (docs/install.md)."""
    if runtimes:
        typer.echo(to_stream(runtime_objects()), nl=False)
        return
    text: bytes | None = None
    source = "values"
    if values_file is not None:
        source = str(values_file)
        try:
            text = read_bytes(values_file, CONFIG_LIMITS)
        except InputError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    overrides = {"namespace": namespace, "image": image, "replicas": replicas}
    try:
        values = load_values(text, source, overrides)
    except ValuesError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(to_stream(install_objects(values)), nl=False)
