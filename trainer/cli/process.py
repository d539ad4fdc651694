"""The controller process (``trainer controller``) as runnables of a manager
(:mod:`trainer.manager`; docs/design.md, "The manager"): health probes and metrics, the
admission webhook and the status server, the watch caches and the TrainJob counts on every
replica; the reconcilers' workers only on the leader; a graceful stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.api import constants as c
from trainer.controller.config import Configuration
from trainer.controller.manager import Controller
from trainer.kube.authn import RequestAuthorizer
from trainer.kube.client import ApiClient
from trainer.kube.leases import KubeLeaseClient
from trainer.kube.ratelimit import RateLimiter
from trainer.kube.rest import Kube
from trainer.manager.election import LeaderElection
from trainer.manager.leader import LeaderElector
from trainer.manager.manager import Manager
from trainer.manager.runnable import RunnableFunc, Stage
from trainer.manager.servers import serve, server_runnable
from trainer.observability.metrics import Authorize, Metrics, ObservabilityServer, ping

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
    manager = controller_manager(
        api, config, options or ProcessOptions(), state if state is not None else ProcessState()
    )
    await manager.start(stop, ready=ready)


def controller_manager(
    api: ApiClient, config: Configuration, options: ProcessOptions, state: ProcessState
) -> Manager:
    """A manager holding the controller process's runnables (built on the running loop):
    health probes and metrics, the webhook and the status server, the watch caches, the
    TrainJob counts, and the reconcilers' workers as its leader runnable."""
    metrics = Metrics()
    kube = Kube(
        api,
        on_request=metrics.observe_api_request,
        limiter=RateLimiter(config.client_connection.qps, config.client_connection.burst),
    )
    namespace = own_namespace()
    status_gate = config.feature_enabled(c.FEATURE_TRAINJOB_STATUS)
    certs = config.cert_management
    controller = Controller(
        kube,
        concurrency=config.controller.group_kind_concurrency.get(
            TRAINJOB_GROUP_KIND, DEFAULT_CONCURRENCY
        ),
        queue_metrics=metrics.queue("trainjob"),
        reconcile_metrics=metrics.reconciler("trainjob"),
        on_ttl_deletion=metrics.observe_ttl_deletion,
        feature_gates={**config.feature_gates, c.FEATURE_TRAINJOB_STATUS: status_gate},
        status_server_url=options.status_server_url
        or f"https://{certs.webhook_service_name}.{namespace}.svc:{config.status_server.port}",
        status_server_secret=(namespace, certs.webhook_secret_name),
    )
    manager = Manager(
        leader_election=_leader_election(config, kube, namespace),
        on_leader_change=metrics.set_leader,
    )
    state.controller, state.metrics, state.elector = controller, metrics, manager.elector
    manager.liveness.add("ping", ping)
    manager.readiness.add("ping", ping)

    def caches_synced() -> None:
        if not all(inf.has_synced for inf in controller.informers() if not inf.optional):
            raise RuntimeError("watch caches are not synced")

    manager.readiness.add("caches", caches_synced)
    webhook_started: asyncio.Future[RunningWebhook] = asyncio.get_running_loop().create_future()
    if options.webhook:
        manager.add(_webhook(api, config, namespace, options, controller, state, webhook_started))
        manager.readiness.add("webhook", lambda: _certificates_ready(webhook_started))
    if status_gate:
        manager.add(_status_server(api, config, options, state, webhook_started, manager))

    def health_served(url: str | None) -> None:
        state.health_url = url

    health = ObservabilityServer(
        config.health.health_probe_bind_address,
        liveness=manager.liveness,
        readiness=manager.readiness,
        liveness_endpoint=config.health.liveness_endpoint_name,
        readiness_endpoint=config.health.readiness_endpoint_name,
    )
    manager.add(server_runnable("health-probes", health, health_served))
    if config.metrics.bind_address not in ("0", ""):
        manager.add(_metrics(config, options, state, webhook_started, metrics, kube))
    caches, workers = controller.runnables()
    manager.add(caches)
    manager.add(
        RunnableFunc(
            "trainjob-states", Stage.OTHERS, lambda stop: _count_states(controller, metrics, stop)
        )
    )
    manager.add(workers)
    return manager


def _leader_election(config: Configuration, kube: Kube, namespace: str) -> LeaderElection | None:
    if not config.leader_elect:
        return None
    le = config.leader_election
    assert le is not None
    return LeaderElection(
        KubeLeaseClient(kube),
        namespace=le.resource_namespace or namespace,
        name=le.resource_name,
        lease_duration=le.lease_duration,
        renew_deadline=le.renew_deadline,
        retry_period=le.retry_period,
    )


