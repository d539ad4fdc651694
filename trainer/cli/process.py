"""The controller process (``trainer controller``): watch caches on every replica, the
reconcilers only on the leader, the admission webhook and the probes on every replica,
metrics, and a graceful stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.api import constants as c
from trainer.controller.config import Configuration
from trainer.controller.leader import LeaderElector
from trainer.controller.manager import Controller
from trainer.kube.authn import RequestAuthorizer
from trainer.kube.client import ApiClient
from trainer.kube.leases import KubeLeaseClient
from trainer.kube.ratelimit import RateLimiter
from trainer.kube.rest import Kube
from trainer.observability.metrics import (
    Authorize,
    HealthChecks,
    Metrics,
    ObservabilityServer,
    ping,
)

if TYPE_CHECKING:
    from webhooks.run import RunningWebhook

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "kubeflow-system"
TRAINJOB_GROUP_KIND = f"{c.KIND_TRAINJOB}.{c.GROUP}"
DEFAULT_CONCURRENCY = 5
STATE_INTERVAL = 10.0


def own_namespace() -> str:
    """The namespace this pod runs in (POD_NAMESPACE, the service-account file, else the
    default install namespace)."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return DEFAULT_NAMESPACE


def trainjob_state(obj: dict[str, object]) -> str:
    """The state a TrainJob is counted under in ``trainer_trainjobs``."""
    status = obj.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    return str(state or "Pending")


@dataclass
class ProcessOptions:
    webhook: bool = True
    webhook_extra_hosts: tuple[str, ...] = ()
    status_server_url: str | None = None
    """Base URL pods reach the status server at (TrainJobStatus gate); None: upstream's
    ``https://<webhookServiceName>.<namespace>.svc:<statusServer.port>``."""
    status_server_host: str = ""
    """Address the status server binds ("" = all)."""
    webhook_cert_dir: str | None = None
    """Where the webhook's serving certificate is written and read; None: upstream's
    ``/tmp/k8s-webhook-server/serving-certs`` (a Deployment's own emptyDir or Secret mount).
    The local plane passes a private directory of its own: that fixed path is shared by every
    user of a machine."""


@dataclass
class ProcessState:
    """What a running controller process exposes (to tests and local mode)."""

    health_url: str | None = None
    metrics_url: str | None = None
    controller: Controller | None = None
    metrics: Metrics | None = None
    elector: LeaderElector | None = None
    webhook_serving: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the webhook accepts connections with its certificate."""
    status_server_port: int | None = None
    status_server_serving: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the status server (TrainJobStatus gate) accepts connections."""


