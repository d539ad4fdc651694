"""``trainer dashboard``: serve the dashboard (docs/dashboard.md) for a cluster, read with the
user's kubeconfig, until SIGINT/SIGTERM. ``trainer up`` and ``trainer run --dashboard`` start
the same server beside the local plane through :func:`start_dashboard`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import typer

from trainer.cli.signals import stop_on_signals
from trainer.dashboard.server import Dashboard
from trainer.dashboard.watch.cache import ClusterCache
from trainer.kube.client import KubeconfigError, is_loopback, new_api_client
from trainer.kube.kubeconfig import context_namespace, default_path
from trainer.kube.rest import APIError, Kube
from trainer.machinery.pyexec import module_command, module_env
from trainer.observability.logging import setup_logging

LOOPBACK = "127.0.0.1"
LEAN_ENV = "TRAINER_DASHBOARD_LEAN"
"""Set in the lean process :func:`reexec_lean` starts, so it does not start another."""


def reexec_lean() -> None:
    """Replace this process by ``python -m trainer.cli.dashboard_main`` with the same
    arguments, when it is the ``trainer`` command itself running ``dashboard`` (not a test's
    in-process call, not the lean process). See :mod:`trainer.cli.dashboard_main`."""
    if os.environ.get(LEAN_ENV) == "1" or sys.argv[1:2] != ["dashboard"] or not sys.executable:
        return
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    entry = spec.name if spec is not None else os.path.basename(sys.argv[0])
    if entry not in ("trainer.cli.main", "trainer"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # Not from the working directory (trainer/machinery/pyexec.py): the lean entry point is our
    # own code.
    argv = module_command("trainer.cli.dashboard_main", *sys.argv[2:])
    os.execve(sys.executable, argv, module_env({**os.environ, LEAN_ENV: "1"}))


def address_warning(address: str) -> str | None:
    """The warning printed when the dashboard listens beyond this machine."""
    if is_loopback(f"http://{address}" if ":" not in address else f"http://[{address}]"):
        return None
    return (
        f"warning: the dashboard listens on {address}, not only on this machine: anyone who "
        "can reach it and learns the URL's token acts with your kubeconfig's credentials; "
        "traffic is plain HTTP (use an SSH tunnel or a TLS proxy)"
    )


def report_waiting(cache: ClusterCache, echo: Callable[[str], None]) -> None:
    """Say now whether the dashboard waits for the Trainer CRDs, and later when it starts or
    stops waiting (an install applied, or removed, while it runs: docs/dashboard.md)."""
    was = cache.waiting

    def changed() -> None:
        nonlocal was
        now = cache.waiting
        if (now is None) != (was is None):
            echo(f"dashboard: {now}" if now else "dashboard: the Kubeflow Trainer CRDs are served")
        was = now

    if was:
        echo(f"dashboard: {was}; the page shows their objects once they are")
    cache.add_status_handler(changed)


async def start_dashboard(
    kube: Kube,
    namespace: str | None,
    *,
    address: str = LOOPBACK,
    port: int = 0,
    allow_actions: bool = False,
    allowed_hosts: frozenset[str] = frozenset(),
    echo: Callable[[str], None] = print,
) -> Dashboard:
    """Start a dashboard on the running loop and print its URL (and the address warning)."""
    warning = address_warning(address)
    if warning:
        echo(warning)
    dashboard = Dashboard(
        kube,
        namespace,
        address=address,
        port=port,
        allow_actions=allow_actions,
        allowed_hosts=allowed_hosts,
        cluster=str(kube.api.configuration.host),
    )
    await dashboard.start()
    for resource, why in sorted(dashboard.cache.unavailable.items()):
        echo(f"warning: the dashboard cannot list {resource} ({why}): not shown")
    report_waiting(dashboard.cache, echo)
    mode = "actions enabled" if allow_actions else "read-only"
    echo(f"dashboard: {dashboard.url}  ({mode}; the token in the URL is the key, keep it private)")
    return dashboard


@dataclass(frozen=True)
class DashboardOptions:
    """The dashboard ``trainer up`` / ``trainer run --dashboard`` serve beside the plane."""

    port: int = 0
    allow_actions: bool = False


class DashboardPortError(Exception):
    """The dashboard beside the local plane could not listen on ``--dashboard-port``."""


async def beside_plane(
    kube: Kube, stop: asyncio.Event, options: DashboardOptions, echo: Callable[[str], None]
) -> asyncio.Task[None]:
    """Start a dashboard of every namespace of the local plane (on 127.0.0.1) and return a
    task that stops it when ``stop`` is set (the plane's own stop event)."""
    try:
        board = await start_dashboard(
            kube, None, port=options.port, allow_actions=options.allow_actions, echo=echo
        )
    except OSError as err:
        raise DashboardPortError(
            f"--dashboard-port {options.port}: {err.strerror or err}"
        ) from None

    async def until_stopped() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await stop.wait()
        await board.stop()

    return asyncio.create_task(until_stopped(), name="dashboard")


async def _main(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    address: str,
    port: int,
    allow_actions: bool,
    allowed_hosts: frozenset[str],
) -> int:
    api = await new_api_client(kubeconfig, context=context)
    try:
        kube = Kube(api)
        try:
            dashboard = await start_dashboard(
                kube,
                namespace,
                address=address,
                port=port,
                allow_actions=allow_actions,
                allowed_hosts=allowed_hosts,
                echo=lambda line: print(line, flush=True),
            )
        except APIError as err:
            print(f"error: cannot list TrainJobs with this kubeconfig: {err}", file=sys.stderr)
            return 1
        except OSError as err:
            print(f"error: --address/--port {address}:{port}: {err.strerror}", file=sys.stderr)
            return 2
        stop = stop_on_signals()
        try:
            await stop.wait()
        finally:
            await dashboard.stop()
        return 0
    finally:
        await api.close()


def _namespace(
    kubeconfig: str | None, context: str | None, namespace: str | None, all_namespaces: bool
) -> str | None:
    if all_namespaces:
        return None
    if namespace:
        return namespace
    paths = kubeconfig or os.environ.get("KUBECONFIG") or str(default_path())
    try:
        return context_namespace(paths, context) or "default"
    except Exception:  # unreadable here means new_api_client reports it, naming the file
        return "default"


def dashboard(
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)."),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context to use.")
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Namespace to show (default: the context's)."),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Show every namespace.")
    ] = False,
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 0,
    address: Annotated[
        str,
        typer.Option(help="Address to listen on; anything but loopback prints a warning."),
    ] = LOOPBACK,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A host name the browser may use besides localhost and IP addresses "
            "(repeatable); other Host headers are refused (DNS rebinding).",
        ),
    ] = None,
    allow_actions: Annotated[
        bool,
        typer.Option(
            "--allow-actions",
            help="Enable suspend, resume and delete (confirmed, CSRF-protected, done with the "
            "kubeconfig's credentials). Read-only without it.",
        ),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve a live web dashboard of the cluster's TrainJobs, read with your kubeconfig.

    Prints a URL with a random access token; open it in a browser. Listens on 127.0.0.1 unless
    --address says otherwise. Exit status: 0 after SIGINT/SIGTERM, 1 when the kubeconfig's user
    cannot list TrainJobs, 2 for bad options or an unusable kubeconfig (one line)."""
    if namespace and all_namespaces:
        typer.echo("error: --namespace and --all-namespaces exclude each other", err=True)
        raise typer.Exit(2)
    if not 0 <= port <= 65535:
        typer.echo(f"error: --port {port}: must be 0..65535", err=True)
        raise typer.Exit(2)
    reexec_lean()
    setup_logging("DEBUG" if verbose else "WARNING", "text")
    scope = _namespace(kubeconfig, context, namespace, all_namespaces)
    try:
        code = asyncio.run(
            _main(
                kubeconfig,
                context,
                scope,
                address,
                port,
                allow_actions,
                frozenset(allow_host or ()),
            )
        )
    except KubeconfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)