async def _count_states(controller: Controller, metrics: Metrics, stop: asyncio.Event) -> None:
    while not stop.is_set():
        counts = Counter(trainjob_state(o) for o in controller.caches.trainjobs.list())
        counts.setdefault("Running", 0)
        metrics.set_trainjob_states(counts)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), STATE_INTERVAL)


def _metrics(
    config: Configuration,
    options: ProcessOptions,
    state: ProcessState,
    webhook_started: asyncio.Future[RunningWebhook],
    metrics: Metrics,
    kube: Kube,
) -> RunnableFunc:
    """The metrics server. ``metrics.secureServing``: over HTTPS on the webhook's certificate,
    started once it exists (as upstream starts its metrics server after the certificates),
    so the next stage does not wait for it."""
    authorize: Authorize | None = None
    if config.metrics.auth.enabled:
        authorizer = RequestAuthorizer(kube)

        async def authorize(headers: list[str], path: str) -> tuple[int, str]:
            decision = await authorizer.check(headers, path)
            return decision.status, decision.message

    def served(url: str | None) -> None:
        state.metrics_url = url

    if not config.metrics.secure_serving:
        server = ObservabilityServer(
            config.metrics.bind_address, metrics=metrics, authorize=authorize
        )
        return server_runnable("metrics", server, served)

    async def run(stop: asyncio.Event) -> None:
        context = await _server_tls(config, options, webhook_started, "metrics", stop)
        if context is None:
            return
        server = ObservabilityServer(
            config.metrics.bind_address, metrics=metrics, ssl_context=context, authorize=authorize
        )
        await serve(server, stop, served)  # a port it cannot bind stops the process

    return RunnableFunc("metrics", Stage.SERVERS, run)


def _certificates_ready(started: asyncio.Future[RunningWebhook]) -> None:
    if not started.done():
        raise RuntimeError("certificates are not ready")


def _webhook(
    api: ApiClient,
    config: Configuration,
    namespace: str,
    options: ProcessOptions,
    controller: Controller,
    state: ProcessState,
    started: asyncio.Future[RunningWebhook],
) -> RunnableFunc:
    """The admission webhook, reading runtimes from the controller's caches."""
    started.add_done_callback(lambda _f: state.webhook_serving.set())

    def cached_runtime(kind: str, ns: str, name: str) -> dict[str, object] | None:
        if kind == c.KIND_CLUSTER_TRAINING_RUNTIME:
            return controller.caches.cluster_runtimes.get(None, name)
        return controller.caches.runtimes.get(ns, name)

    async def run(stop: asyncio.Event) -> None:
        # Imported here: FastAPI and uvicorn cost ~14 MB, not paid when the webhook is off.
        from webhooks.run import WebhookOptions, run_webhook  # noqa: PLC0415

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

    return RunnableFunc("webhook", Stage.WEBHOOKS, run)


def _cert_dir(options: ProcessOptions) -> str:
    """The webhook's certificate directory: the process's own, else upstream's default."""
    from webhooks.run import WebhookOptions  # noqa: PLC0415 - FastAPI stays unloaded without it

    return options.webhook_cert_dir or WebhookOptions().cert_dir


async def _server_tls(
    config: Configuration,
    options: ProcessOptions,
    webhook_started: asyncio.Future[RunningWebhook],
    what: str,
    stop: asyncio.Event,
) -> ssl.SSLContext | None:
    """The TLS context the webhook serves with (same certificate, same reloads), once its
    certificates are ready (None if ``stop`` comes first); without the webhook in this
    process, one made from the cert dir's files (None, logged, when there are none)."""
    from webhooks.certs import ServerTLS, read_cert_dir, tls_version  # noqa: PLC0415

    if options.webhook:
        halt = asyncio.ensure_future(stop.wait())
        waiting: set[asyncio.Future[Any]] = {webhook_started, halt}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            halt.cancel()
        if not webhook_started.done():
            return None
        context: ssl.SSLContext = webhook_started.result().tls.context
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


def _status_server(
    api: ApiClient,
    config: Configuration,
    options: ProcessOptions,
    state: ProcessState,
    webhook_started: asyncio.Future[RunningWebhook],
    manager: Manager,
) -> RunnableFunc:
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

    manager.liveness.add("status-server", dial)
    manager.readiness.add("status-server", dial)

    async def run(stop: asyncio.Event) -> None:
        context = await _server_tls(config, options, webhook_started, "status server", stop)
        if context is None:
            return
        started: asyncio.Future[RunningStatusServer] = asyncio.get_running_loop().create_future()

        def serving(f: asyncio.Future[RunningStatusServer]) -> None:
            if not f.cancelled() and f.exception() is None:
                state.status_server_port = f.result().port
                state.status_server_serving.set()

        started.add_done_callback(serving)
        await run_status_server(
            Kube(api),
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

    return RunnableFunc("status-server", Stage.WEBHOOKS, run)
