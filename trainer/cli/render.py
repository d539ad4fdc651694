"""``trainer render``: every object the controller would apply for a TrainJob, offline."""

from __future__ import annotations

import base64
import json
from enum import StrEnum
from typing import Annotated, Any

import typer

from trainer.api import constants as c
from trainer.api.load import check_object, parse_object
from trainer.api.v1alpha1 import TrainJob
from trainer.cli.catalog import RuntimeCatalog, is_runtime, with_namespace
from trainer.cli.files import read_or_exit
from trainer.controller.config import parse_feature_gates
from trainer.machinery import yamlout
from trainer.machinery.errors import format_errors
from trainer.machinery.safeload import CONFIG_LIMITS, InputError, read_bytes
from trainer.plugins.registry import render as render_objects
from trainer.runtime.builtin import builtin_runtime_documents
from trainer.runtime.credentials import generate_credential
from trainer.runtime.info import BuildContext, BuildError, Observed
from trainer.runtime.sshkeys import generate_ssh_keypair


class Output(StrEnum):
    yaml = "yaml"
    json = "json"


def to_yaml_stream(objects: list[dict[str, Any]]) -> str:
    """The objects as a YAML stream kubectl reads back as written
    (:mod:`trainer.machinery.yamlout`)."""
    return yamlout.dump_all(objects)


OFFLINE_OWNER_UID = "trainer-render-placeholder-uid"
"""The ownerReference ``uid`` of objects rendered for a TrainJob that has none (it gets one from
the API server when it is created). The API server refuses an empty ``uid``, so the output
carries this marker instead; see docs/troubleshooting.md, "See what a TrainJob produces"."""


def offline_trainjob(job: TrainJob, namespace: str | None = None) -> None:
    """Prepare a TrainJob read from a file for an offline build (in place): the namespace
    (``namespace``, else ``default``) and the placeholder owner uid when it has none."""
    meta = job.metadata
    if meta is None:
        return
    if not meta.namespace:
        meta.namespace = namespace or "default"
    if not meta.uid:
        meta.uid = OFFLINE_OWNER_UID


def fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _checked(data: Any, label: str, strict_fields: bool) -> Any:
    result = check_object(data, strict_fields=strict_fields)
    if not result.ok:
        what = f"{result.kind}/{result.name}" if result.kind else "object"
        raise fail(f"{label}: {what} is invalid: {format_errors(result.errors)}")
    return parse_object(result.stored)


