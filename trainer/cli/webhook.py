"""``trainer webhook``: serve the admission webhook against a cluster."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer

from trainer.cli.signals import stop_on_signals
from trainer.kube.client import KubeconfigError, new_api_client
from webhooks.run import WebhookOptions, run_webhook


async def _serve(kubeconfig: str | None, options: WebhookOptions) -> None:
    api = await new_api_client(kubeconfig)
    stop = stop_on_signals()
    try:
        await run_webhook(api, options, stop)
    finally:
        await api.close()


def webhook(
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="kubeconfig to use (default: $KUBECONFIG, then in-cluster config)."),
    ] = None,
    namespace: Annotated[
        str, typer.Option(help="Namespace of the webhook Service and certificate Secret.")
    ] = "kubeflow-system",
    service: Annotated[
        str, typer.Option(help="Service name the certificate is issued for.")
    ] = "kubeflow-trainer-controller-manager",
    secret: Annotated[
        str, typer.Option(help="Secret that stores the certificates.")
    ] = "kubeflow-trainer-webhook-cert",
    host: Annotated[str, typer.Option(help="Address to listen on (default: all).")] = "",
    port: Annotated[int, typer.Option(help="HTTPS port.")] = 9443,
    cert_dir: Annotated[
        str, typer.Option(help="Directory of tls.crt / tls.key / ca.crt.")
    ] = "/tmp/k8s-webhook-server/serving-certs",
    manage_certs: Annotated[
        bool,
        typer.Option(
            "--manage-certs/--no-manage-certs",
            help="Generate, store and rotate certificates and inject the caBundle (default); "
            "with --no-manage-certs, serve the certificates found in --cert-dir (cert-manager) "
            "and reload them when they change.",
        ),
    ] = True,
    tls_min_version: Annotated[str, typer.Option(help="Minimum TLS version: 1.2 or 1.3.")] = "1.2",
) -> None:
    """Serve the validating and mutating admission webhook over HTTPS until SIGTERM.

    Exits 2 with one line for an unusable kubeconfig. It serves /healthz, /readyz and
    upstream's webhook paths:

    \b
      /mutate-trainer-kubeflow-org-v1alpha1-trainjob
      /validate-trainer-kubeflow-org-v1alpha1-trainjob
      /validate-trainer-kubeflow-org-v1alpha1-trainingruntime
      /validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    options = WebhookOptions(
        namespace=namespace,
        service=service,
        secret=secret,
        host=host,
        port=port,
        cert_dir=cert_dir,
        manage_certs=manage_certs,
        tls_min_version=tls_min_version,
    )
    try:
        asyncio.run(_serve(kubeconfig, options))
    except KubeconfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
