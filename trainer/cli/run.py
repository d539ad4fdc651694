"""``trainer run`` and ``trainer up``: a TrainJob end to end on the local control plane."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from trainer.api import constants as c
from trainer.api.load import Document
from trainer.cli.catalog import with_namespace
from trainer.cli.checks import check_documents, print_outcomes
from trainer.cli.dashboard import DashboardOptions, DashboardPortError, beside_plane
from trainer.cli.files import read_documents
from trainer.cli.follow import PLURALS, Printer, apply_all, follow
from trainer.cli.localplane import start_local_plane
from trainer.cli.logfollow import LogFollower
from trainer.cli.signals import stop_on_signals
from trainer.cli.statefile import ResetDamagedOption, StateFileOption, refuse
from trainer.controller.config import parse_feature_gates
from trainer.kube import resources as r
from trainer.kube.client import KubeconfigError, new_api_client
from trainer.kube.rest import APIError, Kube
from trainer.local.apiserver.statefile import StateFileError
from trainer.local.executor.node.config import NodeConfig, NodeConfigError, load_node_config
from trainer.local.executor.roles import ROLES, RoleError, parse_roles
from trainer.local.executor.simulation.config import Simulation, load_simulation
from trainer.machinery.safeload import InputError
from trainer.observability.logging import setup_logging

DEFAULT_READY_TIMEOUT = 120.0
"""``trainer run --ready-timeout``: sshd starts in well under a second locally."""


def _preflight(
    docs: list[Document],
    files: list[str],
    strict_fields: bool,
    cluster_runtimes: list[Document] | None = None,
) -> int:
    """``trainer validate``'s checks on every object before anything starts: 1 (with
    validate's report) when any object is invalid, 2 when one is not a TrainJob or a runtime
    or no TrainJob is given, else 0. TrainJobs are checked against the built-in runtimes, or
    ``cluster_runtimes`` (those of the cluster a run goes to)."""
    if cluster_runtimes is None:
        outcomes = check_documents(docs, [], strict_fields=strict_fields)
    else:
        outcomes = check_documents(
            docs,
            cluster_runtimes,
            strict_fields=strict_fields,
            with_builtins=False,
            catalog_source="on the cluster or given with -f",
        )
    failed = [o for o in outcomes if not o.ok]
    if failed:
        print_outcomes(outcomes, only_invalid=True)
        typer.echo(
            f"error: {len(failed)} of {len(outcomes)} objects are invalid; nothing was applied",
            err=True,
        )
        return 1
    for doc in docs:
        if str(doc.data.get("kind")) not in PLURALS:
            typer.echo(
                f"error: {doc.label}: {doc.data.get('kind')} is not a TrainJob or a runtime; "
                "`trainer run` applies only those",
                err=True,
            )
            return 2
    if not any(doc.data.get("kind") == c.KIND_TRAINJOB for doc in docs):
        typer.echo(f"error: {', '.join(files)}: no TrainJob found", err=True)
        return 2
    return 0


async def _run(
    files: list[str],
    runtimes: list[str],
    namespace: str,
    timeout: float | None,
    gates: dict[str, bool] | None = None,
    strict_fields: bool = True,
    dashboard: DashboardOptions | None = None,
    ready_timeout: float | None = None,
    allow_exposed_ports: bool = False,
    node_config: NodeConfig | None = None,
    simulation: Simulation | None = None,
) -> int:
    printer = Printer()
    try:
        runtime_docs = read_documents(runtimes)
        if runtimes and not runtime_docs:
            raise InputError(", ".join(runtimes), "no objects found")
        docs = runtime_docs + read_documents(files)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    docs = with_namespace(docs, namespace)
    refused = _preflight(docs, files, strict_fields)
    if refused:
        return refused
    printer.line("starting the local control plane (API server, webhook, controller, executor)")
    plane = await start_local_plane(
        work_dir=Path.cwd(),
        on_log=printer.log,
        feature_gates=gates,
        ready_timeout=ready_timeout,
        allow_exposed_ports=allow_exposed_ports,
        node_config=node_config,
        simulation=simulation,
    )
    stop = stop_on_signals()
    try:
        printer.line(f"API server at {plane.server.url}")
        if dashboard is not None:
            plane.tasks.append(await beside_plane(plane.kube, plane.stop, dashboard, printer.line))
        try:
            jobs = await apply_all(plane.kube, docs, namespace)
        except APIError as exc:
            printer.line(f"rejected: {exc.message}")
            return 1
        return await _follow_or_interrupt(
            follow(plane.kube, jobs, printer, timeout),
            stop,
            printer,
            "interrupted; stopping",
            plane_stopped=plane.stop,
        )
    finally:
        await plane.close()


async def _follow_or_interrupt(
    following: Coroutine[Any, Any, int],
    stop: asyncio.Event,
    printer: Printer,
    interrupted: str,
    *,
    plane_stopped: asyncio.Event | None = None,
) -> int:
    """The exit code ``following`` ends with, or 130 (saying ``interrupted``) once ``stop`` is
    set by SIGINT/SIGTERM first, or 1 once ``plane_stopped`` is set first: the local plane's
    manager stopped on its own (a runnable failed), so nothing would move the TrainJob on;
    closing the plane then raises why."""
    task = asyncio.create_task(following)
    stopper = asyncio.create_task(stop.wait())
    ended = asyncio.create_task(plane_stopped.wait()) if plane_stopped is not None else None
    waits = {task, stopper} if ended is None else {task, stopper, ended}
    done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in (stopper, ended):
        if waiting is not None and waiting not in done:
            waiting.cancel()
    if task in done:
        return task.result()
    task.cancel()
    if stopper in done:
        printer.line(interrupted)
        return 130
    printer.line("the local control plane stopped on its own; stopping")
    return 1


def _cluster_run(
    kubeconfig: Path, files: list[str], runtimes: list[str], namespace: str, timeout: float | None
) -> int:
    """Read and check the files as a local run does, then :func:`_run_on_cluster`."""
    try:
        docs = read_documents(runtimes) + read_documents(files)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    docs = with_namespace(docs, namespace)
    return asyncio.run(_run_on_cluster(kubeconfig, docs, files, namespace, timeout))


async def _cluster_runtimes(kube: Kube, namespace: str) -> list[Document]:
    """The runtimes a TrainJob in ``namespace`` of the cluster may name."""
    found: list[Document] = []
    for gvr, ns in ((r.CLUSTER_TRAINING_RUNTIMES, None), (r.TRAINING_RUNTIMES, namespace)):
        items, _ = await kube.list(gvr, ns)
        for item in items:
            item.setdefault("apiVersion", c.API_VERSION)
            item.setdefault("kind", gvr.kind)
            found.append(Document(f"cluster {gvr.kind}/{item['metadata']['name']}", 0, item))
    return found


async def _run_on_cluster(
    kubeconfig: Path, docs: list[Document], files: list[str], namespace: str, timeout: float | None
) -> int:
    """``trainer run --kubeconfig``: the same objects and progress on the cluster the
    kubeconfig names (a plane of ``trainer up``, or any cluster with Trainer installed), pod
    logs followed through the API. The TrainJobs stay there when it exits."""
    printer = Printer()
    try:
        api = await new_api_client(str(kubeconfig))
    except KubeconfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    kube = Kube(api)
    try:
        try:
            runtimes = await _cluster_runtimes(kube, namespace)
        except (APIError, OSError) as exc:
            typer.echo(f"error: cannot list the cluster's runtimes: {exc}", err=True)
            return 2
        refused = _preflight(docs, files, strict_fields=True, cluster_runtimes=runtimes)
        if refused:
            return refused
        printer.line(f"cluster: {api.configuration.host}")
        try:
            jobs = await apply_all(kube, docs, namespace)
        except APIError as exc:
            printer.line(f"rejected: {exc.message}")
            return 1
        logs = LogFollower(kube, jobs, printer.log)
        return await _follow_or_interrupt(
            follow(kube, jobs, printer, timeout, logs),
            stop_on_signals(),
            printer,
            "interrupted; the TrainJobs stay on the cluster",
        )
    finally:
        await api.close()


AllowExposedPortsOption = Annotated[
    bool,
    typer.Option(
        "--allow-exposed-ports",
        help="Where pods cannot get a network sandbox (namespaces refused), run elastic "
        "(c10d) TrainJobs anyway, their rendezvous store open to other users and the network "
        "(docs/local-plane.md, 'The network sandbox').",
    ),
]

NodeConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--node-config",
        help="YAML declaring the local node's GPUs (instead of nvidia-smi), capacity, reserved "
        "capacity, labels, taints and whether JobSets are scheduled all or nothing "
        "(docs/local-plane.md, 'The node' and 'Scheduling').",
    ),
]


SimulateOption = Annotated[
    Path | None,
    typer.Option(
        "--simulate",
        help="YAML describing simulated nodes (templates: count, capacity, GPUs, labels, "
        "taints, zones) whose pods run no process but move through their lifecycle by "
        "stages (duration, jitter, failure probability), beside or instead of this host's "
        "node (docs/simulation.md).",
    ),
]


T = TypeVar("T")


def _config_file(path: Path | None, option: str, load: Callable[[Path], T]) -> T | None:
    """An option's file, checked before anything starts (exit 2 naming the field)."""
    if path is None:
        return None
    try:
        return load(path)
    except NodeConfigError as exc:  # SimulationError is one too
        typer.echo(f"error: {option}: {exc}", err=True)
        raise typer.Exit(2) from None


