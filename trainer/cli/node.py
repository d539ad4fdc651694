"""``trainer node``: the local executor's node role alone, as a Node of the cluster a
kubeconfig names (docs/local-plane.md, "A node of a real cluster")."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import tempfile
from ipaddress import IPv4Network
from pathlib import Path
from typing import Annotated

import typer

from trainer.cli.run import AllowExposedPortsOption, NodeConfigOption, _node_config
from trainer.cli.signals import stop_on_signals
from trainer.kube.client import KubeconfigError
from trainer.local.executor.api import executor_kube
from trainer.local.executor.node.config import NodeConfig
from trainer.local.executor.nodeagent import NodeAgent, NodeAgentError, check_node_name
from trainer.local.executor.sandbox.podaddress import PodNetworkError, check_local, parse_network
from trainer.local.executor.sandbox.ssh import private_parent
from trainer.observability.logging import setup_logging

log = logging.getLogger("trainer.node")


async def _serve(
    kubeconfig: Path | None,
    node_name: str,
    state_dir: Path | None,
    workdir: Path,
    node_config: NodeConfig | None,
    allow_exposed_ports: bool,
    pod_network: IPv4Network | None,
) -> None:
    temporary = None
    if state_dir is None:
        # Not under /tmp: OpenSSH's StrictModes refuses an MPI pod's authorized_keys there.
        temporary = tempfile.TemporaryDirectory(
            prefix=f"trainer-node-{node_name}-", dir=private_parent()
        )
        state_dir = Path(temporary.name)
    state_dir.mkdir(parents=True, exist_ok=True)
    kube = await executor_kube(str(kubeconfig) if kubeconfig is not None else "")
    try:
        agent = NodeAgent(
            kube,
            node_name=node_name,
            state_dir=state_dir,
            workdir=workdir,
            node_config=node_config,
            allow_exposed_ports=allow_exposed_ports,
            pod_network=pod_network,
        )
        stop = stop_on_signals()
        await agent.register()
        typer.echo(f"node {node_name} registered with {agent.server}")
        typer.echo(
            f"container logs are kept in {agent.log_dir} (kubectl logs cannot read them: "
            "this node serves no kubelet endpoint)"
        )
        await agent.run(stop)
        typer.echo("stopping")
    finally:
        await kube.api.close()
        if temporary is not None:
            temporary.cleanup()


def node(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            help="The cluster to join (default: $KUBECONFIG, then ~/.kube/config). Its user "
            "needs a kubelet's rights: a node's credentials (system:node:NAME in group "
            "system:nodes) or an administrator's.",
        ),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option(
            "--node-name",
            help="The Node to register and run the pods of (default: this host's name, in "
            "lower case, as a kubelet's).",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Where pods' volumes, sandboxes and container logs live (default: a "
            "temporary directory removed at exit). MPI pods need one that no other user can "
            "write above (not under /tmp): OpenSSH refuses their keys otherwise.",
        ),
    ] = None,
    workdir: Annotated[
        Path,
        typer.Option(
            "--workdir", help="Working directory of containers whose workingDir is unset."
        ),
    ] = Path("."),
    node_config: NodeConfigOption = None,
    allow_exposed_ports: AllowExposedPortsOption = False,
    pod_cidr: Annotated[
        str | None,
        typer.Option(
            "--pod-cidr",
            help="Give each pod an address of this IPv4 network, local to this host (as root: "
            "ip route add local CIDR dev lo), and publish its declared TCP ports there, so the "
            "cluster reaches them through EndpointSlices (a webhook's Service). Default: pods "
            "report 127.0.0.1.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run this host as a Node of a Kubernetes cluster until SIGINT/SIGTERM: register the Node,
    renew its Lease in kube-node-lease, run the pods the cluster's scheduler binds to it as
    sandboxed local processes (no image is pulled: the host's tools run) and report their
    status, as a kubelet does.

    Container logs stay in files under the state directory: kube-apiserver reads logs from a
    kubelet's HTTPS endpoint, which this node does not serve. Exits 2 with one line for an
    unusable kubeconfig, node name or --node-config, or a server that refuses the Node."""
    name = (node_name or socket.gethostname()).lower()
    try:
        check_node_name(name)
    except NodeAgentError as exc:
        typer.echo(f"error: --node-name: {exc}", err=True)
        raise typer.Exit(2) from None
    config = _node_config(node_config)
    network = None
    if pod_cidr is not None:
        try:
            network = parse_network(pod_cidr)
            check_local(network)
        except PodNetworkError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
    setup_logging("DEBUG" if verbose else "INFO", "text")
    try:
        serving = _serve(
            kubeconfig, name, state_dir, workdir.resolve(), config, allow_exposed_ports, network
        )
        asyncio.run(serving)
    except (KubeconfigError, NodeAgentError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    sys.exit(0)