def render(
    files: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            help="TrainJob YAML/JSON (a file, a directory or - for stdin). Runtimes in the same "
            "files are used too. Repeat for several.",
        ),
    ],
    runtimes: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            "-r",
            help="A TrainingRuntime or ClusterTrainingRuntime file or directory; repeatable. "
            "Without it the built-in runtimes are used.",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Namespace for TrainJobs that do not set one (default: default).",
        ),
    ] = None,
    output: Annotated[
        Output, typer.Option("--output", "-o", help="yaml (a multi-document stream) or json.")
    ] = Output.yaml,
    strict_fields: Annotated[
        bool,
        typer.Option(
            "--strict-fields/--no-strict-fields",
            help="Treat fields unknown to the schema as errors (exit 2), like `kubectl apply` "
            "(--validate=strict); without it they are dropped silently, as the API server "
            "prunes them.",
        ),
    ] = True,
    feature_gates: Annotated[
        str | None,
        typer.Option(
            "--feature-gates",
            help="Feature gates of the build, e.g. TrainJobStatus=true (needs --status-server-ca).",
        ),
    ] = None,
    status_server_ca: Annotated[
        str | None,
        typer.Option(
            "--status-server-ca",
            help="With TrainJobStatus=true: the CA certificate (PEM file) that goes into each "
            "<job>-tls-config ConfigMap, as the controller copies it from the webhook Secret.",
        ),
    ] = None,
    status_server_url: Annotated[
        str | None,
        typer.Option(
            "--status-server-url",
            help="With TrainJobStatus=true: the status server's base URL (default "
            "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443).",
        ),
    ] = None,
) -> None:
    """Print every object the controller would apply for each TrainJob, in apply order: the
    runtime snapshot ConfigMap, side objects (MPI Secret and hostfile, PodGroup, Flux
    ConfigMap and Secret), then the JobSet.

    Same input, same output, byte for byte, except freshly generated MPI SSH keys. Exits 2
    with a one-line error (and nothing on stdout) for unreadable or invalid input or an
    unknown runtime, 1 when a TrainJob cannot be built on its runtime.
    """
    ns = namespace or "default"
    docs = with_namespace(read_or_exit(files, 2), ns)
    runtime_docs = with_namespace(read_or_exit(runtimes, 2), ns) if runtimes else []

    builtin = not runtimes
    catalog = RuntimeCatalog("built in" if builtin else "given with --runtime or -f")
    sources = [(d.data, d.label) for d in runtime_docs]
    if builtin:
        sources = [(d, "built-in runtimes") for d in builtin_runtime_documents()]
    for data, label in sources:
        runtime = _checked(data, label, strict_fields)
        if not is_runtime(runtime):
            raise fail(f"{label}: expected a TrainingRuntime or ClusterTrainingRuntime")
        catalog.add(runtime)
    trainjobs: list[TrainJob] = []
    for doc in docs:
        obj = _checked(doc.data, doc.label, strict_fields)
        if is_runtime(obj):
            catalog.add(obj)
        elif isinstance(obj, TrainJob):
            trainjobs.append(obj)
        else:
            raise fail(f"{doc.label}: expected a TrainJob, got {obj.to_wire().get('kind')}")
    if not trainjobs:
        raise fail(", ".join(files) + ": no TrainJob found")

    try:
        gates = parse_feature_gates(feature_gates) if feature_gates else {}
    except ValueError as exc:
        raise fail(f"--feature-gates: {exc}") from None
    status_secret: dict[str, Any] | None = None
    if gates.get(c.FEATURE_TRAINJOB_STATUS):
        if not status_server_ca:
            raise fail(
                "--feature-gates TrainJobStatus=true needs --status-server-ca FILE: the CA "
                "certificate that goes into each <job>-tls-config ConfigMap"
            )
        try:
            ca = read_bytes(status_server_ca, CONFIG_LIMITS)
        except InputError as exc:
            raise fail(str(exc)) from None
        status_secret = {"data": {c.STATUS_SERVER_CA_KEY: base64.b64encode(ca).decode()}}
    objects: list[dict[str, Any]] = []
    ctx = BuildContext(
        ssh_keygen=generate_ssh_keypair,
        credential_gen=generate_credential,
        feature_gates=gates,
        status_server_url=status_server_url,
    )
    observed = Observed(status_server_secret=status_secret)
    for job in trainjobs:
        meta = job.metadata
        if meta is None or not meta.name:
            raise fail("a TrainJob has no metadata.name")
        if job.spec is None:
            raise fail(f"TrainJob {meta.name}: spec.runtimeRef is required")
        if job.spec.managed_by != c.MANAGED_BY_TRAINER:
            typer.echo(
                f"note: TrainJob {meta.name}: spec.managedBy is {job.spec.managed_by}, so the "
                "trainer controller creates nothing for it (its manager does); nothing rendered",
                err=True,
            )
            continue
        offline_trainjob(job, ns)
        runtime, problem = catalog.find(job)
        if runtime is None:
            raise fail(f"TrainJob {meta.name} references {problem}")
        try:
            objects.extend(render_objects(job, runtime, ctx=ctx, observed=observed))
        except BuildError as exc:
            typer.echo(f"error: TrainJob {meta.name}: {exc}", err=True)
            raise typer.Exit(1) from None
    if output is Output.json:
        typer.echo(json.dumps(objects, indent=2))
    else:
        typer.echo(to_yaml_stream(objects), nl=False)