async def run_controller(
    api: ApiClient,
    config: Configuration,
    stop: asyncio.Event,
    *,
    options: ProcessOptions | None = None,
    ready: asyncio.Event | None = None,
    state: ProcessState | None = None,
) -> None:
    """Run until ``stop`` is set; ``ready`` is set (and ``state`` filled in) once the caches
    have synced and the probe and metrics servers listen."""
    options = options or ProcessOptions()
    state = state if state is not None else ProcessState()
    metrics = Metrics()
    kube = Kube(
        api,
        on_request=metrics.observe_api_request,
        limiter=RateLimiter(config.client_connection.qps, config.client_connection.burst),
    )
    concurrency = config.controller.group_kind_concurrency.get(
        TRAINJOB_GROUP_KIND, DEFAULT_CONCURRENCY
    )
    namespace = own_namespace()
    status_gate = config.feature_enabled(c.FEATURE_TRAINJOB_STATUS)
    certs = config.cert_management
    controller = Controller(
        kube,
        concurrency=concurrency,
        queue_metrics=metrics.queue("trainjob"),
        reconcile_metrics=metrics.reconciler("trainjob"),
        on_ttl_deletion=metrics.observe_ttl_deletion,
        feature_gates={**config.feature_gates, c.FEATURE_TRAINJOB_STATUS: status_gate},
        status_server_url=options.status_server_url
        or f"https://{certs.webhook_service_name}.{namespace}.svc:{config.status_server.port}",
        status_server_secret=(namespace, certs.webhook_secret_name),
    )
    liveness = HealthChecks()
    liveness.add("ping", ping)
    readiness = HealthChecks()
    readiness.add("ping", ping)

    def caches_synced() -> None:
        if not all(inf.has_synced for inf in controller.informers() if not inf.optional):
            raise RuntimeError("watch caches are not synced")

    readiness.add("caches", caches_synced)
    tasks: list[asyncio.Task[None]] = []
    servers: list[ObservabilityServer] = []
    webhook_started: asyncio.Future[RunningWebhook] = asyncio.get_running_loop().create_future()
    try:
        if options.webhook:
            tasks.append(
                asyncio.create_task(
                    _webhook(
                        api,
                        config,
                        namespace,
                        stop,
                        readiness,
                        options,
                        controller,
                        state,
                        webhook_started,
                    ),
                    name="webhook",
                )
            )
        if status_gate:
            tasks.append(
                asyncio.create_task(
                    _status_server(
                        api, config, stop, options, state, webhook_started, liveness, readiness
                    ),
                    name="status-server",
                )
            )
        health = ObservabilityServer(
            config.health.health_probe_bind_address,
            liveness=liveness,
            readiness=readiness,
            liveness_endpoint=config.health.liveness_endpoint_name,
            readiness_endpoint=config.health.readiness_endpoint_name,
        )
        servers.append(health)
        insecure_metrics: ObservabilityServer | None = None
        metrics_authorize: Authorize | None = None
        if config.metrics.auth.enabled:
            authorizer = RequestAuthorizer(kube)

            async def metrics_authorize(headers: list[str], path: str) -> tuple[int, str]:
                decision = await authorizer.check(headers, path)
                return decision.status, decision.message

        if config.metrics.bind_address not in ("0", ""):
            if config.metrics.secure_serving:
                tasks.append(
                    asyncio.create_task(
                        _secure_metrics(
                            config,
                            options,
                            state,
                            webhook_started,
                            metrics,
                            servers,
                            metrics_authorize,
                        ),
                        name="metrics",
                    )
                )
            else:
                insecure_metrics = ObservabilityServer(
                    config.metrics.bind_address, metrics=metrics, authorize=metrics_authorize
                )
                servers.append(insecure_metrics)
        state.health_url = await health.start()
        if insecure_metrics is not None:
            state.metrics_url = await insecure_metrics.start()
        state.controller, state.metrics = controller, metrics
        await controller.start_caches()
        tasks.append(asyncio.create_task(_count_states(controller, metrics), name="states"))
        if ready is not None:
            ready.set()
        if config.leader_elect:
            le = config.leader_election
            assert le is not None
            elector = LeaderElector(
                KubeLeaseClient(kube),
                namespace=le.resource_namespace or namespace,
                name=le.resource_name,
                lease_duration=le.lease_duration,
                renew_deadline=le.renew_deadline,
                retry_period=le.retry_period,
                on_leader_change=metrics.set_leader,
            )
            state.elector = elector

            async def lead() -> None:
                controller.start_workers()
                await asyncio.Event().wait()  # until leadership ends (cancelled)

            async def campaign() -> None:
                await elector.run(lead)
                if not stop.is_set():
                    # Like controller-runtime: a replica that lost the Lease exits, and its
                    # Deployment restarts it as a follower.
                    log.error("leader election lost; stopping")
                    stop.set()

            election = asyncio.create_task(campaign(), name="leader-election")
            await stop.wait()
            elector.stop()
            await election
        else:
            metrics.set_leader(True)
            controller.start_workers()
            await stop.wait()
    finally:
        await controller.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in servers:
            await server.stop()


async def _count_states(controller: Controller, metrics: Metrics) -> None:
    while True:
        counts = Counter(trainjob_state(o) for o in controller.caches.trainjobs.list())
        counts.setdefault("Running", 0)
        metrics.set_trainjob_states(counts)
        await asyncio.sleep(STATE_INTERVAL)


async def _webhook(
    api: ApiClient,
    config: Configuration,
    namespace: str,
    stop: asyncio.Event,
    readiness: HealthChecks,
    options: ProcessOptions,
    controller: Controller,
    state: ProcessState,
    started: asyncio.Future[RunningWebhook],
) -> None:
    # Imported here: FastAPI and uvicorn cost ~14 MB, not paid when the webhook is off.
    from webhooks.run import WebhookOptions, run_webhook  # noqa: PLC0415

    def cached_runtime(kind: str, ns: str, name: str) -> dict[str, object] | None:
        if kind == c.KIND_CLUSTER_TRAINING_RUNTIME:
            return controller.caches.cluster_runtimes.get(None, name)
        return controller.caches.runtimes.get(ns, name)

    started.add_done_callback(lambda _f: state.webhook_serving.set())

    def certs_ready() -> None:
        if not started.done():
            raise RuntimeError("certificates are not ready")

    readiness.add("webhook", certs_ready)
    await run_webhook(
        api,
        WebhookOptions(
            namespace=namespace,
            service=config.cert_management.webhook_service_name,
            secret=config.cert_management.webhook_secret_name,
            host=config.webhook.host,
            port=config.webhook.port,
            manage_certs=config.cert_management.enable,
            extra_hosts=options.webhook_extra_hosts,
            tls_min_version=config.tls.min_version or "1.2",
            tls_ciphers=config.tls.openssl_ciphers(),
            alpn_protocols=config.tls.served_protocols(),
            runtime_cache=cached_runtime,
            cert_dir=_cert_dir(options),
        ),
        stop,
        started,
    )


