"""``trainer runtimes install`` and ``trainer runtimes uninstall``: the Helm chart's runtimes
installer (trainer/deploy/installer.py; docs/install.md, "Installing with Helm"), run by the
chart's hook Jobs with their ServiceAccount's token, and usable by hand with a kubeconfig."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

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
"""Seconds between two attempts while an answer is worth waiting out."""
T = TypeVar("T")


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
    said: set[str] = set()
    try:
        todo = plan(wanted, await _owned(kube, said), prune)
        for runtime in todo.apply:
            await _patiently(partial(kube.apply, runtime, FIELD_MANAGER, force=True), said)
            typer.echo(f"clustertrainingruntime/{runtime['metadata']['name']} applied")
        for name in todo.prune:
            await _patiently(partial(kube.delete, CLUSTER_TRAINING_RUNTIMES, None, name), said)
            typer.echo(f"clustertrainingruntime/{name} deleted (no longer enabled)")
        typer.echo(f"{len(todo.apply)} applied, {len(todo.prune)} deleted")
    finally:
        await api.close()


async def _owned(kube: Kube, said: set[str] | None = None) -> list[dict[str, Any]]:
    """The runtimes carrying the installer's label."""
    owned, _ = await _patiently(
        lambda: kube.list(CLUSTER_TRAINING_RUNTIMES, label_selector=SELECTOR), said
    )
    return owned


def _waiting_for(err: APIError, waited: float) -> str | None:
    """What an answer means the installer is waiting for, while that is worth waiting for. A
    hook Job may start a moment before what the same install created takes effect:

    - the CRD is not established yet. A collection is never "not found" but while its
      resource is not served: kube-apiserver answers a plain 404 while the group is unknown,
      and a 404 Status once another CRD of the group (TrainJob's) is established;
    - its storage is (re)initialising (429, a CRD deleted and created again), or the server is
      busy or unreachable (429, 5xx, no answer);
    - the ClusterRoleBinding is not in the authorizer's cache yet: 403 for
      :data:`PERMITTED_WITHIN` seconds (a refusal that lasts is reported as one)."""
    if err.status == 404 and waited < SERVED_WITHIN:
        return "the API server to serve clustertrainingruntimes"
    if err.is_retryable and waited < SERVED_WITHIN:
        return f"the API server to take requests ({err})"
    if err.status == 403 and waited < PERMITTED_WITHIN:
        return "the ServiceAccount's permissions to take effect"
    return None


async def _patiently(call: Callable[[], Awaitable[T]], said: set[str] | None = None) -> T:
    """``call()``'s answer, asked again every :data:`POLL` seconds while :func:`_waiting_for`
    says the error is worth waiting out; each reason said once (``said``: those said already)."""
    said = set() if said is None else said
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        try:
            return await call()
        except APIError as err:
            wait = _waiting_for(err, loop.time() - started)
            if wait is None:
                raise
            if wait not in said:
                typer.echo(f"waiting for {wait}")
                said.add(wait)
        await asyncio.sleep(POLL)


async def _uninstall(kubeconfig: str | None) -> None:
    api = await new_api_client(kubeconfig, qps_user_agent=FIELD_MANAGER)
    kube = Kube(api, timeout=TIMEOUT)
    said: set[str] = set()
    try:
        owned = await _owned(kube, said)
        for runtime in owned:
            name = runtime["metadata"]["name"]
            await _patiently(partial(kube.delete, CLUSTER_TRAINING_RUNTIMES, None, name), said)
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
        if exc.status == 0:  # no answer came back (connection refused, reset, timed out)
            raise _fail(f"cannot reach the API server: {exc}") from None
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
