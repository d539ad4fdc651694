"""``trainer runtimes install`` and ``trainer runtimes uninstall``: the Helm chart's runtimes
installer (trainer/deploy/installer.py; docs/install.md, "Installing with Helm"), run by the
chart's hook Jobs with their ServiceAccount's token, and usable by hand with a kubeconfig."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer

from trainer.deploy.installer import (
    FIELD_MANAGER,
    SELECTOR,
    RuntimesFileError,
    plan,
    runtimes_to_apply,
)
from trainer.kube.client import KubeconfigError, new_api_client
from trainer.kube.resources import CLUSTER_TRAINING_RUNTIMES
from trainer.kube.rest import Kube
from trainer.machinery.requests import APIError
from trainer.machinery.safeload import FILE_LIMITS, InputError, load_yaml_documents, read_bytes

app = typer.Typer(
    name="runtimes",
    help="Install or remove the built-in ClusterTrainingRuntimes as the Helm chart's hook Jobs do.",
    no_args_is_help=True,
)

KubeconfigOption = Annotated[
    str | None,
    typer.Option(help="kubeconfig (default: $KUBECONFIG, then the in-cluster config)."),
]
TIMEOUT = 30.0
"""Seconds for each request."""
SERVED_WITHIN = 120.0
"""Seconds to wait for the ClusterTrainingRuntime API (its CRD created by the same install)."""
PERMITTED_WITHIN = 30.0
"""Seconds a 403 is taken for a ClusterRoleBinding not yet in effect."""
POLL = 1.0
"""Seconds between two looks while it is not served."""


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


async def _install(kubeconfig: str | None, file: Path, prune: bool) -> None:
    source = str(file)
    try:
        docs = load_yaml_documents(read_bytes(file, FILE_LIMITS), source)
        wanted = runtimes_to_apply(docs, source)
    except (InputError, RuntimesFileError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    api = await new_api_client(kubeconfig, qps_user_agent=FIELD_MANAGER)
    kube = Kube(api, timeout=TIMEOUT)
    try:
        owned = await _owned(kube)
        todo = plan(wanted, owned, prune)
        for runtime in todo.apply:
            await kube.apply(runtime, FIELD_MANAGER, force=True)
            typer.echo(f"clustertrainingruntime/{runtime['metadata']['name']} applied")
        for name in todo.prune:
            await kube.delete(CLUSTER_TRAINING_RUNTIMES, None, name)
            typer.echo(f"clustertrainingruntime/{name} deleted (no longer enabled)")
        typer.echo(f"{len(todo.apply)} applied, {len(todo.prune)} deleted")
    finally:
        await api.close()


async def _owned(kube: Kube) -> list[dict[str, Any]]:
    """The runtimes carrying the installer's label, once the API serves them to us. A hook Job
    may start a moment before what the same install created takes effect:

    - the CRD is not established yet. A list of a collection is never "not found" but while
      its resource is not served: kube-apiserver answers a plain 404 while the group is
      unknown, and a 404 Status once another CRD of the group (TrainJob's) is established;
    - the ClusterRoleBinding is not in the authorizer's cache yet: 403 for
      :data:`PERMITTED_WITHIN` seconds (a refusal that lasts is reported as one)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    said: set[int] = set()
    while True:
        try:
            owned, _ = await kube.list(CLUSTER_TRAINING_RUNTIMES, label_selector=SELECTOR)
            return owned
        except APIError as err:
            waited = loop.time() - started
            if err.status == 404 and waited < SERVED_WITHIN:
                wait = "the API server to serve clustertrainingruntimes"
            elif err.status == 403 and waited < PERMITTED_WITHIN:
                wait = "the ServiceAccount's permissions to take effect"
            else:
                raise
            if err.status not in said:
                typer.echo(f"waiting for {wait}")
                said.add(err.status)
        await asyncio.sleep(POLL)


async def _uninstall(kubeconfig: str | None) -> None:
    api = await new_api_client(kubeconfig, qps_user_agent=FIELD_MANAGER)
    kube = Kube(api, timeout=TIMEOUT)
    try:
        owned = await _owned(kube)
        for runtime in owned:
            name = runtime["metadata"]["name"]
            await kube.delete(CLUSTER_TRAINING_RUNTIMES, None, name)
            typer.echo(f"clustertrainingruntime/{name} deleted")
        typer.echo(f"{len(owned)} deleted")
    finally:
        await api.close()


def _run(coro: Coroutine[Any, Any, None]) -> None:
    try:
        asyncio.run(coro)
    except KubeconfigError as exc:
        raise _fail(str(exc)) from None
    except APIError as exc:
        raise _fail(f"the API server refused: {exc}") from None
    except (TimeoutError, OSError) as exc:
        raise _fail(f"cannot reach the API server: {exc or type(exc).__name__}") from None


@app.command()
def install(
    file: Annotated[
        Path,
        typer.Option(
            "--file", "-f", readable=False, help="YAML stream of ClusterTrainingRuntimes to apply."
        ),
    ],
    prune: Annotated[
        bool,
        typer.Option(
            "--prune/--no-prune",
            help="Delete the runtimes this installer applied before that FILE no longer holds.",
        ),
    ] = False,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Server-side apply every ClusterTrainingRuntime of FILE (field manager
    kubeflow-trainer-runtimes-installer, forced), labelled
    trainer.kubeflow.org/managed-by=runtimes-installer, one line each. Exits 2 naming the
    document and field when FILE holds anything else (nothing is sent), 1 when the API server
    refuses or cannot be reached."""
    _run(_install(kubeconfig, file, prune))


@app.command()
def uninstall(kubeconfig: KubeconfigOption = None) -> None:
    """Delete every ClusterTrainingRuntime labelled
    trainer.kubeflow.org/managed-by=runtimes-installer (what ``install`` applied), one line
    each. TrainJobs that refer to them stay; new ones are refused until a runtime of that name
    exists again."""
    _run(_uninstall(kubeconfig))