def _simulation(path: Path | None) -> Simulation | None:
    return _config_file(path, "--simulate", load_simulation)


def _node_config(path: Path | None) -> NodeConfig | None:
    return _config_file(path, "--node-config", load_node_config)


FEATURE_GATES_HELP = (
    "Controller feature gates, e.g. TrainJobStatus=true: the status server runs on 127.0.0.1 "
    "and trainer pods get KUBEFLOW_TRAINER_SERVER_URL, a token and the CA to report progress "
    "into status.trainerStatus (docs/status-server.md)."
)


WITHOUT_HELP = (
    "Switch off one of the executor's roles, for the real program to play it against the "
    f"kubeconfig: {', '.join(ROLES)} (repeatable, or comma-separated; docs/local-plane.md, "
    '"Running the real programs against the plane").'
)


def _gates(text: str | None) -> dict[str, bool]:
    try:
        return parse_feature_gates(text) if text else {}
    except ValueError as exc:
        typer.echo(f"error: --feature-gates: {exc}", err=True)
        raise typer.Exit(2) from None


def run(
    files: Annotated[
        list[str], typer.Option("--filename", "-f", help="TrainJob (and runtime) YAML; repeatable.")
    ],
    runtimes: Annotated[
        list[str] | None,
        typer.Option("--runtime", "-r", help="Runtime files to apply first; repeatable."),
    ] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace for objects without one.")
    ] = "default",
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds.")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log the control plane's own messages.")
    ] = False,
    feature_gates: Annotated[
        str | None, typer.Option("--feature-gates", help=FEATURE_GATES_HELP)
    ] = None,
    strict_fields: Annotated[
        bool,
        typer.Option(
            "--strict-fields/--no-strict-fields",
            help="As with `trainer validate`: fields unknown to the schema are errors "
            "(default), or dropped as the API server prunes them.",
        ),
    ] = True,
    ready_timeout: Annotated[
        float,
        typer.Option(
            "--ready-timeout",
            min=0.1,
            help="Fail a TrainJob whose MPI launcher waited this many seconds for its node "
            "pods' sshd to be Ready (JobSet dependsOn), naming the pods not Ready. Local "
            "runs only: JobSet itself waits forever. A TrainJob that can never fit this node "
            "ends the run at once with exit code 2 (docs/local-plane.md, 'Scheduling').",
        ),
    ] = DEFAULT_READY_TIMEOUT,
    allow_exposed_ports: AllowExposedPortsOption = False,
    node_config: NodeConfigOption = None,
    simulate: SimulateOption = None,
    dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard", help="Serve the dashboard (read-only) while it runs; prints its URL."
        ),
    ] = False,
    dashboard_port: Annotated[
        int, typer.Option(help="The dashboard's port on 127.0.0.1 (0: any).")
    ] = 0,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="Run on the cluster this kubeconfig names (a `trainer up` plane, or any "
            "cluster with Trainer installed) instead of starting a local plane: the objects "
            "are created there, progress and pod logs followed through its API, and they stay "
            "there afterwards.",
        ),
    ] = None,
) -> None:
    """Run TrainJobs end to end on a local control plane and exit with their result.

    Starts the embedded API server, the admission webhook (HTTPS, registered through webhook
    configurations), the controller and the executor (pods as local processes); applies the
    built-in runtimes, --runtime files and the given files; shows progress and streams pod
    logs prefixed by pod name. Every object is first checked as `trainer validate` checks it;
    nothing starts unless all pass. Exit status: 0 Complete, 1 Failed, rejected or invalid
    (validate's report), 2 unreadable input, not a TrainJob or runtime, or timeout, 130
    interrupted.
    """
    gates = _gates(feature_gates)
    node = _node_config(node_config)
    simulation = _simulation(simulate)
    setup_logging("DEBUG" if verbose else "WARNING", "text")
    board = DashboardOptions(port=dashboard_port) if dashboard else None
    if kubeconfig is not None:
        local_only = {
            "--feature-gates": feature_gates is not None,
            "--node-config": node_config is not None,
            "--simulate": simulate is not None,
            "--allow-exposed-ports": allow_exposed_ports,
            "--dashboard": dashboard,
            "--ready-timeout": ready_timeout != DEFAULT_READY_TIMEOUT,
        }
        for option, given in local_only.items():
            if given:
                typer.echo(
                    f"error: {option} configures the local plane; with --kubeconfig the "
                    "cluster's own configuration applies",
                    err=True,
                )
                raise typer.Exit(2)
        raise typer.Exit(_cluster_run(kubeconfig, files, runtimes or [], namespace, timeout))
    try:
        code = asyncio.run(
            _run(
                files,
                runtimes or [],
                namespace,
                timeout,
                gates,
                strict_fields,
                dashboard=board,
                ready_timeout=ready_timeout,
                allow_exposed_ports=allow_exposed_ports,
                node_config=node,
                simulation=simulation,
            )
        )
    except DashboardPortError as err:
        typer.echo(f"error: {err}", err=True)
        code = 2
    raise typer.Exit(code)


