"""Running the admission webhook against a cluster: certificates kept in a Secret (or taken
from a directory), the caBundle injected into the webhook configurations, the app served over
HTTPS, all until ``stop`` is set. Used by ``trainer webhook``, ``trainer controller`` and the
local control plane."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from trainer.kube.client import ApiClient
from trainer.listeners.https_app import HttpsAppServer
from trainer.machinery.sockets import bind_socket
from webhooks.app import create_app
from webhooks.certs import (
    CertBundle,
    CertRotator,
    SecretState,
    ServerTLS,
    read_cert_dir,
    service_dns_names,
    tls_version,
    write_cert_dir,
)
from webhooks.kubecerts import SecretStore, inject_ca_bundle
from webhooks.kubelookup import Cache, KubeLookup

log = logging.getLogger(__name__)

VALIDATING_CONFIG = "validator.trainer.kubeflow.org"
MUTATING_CONFIG = "defaulter.trainer.kubeflow.org"


def default_cert_dir() -> str:
    """controller-runtime's default, ``<temp dir>/k8s-webhook-server/serving-certs``: in a
    container ``/tmp/...``; on the local plane in the pod's own ``/tmp`` volume ($TMPDIR)."""
    return os.path.join(tempfile.gettempdir(), "k8s-webhook-server", "serving-certs")


@dataclass
class WebhookOptions:
    namespace: str = "kubeflow-system"
    service: str = "kubeflow-trainer-controller-manager"
    secret: str = "kubeflow-trainer-webhook-cert"
    host: str = ""
    port: int = 9443
    cert_dir: str = field(default_factory=default_cert_dir)
    manage_certs: bool = True
    extra_hosts: Sequence[str] = ()
    """More names or IPs for the serving certificate (127.0.0.1 for the local control plane)."""
    validating_configs: Sequence[str] = (VALIDATING_CONFIG,)
    mutating_configs: Sequence[str] = (MUTATING_CONFIG,)
    tls_min_version: str = "VersionTLS12"
    tls_ciphers: str | None = None
    """OpenSSL cipher list for TLS 1.2 and below (None: the library's defaults)."""
    alpn_protocols: Sequence[str] = ("http/1.1",)
    check_interval: timedelta | None = None
    runtime_cache: Cache | None = None


@dataclass
class RunningWebhook:
    """Handles on a started webhook: its port, TLS and certificate state."""

    port: int
    tls: ServerTLS
    rotator: CertRotator
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ca_bundle(self) -> bytes | None:
        return self.rotator.serving.ca_cert if self.rotator.serving else None


async def run_webhook(
    api: ApiClient,
    options: WebhookOptions,
    stop: asyncio.Event,
    started: asyncio.Future[RunningWebhook] | None = None,
) -> None:
    """Serve until ``stop`` is set; ``started`` resolves once certificates are in place and
    the server accepts connections."""
    tls = ServerTLS(
        min_version=tls_version(options.tls_min_version),
        ciphers=options.tls_ciphers,
        alpn_protocols=options.alpn_protocols,
    )
    hosts = [*service_dns_names(options.service, options.namespace), *options.extra_hosts]
    store = SecretStore(api, options.namespace, options.secret)
    cert_dir = Path(options.cert_dir)

    async def read_secret() -> SecretState | None:
        found = await store.read()
        return SecretState(found[0], found[1]) if found else None

    async def write_files(bundle: CertBundle) -> None:
        write_cert_dir(cert_dir, bundle)

    async def read_files() -> tuple[bytes, bytes] | None:
        return read_cert_dir(cert_dir)

    async def inject(ca_bundle: bytes) -> None:
        await inject_ca_bundle(api, ca_bundle, options.validating_configs, options.mutating_configs)

    rotator = CertRotator(
        hosts=hosts,
        reload=tls.reload,
        manage=options.manage_certs,
        read_secret=read_secret if options.manage_certs else None,
        write_secret=store.write if options.manage_certs else None,
        inject_ca_bundle=inject if options.manage_certs else None,
        write_files=write_files if options.manage_certs else None,
        read_files=read_files,
        interval=options.check_interval,
    )
    rotating = asyncio.create_task(rotator.run(stop), name="webhook-cert-rotator")
    serving: asyncio.Task[None] | None = None
    server: HttpsAppServer | None = None
    try:
        # Certificates first: the server cannot complete a handshake without them.
        ready = asyncio.create_task(rotator.ready.wait())
        await asyncio.wait({ready, rotating}, return_when=asyncio.FIRST_COMPLETED)
        if not rotator.ready.is_set():
            ready.cancel()
            await rotating  # stop was set before certificates were ready, or it failed
            return
        host = options.host or "0.0.0.0"
        app = create_app(KubeLookup(api, options.runtime_cache), ready=rotator.is_ready)
        server = HttpsAppServer(
            app,
            host,
            options.port,
            tls.context,
            sock=bind_socket(host, options.port),
            name="webhook",
        )
        serving = asyncio.create_task(server.serve(), name="webhook-server")
        await server.ready.wait()
        log.info("webhook serving on port %d", server.port)
        if started is not None and not started.done():
            started.set_result(RunningWebhook(server.port, tls, rotator))
        await stop.wait()
    finally:
        if server is not None:
            server.stop()
        rotating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rotating
        if serving is not None:
            await serving
        if server is not None:
            await server.app.state.offload.close()  # the admission worker processes