def _cert_dir(options: ProcessOptions) -> str:
    """The webhook's certificate directory: the process's own, else upstream's default."""
    from webhooks.run import WebhookOptions  # noqa: PLC0415 - FastAPI stays unloaded without it

    return options.webhook_cert_dir or WebhookOptions().cert_dir


async def _server_tls(
    config: Configuration,
    options: ProcessOptions,
    webhook_started: asyncio.Future[RunningWebhook],
    what: str,
) -> ssl.SSLContext | None:
    """The TLS context the webhook serves with (same certificate, same reloads), once its
    certificates are ready; without the webhook in this process, one made from the cert dir's
    files (None, logged, when there are none)."""
    from webhooks.certs import ServerTLS, read_cert_dir, tls_version  # noqa: PLC0415

    if options.webhook:
        context: ssl.SSLContext = (await webhook_started).tls.context
        return context
    cert_dir = _cert_dir(options)
    files = read_cert_dir(cert_dir)
    if files is None:
        log.error("%s: no certificate in %s", what, cert_dir)
        return None
    tls = ServerTLS(
        min_version=tls_version(config.tls.min_version or "1.2"),
        ciphers=config.tls.openssl_ciphers(),
        alpn_protocols=config.tls.served_protocols(),
    )
    tls.reload(*files)
    return tls.context


async def _secure_metrics(
    config: Configuration,
    options: ProcessOptions,
    state: ProcessState,
    webhook_started: asyncio.Future[RunningWebhook],
    metrics: Metrics,
    servers: list[ObservabilityServer],
    authorize: Authorize | None,
) -> None:
    """``metrics.secureServing``: metrics over HTTPS on the webhook's certificate, started
    once it exists (as upstream starts its metrics server after the certificates)."""
    context = await _server_tls(config, options, webhook_started, "metrics")
    if context is None:
        return
    server = ObservabilityServer(
        config.metrics.bind_address,
        metrics=metrics,
        ssl_context=context,
        authorize=authorize,
    )
    servers.append(server)
    state.metrics_url = await server.start()


async def _status_server(
    api: ApiClient,
    config: Configuration,
    stop: asyncio.Event,
    options: ProcessOptions,
    state: ProcessState,
    webhook_started: asyncio.Future[RunningWebhook],
    liveness: HealthChecks,
    readiness: HealthChecks,
) -> None:
    """The TrainJob status server (every replica, not leader-gated), on the webhook's TLS
    context (same certificate and reloads); without the webhook, on the cert dir's files.
    Both probes gain a TLS dial of it."""
    from trainer.statusserver.server import (  # noqa: PLC0415
        RunningStatusServer,
        StatusServerOptions,
        run_status_server,
        tls_dial,
    )

    async def dial() -> None:
        if state.status_server_port is None:
            raise RuntimeError("the status server is not serving yet")
        await tls_dial(options.status_server_host, state.status_server_port)

    liveness.add("status-server", dial)
    readiness.add("status-server", dial)
    context = await _server_tls(config, options, webhook_started, "status server")
    if context is None:
        return
    started: asyncio.Future[RunningStatusServer] = asyncio.get_running_loop().create_future()

    def serving(f: asyncio.Future[RunningStatusServer]) -> None:
        if not f.cancelled() and f.exception() is None:
            state.status_server_port = f.result().port
            state.status_server_serving.set()

    started.add_done_callback(serving)
    status_kube = Kube(api)
    await run_status_server(
        status_kube,
        StatusServerOptions(
            host=options.status_server_host,
            port=config.status_server.port,
            qps=config.status_server.qps,
            burst=config.status_server.burst,
        ),
        context,
        stop,
        started,
    )