async def _up(
    kubeconfig: Path,
    state_file: str | None,
    port: int,
    gates: dict[str, bool] | None = None,
    reset_damaged_state: bool = False,
    dashboard: DashboardOptions | None = None,
    allow_exposed_ports: bool = False,
    node_config: NodeConfig | None = None,
    simulation: Simulation | None = None,
    with_controller: bool = True,
    without: frozenset[str] = frozenset(),
) -> None:
    printer = Printer()
    plane = await start_local_plane(
        work_dir=Path.cwd(),
        state_file=state_file,
        reset_damaged_state=reset_damaged_state,
        port=port,
        on_log=printer.log,
        feature_gates=gates,
        allow_exposed_ports=allow_exposed_ports,
        node_config=node_config,
        simulation=simulation,
        with_controller=with_controller,
        without=without,
    )
    plane.server.write_kubeconfig(str(kubeconfig))
    printer.line(f"local control plane ready: API server {plane.server.url}")
    printer.line(f"kubeconfig: {kubeconfig}  (export KUBECONFIG={kubeconfig})")
    printer.line(
        "  it holds the API server's CA and the administrator's bearer token (file mode 0600): "
        "anyone who can read it can run commands as you through the local plane"
    )
    if with_controller:
        printer.line(
            "built-in runtimes: "
            + ", ".join(
                o["metadata"]["name"]
                for o in plane.server.storage.objects(
                    c.API_VERSION, c.PLURAL_CLUSTER_TRAINING_RUNTIMES
                )
            )
        )
    else:
        printer.line(
            "no controller or webhook of its own: apply the Trainer CRDs and run a controller "
            f"against it, e.g. KUBECONFIG={kubeconfig} kubectl apply --server-side -k "
            'manifests/base/crds (docs/local-plane.md, "Without the built-in controller")'
        )
    if without:
        printer.line(
            "switched off, for other programs to play: "
            + ", ".join(role for role in ROLES if role in without)
        )
    if dashboard is not None:
        try:
            board = await beside_plane(plane.kube, plane.stop, dashboard, printer.line)
        except BaseException:
            await plane.close()
            raise
        plane.tasks.append(board)
    stop = stop_on_signals()
    try:
        # Until SIGINT or SIGTERM, or until the plane's manager stops on its own (a runnable
        # failed: closing the plane raises why).
        waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(plane.stop.wait())}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        printer.line("stopping")
    finally:
        await plane.close()


