"""``trainer apiserver``: run the embedded Kubernetes API server in the foreground."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from trainer.cli.signals import stop_on_signals
from trainer.cli.statefile import ResetDamagedOption, StateFileOption, refuse
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.statefile import StateFileError

log = logging.getLogger("trainer.apiserver")


async def _serve(
    port: int,
    kubeconfig: Path,
    state_file: str | None,
    token: str | None,
    with_crds: bool,
    reset_damaged_state: bool = False,
) -> None:
    try:
        server = APIServer(
            port=port, state_file=state_file, token=token, reset_damaged_state=reset_damaged_state
        )
    except ValueError as exc:
        typer.echo(f"error: --token: {exc}", err=True)
        raise typer.Exit(2) from None
    await server.start()
    if with_crds:
        await _install_crds(server)
    server.write_kubeconfig(str(kubeconfig))
    typer.echo(f"API server listening on {server.url}")
    typer.echo(
        "the kubeconfig holds the server's CA and the administrator's bearer token (file mode "
        "0600): anyone who can read it controls this API server"
    )
    typer.echo(f"kubeconfig written to {kubeconfig}: export KUBECONFIG={kubeconfig}")
    stop = stop_on_signals()
    await stop.wait()
    typer.echo("stopping")
    await server.stop()


async def _install_crds(server: APIServer) -> None:
    """The Trainer and JobSet CRDs, created through the API as the administrator (unless a
    state file holds them), before the kubeconfig is written: a client that finds the
    kubeconfig finds them served.

    The client is the REST one alone: kubernetes_asyncio is imported lean (trainer/kube/lean.py),
    so the server process does not carry its ~1,700 typed API and model classes (about 35 MB;
    hack/bench/apiserver.py measures this process's memory)."""
    from trainer.kube.lean import import_lean  # noqa: PLC0415

    import_lean()
    from trainer.cli import seed  # noqa: PLC0415
    from trainer.kube.client import new_api_client  # noqa: PLC0415
    from trainer.kube.rest import Kube  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="trainer-apiserver-") as private:
        path = os.path.join(private, "kubeconfig")
        server.write_kubeconfig(path)
        api = await new_api_client(path)
    try:
        await seed.install_crds(Kube(api))
    finally:
        await api.close()


def apiserver(
    port: Annotated[
        int, typer.Option("--port", "-p", help="Port on 127.0.0.1 (0: any free port).")
    ] = 0,
    kubeconfig: Annotated[
        Path, typer.Option("--kubeconfig", help="Where to write a kubeconfig for kubectl.")
    ] = Path("trainer-local.kubeconfig"),
    state_file: StateFileOption = None,
    reset_damaged_state: ResetDamagedOption = False,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="TRAINER_APISERVER_TOKEN",
            show_envvar=True,
            help="The administrator's bearer token clients must send (default: a random one). "
            "It is written into the kubeconfig; prefer the environment variable, as other "
            "users of the machine can see command lines.",
        ),
    ] = None,
    install_crds: Annotated[
        bool,
        typer.Option(
            "--install-crds/--no-install-crds",
            help="Serve the Trainer and JobSet CRDs from the start.",
        ),
    ] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every request.")] = False,
) -> None:
    """Run the embedded Kubernetes API server (loopback only) until SIGINT or SIGTERM.

    It speaks the real Kubernetes REST protocol over HTTPS, with a CA made at start, and
    requires a bearer token on every request but the health probes; kubectl and client
    libraries work with the kubeconfig it writes (mode 0600), which holds both. State lives in
    memory unless --state-file is given; a state file that is damaged, in use by another
    process or unusable is refused with one line on stderr and exit status 2.
    """
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        asyncio.run(_serve(port, kubeconfig, state_file, token, install_crds, reset_damaged_state))
    except StateFileError as err:
        raise refuse(err) from None
