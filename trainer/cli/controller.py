"""``trainer controller``: the TrainJob controller and its admission webhook."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from trainer.cli.process import ProcessOptions, run_controller
from trainer.cli.signals import stop_on_signals
from trainer.controller.config import ConfigError, load_config, parse_feature_gates
from trainer.kube.client import KubeconfigError, new_api_client
from trainer.observability.logging import parse_level, setup_logging


async def _main(
    kubeconfig: str | None, config_path: str | None, gates: dict[str, bool], webhook: bool
) -> None:
    config = load_config(config_path)
    if gates:
        config = config.with_feature_gates(gates)
    api = await new_api_client(kubeconfig)
    stop = stop_on_signals()
    try:
        await run_controller(api, config, stop, options=ProcessOptions(webhook=webhook))
    finally:
        await api.close()


def controller(
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="kubeconfig (default: $KUBECONFIG, then the in-cluster config)."),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="Configuration file (config.trainer.kubeflow.org/v1alpha1 Configuration, "
            "strictly decoded). Without it the defaults apply and leader election is off.",
        ),
    ] = None,
    feature_gates: Annotated[
        str,
        typer.Option("--feature-gates", help="Gates to override, e.g. TrainJobStatus=true."),
    ] = "",
    webhook: Annotated[
        bool,
        typer.Option("--webhook/--no-webhook", help="Serve the admission webhook in this process."),
    ] = True,
    log_level: Annotated[
        str,
        typer.Option(
            "--zap-log-level", "--log-level", help="info, debug, or a zap level (2 = debug)."
        ),
    ] = "info",
    log_format: Annotated[str, typer.Option(help="text or json.")] = "text",
) -> None:
    """Run the TrainJob controller until SIGTERM: watch caches on every replica, reconcilers on
    the Lease holder, the webhook, health probes and metrics. Exits 2 with one line for bad
    options, an unusable --config file or kubeconfig."""
    if log_format not in ("text", "json"):
        typer.echo(f"error: --log-format must be text or json, not {log_format!r}", err=True)
        raise typer.Exit(2)
    try:
        gates = parse_feature_gates(feature_gates) if feature_gates else {}
    except ValueError as exc:
        typer.echo(f"error: --feature-gates: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        parse_level(log_level)
    except ValueError as exc:
        typer.echo(f"error: --zap-log-level: {exc}", err=True)
        raise typer.Exit(2) from None
    # The option's text, not the parsed number: setup_logging reads an integer as zap's
    # verbosity (where 20, logging's INFO, would mean debug).
    setup_logging(log_level, "json" if log_format == "json" else "text")
    try:
        asyncio.run(_main(kubeconfig, config, gates, webhook))
    except (ConfigError, KubeconfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