def up(
    kubeconfig: Annotated[
        Path,
        typer.Option(
            help="Where to write the kubeconfig (mode 0600: it holds the plane's credentials)."
        ),
    ] = Path("trainer-local.kubeconfig"),
    state_file: StateFileOption = None,
    reset_damaged_state: ResetDamagedOption = False,
    port: Annotated[int, typer.Option(help="API server port on 127.0.0.1 (0: any).")] = 0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    feature_gates: Annotated[
        str | None, typer.Option("--feature-gates", help=FEATURE_GATES_HELP)
    ] = None,
    dashboard: Annotated[
        bool,
        typer.Option("--dashboard/--no-dashboard", help="Serve the dashboard; prints its URL."),
    ] = True,
    dashboard_port: Annotated[
        int, typer.Option(help="The dashboard's port on 127.0.0.1 (0: any).")
    ] = 0,
    dashboard_allow_actions: Annotated[
        bool,
        typer.Option(help="Enable the dashboard's suspend, resume and delete buttons."),
    ] = False,
    allow_exposed_ports: AllowExposedPortsOption = False,
    node_config: NodeConfigOption = None,
    simulate: SimulateOption = None,
    without_controller: Annotated[
        bool,
        typer.Option(
            "--without-controller",
            help="Run no controller, webhook or built-in runtimes of the plane's own (JobSet's "
            "CRD only), for a Trainer controller of your own to run against it "
            '(docs/local-plane.md, "Without the built-in controller").',
        ),
    ] = False,
    without: Annotated[
        list[str] | None,
        typer.Option(
            "--without",
            metavar="ROLE",
            help=WITHOUT_HELP,
        ),
    ] = None,
) -> None:
    """Start the local control plane and leave it running (kubectl, the Kubeflow SDK and
    `trainer` commands work against the kubeconfig it writes) until SIGINT/SIGTERM.

    The API server serves HTTPS on 127.0.0.1 and accepts only requests with the bearer token
    in the kubeconfig (created with mode 0600, with the server's CA), which is made at random
    for each start."""
    gates = _gates(feature_gates)
    node = _node_config(node_config)
    simulation = _simulation(simulate)
    try:
        roles = parse_roles(without or [])
    except RoleError as exc:
        typer.echo(f"error: --without: {exc}", err=True)
        raise typer.Exit(2) from None
    setup_logging("DEBUG" if verbose else "INFO", "text")
    try:
        board = (
            DashboardOptions(port=dashboard_port, allow_actions=dashboard_allow_actions)
            if dashboard
            else None
        )
        asyncio.run(
            _up(
                kubeconfig,
                state_file,
                port,
                gates,
                reset_damaged_state,
                board,
                allow_exposed_ports=allow_exposed_ports,
                node_config=node,
                simulation=simulation,
                with_controller=not without_controller,
                without=roles,
            )
        )
    except StateFileError as err:
        raise refuse(err) from None
    except DashboardPortError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    sys.exit(0)
