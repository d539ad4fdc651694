"""Prometheus metrics of the controller and the HTTP server that exposes them with the probes.

All metrics live in a dedicated :class:`prometheus_client.CollectorRegistry` owned by a
:class:`Metrics` instance, never the process-global registry: tests (and several controllers in
one process, as ``trainer run`` does) each get their own, and nothing leaks between them.
Names follow the Prometheus naming rules (docs/metrics.md lists them): a ``trainer_`` prefix,
base units (seconds), ``_total`` on counters (prometheus-client appends it to the counter's name).

===========================================  =========  ===================================
name                                         type       labels
===========================================  =========  ===================================
trainer_reconcile_total                      counter    controller, result (success|error|
                                                        requeue)
trainer_reconcile_duration_seconds           histogram  controller
trainer_workqueue_depth                      gauge      name
trainer_workqueue_adds_total                 counter    name
trainer_workqueue_queue_duration_seconds     histogram  name (time from add to get)
trainer_workqueue_work_duration_seconds      histogram  name (time from get to done)
trainer_workqueue_retries_total              counter    name
trainer_api_requests_total                   counter    verb, resource, code
trainer_api_request_duration_seconds         histogram  verb
trainer_trainjobs                            gauge      state
trainer_trainjob_ttl_deletion_delay_seconds  histogram  (time from a finished TrainJob's TTL
                                                        expiry to its deletion; _count: the
                                                        TrainJobs deleted after their TTL)
trainer_leader                               gauge      (1 while this replica leads)
trainer_build_info                           gauge      version, python_version (always 1)
===========================================  =========  ===================================

The ``controller`` and ``name`` labels (absent from the brief's list) tell the TrainJob,
TrainingRuntime and ClusterTrainingRuntime controllers and their queues apart, as
controller-runtime's ``controller`` and client-go's ``name`` labels do.

:class:`ObservabilityServer` is an aiohttp server for ``/metrics`` and the ``/healthz`` and
``/readyz`` probes (endpoint names configurable, as in the Configuration's ``health`` block),
with pluggable checks in :class:`HealthChecks`. It mirrors controller-runtime's healthz
handler: ``ok`` when every check passes, else HTTP 500 with one ``[+]name ok`` /
``[-]name failed: <message>`` line per check (controller-runtime withholds the reason; the
messages here are our own and carry no secrets, and saying "certificates are not ready" is
more useful to someone reading the probe), ``?verbose`` lists the checks on success too,
``?exclude=name`` skips one, and ``/<endpoint>/<check>`` runs a single check.
"""

from __future__ import annotations

import asyncio
import inspect
import platform
import ssl
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from trainer import __version__
from trainer.listeners.aiohttp_site import GuardedSite
from trainer.listeners.guard import dual_stack_socket
from trainer.machinery.sockets import bind_socket

RECONCILE_RESULTS = ("success", "error", "requeue")

# controller-runtime's reconcile_time_seconds buckets.
RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
    15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip
# client-go's workqueue buckets: ExponentialBuckets(10e-9, 10, 12), 10 ns .. 1000 s.
WORKQUEUE_BUCKETS = tuple(float(f"1e{exponent}") for exponent in range(-8, 4))
# client-go's rest_client_request_duration_seconds buckets.
API_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class WorkQueueMetrics:
    """The workqueue metrics of one named queue (the ``QueueMetrics`` hooks of
    :mod:`trainer.machinery.workqueue`)."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._depth = metrics.workqueue_depth.labels(name=name)
        self._adds = metrics.workqueue_adds.labels(name=name)
        self._queue = metrics.workqueue_queue_duration.labels(name=name)
        self._work = metrics.workqueue_work_duration.labels(name=name)
        self._retries = metrics.workqueue_retries.labels(name=name)

    def set_depth(self, depth: int) -> None:
        self._depth.set(depth)

    def inc_adds(self) -> None:
        self._adds.inc()

    def observe_queue_duration(self, seconds: float) -> None:
        self._queue.observe(max(seconds, 0.0))

    def observe_work_duration(self, seconds: float) -> None:
        self._work.observe(max(seconds, 0.0))

    def inc_retries(self) -> None:
        self._retries.inc()


class ReconcileMetrics:
    """Reconcile outcomes and durations of one controller (the ``ReconcileMetrics`` hook of
    :func:`trainer.machinery.workqueue.run_workers`)."""

    def __init__(self, metrics: Metrics, controller: str) -> None:
        self._totals = {
            result: metrics.reconcile_total.labels(controller=controller, result=result)
            for result in RECONCILE_RESULTS
        }
        self._duration = metrics.reconcile_duration.labels(controller=controller)

    def observe_reconcile(self, result: str, seconds: float) -> None:
        """Count one reconcile with ``result`` (success, error or requeue) taking ``seconds``."""
        if result not in self._totals:
            raise ValueError(f"reconcile result {result!r}: use one of {RECONCILE_RESULTS}")
        self._totals[result].inc()
        self._duration.observe(max(seconds, 0.0))


class Metrics:
    """Every controller metric, registered in ``registry`` (a new private one by default)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        version: str = __version__,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.reconcile_total = Counter(
            "trainer_reconcile",
            "Reconciles per controller and result (success, error, requeue).",
            ["controller", "result"],
            registry=reg,
        )
        self.reconcile_duration = Histogram(
            "trainer_reconcile_duration_seconds",
            "Time one reconcile took, per controller.",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=reg,
        )
        self.workqueue_depth = Gauge(
            "trainer_workqueue_depth",
            "Keys waiting in the work queue to be processed.",
            ["name"],
            registry=reg,
        )
        self.workqueue_adds = Counter(
            "trainer_workqueue_adds",
            "Keys added to the work queue (deduplicated adds are not counted).",
            ["name"],
            registry=reg,
        )
        self.workqueue_queue_duration = Histogram(
            "trainer_workqueue_queue_duration_seconds",
            "Time a key waited in the work queue before a worker took it.",
            ["name"],
            buckets=WORKQUEUE_BUCKETS,
            registry=reg,
        )
        self.workqueue_work_duration = Histogram(
            "trainer_workqueue_work_duration_seconds",
            "Time a worker held a key, from get to done.",
            ["name"],
            buckets=WORKQUEUE_BUCKETS,
            registry=reg,
        )
        self.workqueue_retries = Counter(
            "trainer_workqueue_retries",
            "Rate-limited re-adds (retries after an error).",
            ["name"],
            registry=reg,
        )
        self.api_requests = Counter(
            "trainer_api_requests",
            "Kubernetes API requests by verb, resource and HTTP code (<error>: no answer).",
            ["verb", "resource", "code"],
            registry=reg,
        )
        self.api_request_duration = Histogram(
            "trainer_api_request_duration_seconds",
            "Kubernetes API request latency by verb.",
            ["verb"],
            buckets=API_BUCKETS,
            registry=reg,
        )
        self.trainjobs = Gauge(
            "trainer_trainjobs",
            "TrainJobs known to the controller, by state.",
            ["state"],
            registry=reg,
        )
        self.ttl_deletion_delay = Histogram(
            "trainer_trainjob_ttl_deletion_delay_seconds",
            "Time from a finished TrainJob's TTL expiry to its deletion by the controller.",
            buckets=RECONCILE_BUCKETS,
            registry=reg,
        )
        self.leader = Gauge(
            "trainer_leader",
            "1 while this replica holds the leader-election lease, else 0.",
            registry=reg,
        )
        self.build_info = Gauge(
            "trainer_build_info",
            "Build information of the running controller; the value is always 1.",
            ["version", "python_version"],
            registry=reg,
        )
        self.build_info.labels(version=version, python_version=platform.python_version()).set(1)
        self.leader.set(0)
        self._trainjob_states: set[str] = set()

    # --- hooks for the controller -----------------------------------------------------------
    def queue(self, name: str) -> WorkQueueMetrics:
        """The metrics hooks for the work queue ``name`` (pass to ``WorkQueue(metrics=...)``)."""
        return WorkQueueMetrics(self, name)

    def reconciler(self, controller: str) -> ReconcileMetrics:
        """The reconcile hooks for ``controller`` (pass to ``run_workers(metrics=...)``)."""
        return ReconcileMetrics(self, controller)

    def observe_api_request(self, verb: str, resource: str, code: int, seconds: float) -> None:
        """Record one API request; the signature of ``trainer.kube.rest.Kube(on_request=...)``.
        ``code`` 0 (no HTTP answer) is labelled ``<error>``, as client-go does."""
        label = str(code) if code else "<error>"
        self.api_requests.labels(verb=verb, resource=resource, code=label).inc()
        self.api_request_duration.labels(verb=verb).observe(max(seconds, 0.0))

    def observe_ttl_deletion(self, late: float) -> None:
        """Count one TrainJob deleted ``late`` seconds after its TTL after finishing expired
        (the ``on_ttl_deletion`` hook of the TrainJob controller)."""
        self.ttl_deletion_delay.observe(max(late, 0.0))

    def set_leader(self, leading: bool) -> None:
        """Set ``trainer_leader`` (the ``on_leader_change`` hook of the leader elector)."""
        self.leader.set(1 if leading else 0)

    def set_trainjob_states(self, counts: Mapping[str, int]) -> None:
        """Replace the ``trainer_trainjobs`` series: states missing from ``counts`` that were
        reported before drop to 0, so a dashboard never shows a stale count."""
        for state in self._trainjob_states - set(counts):
            self.trainjobs.labels(state=state).set(0)
        for state, count in counts.items():
            self.trainjobs.labels(state=state).set(count)
        self._trainjob_states |= set(counts)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the text format the ``Accept`` header asks for (Prometheus text
        0.0.4, or OpenMetrics) and its content type."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type


# --- probes ---------------------------------------------------------------------------------
Check = Callable[[], Awaitable[None] | None]
"""A health check: returns when healthy, raises an exception whose text says what is wrong."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    message: str = ""
    excluded: bool = False


class HealthChecks:
    """A named set of checks (the liveness or the readiness endpoint)."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        """Register ``check`` as ``name``; names are unique and may not contain ``/``."""
        if not name or "/" in name:
            raise ValueError(f"invalid check name {name!r}: non-empty, without '/'")
        if name in self._checks:
            raise ValueError(f"check {name!r} is already registered")
        self._checks[name] = check

    def names(self) -> list[str]:
        return sorted(self._checks)

    async def run_one(self, name: str) -> CheckResult:
        """Run check ``name``: an exception (or a timeout) is a failure with its message."""
        check = self._checks[name]
        try:
            outcome = check()
            if inspect.isawaitable(outcome):
                async with asyncio.timeout(self.timeout):
                    await outcome
        except TimeoutError:
            return CheckResult(name, False, f"timed out after {self.timeout:g}s")
        except Exception as exc:
            return CheckResult(name, False, str(exc) or type(exc).__name__)
        return CheckResult(name, True)

    async def run(self, exclude: Collection[str] = ()) -> list[CheckResult]:
        """Every check, sorted by name (a ``ping`` that passes when none is registered)."""
        if not self._checks:
            return [CheckResult("ping", True)]
        results = []
        for name in sorted(self._checks):
            if name in exclude:
                results.append(CheckResult(name, True, excluded=True))
            else:
                results.append(await self.run_one(name))
        return results


def ping() -> None:
    """The always-passing check controller-runtime registers as ``ping``."""


def parse_bind_address(address: str) -> tuple[str | None, int] | None:
    """``host, port`` for a Go-style listen address; None when serving is disabled.

    ``":8443"`` listens on every interface (host None), ``"127.0.0.1:8080"`` and
    ``"[::1]:8080"`` on one; ``"0"`` and ``""`` disable the server (controller-runtime's
    convention). Port 0 picks a free port. Raises ValueError for anything else.
    """
    text = address.strip()
    if text in ("", "0"):
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(
            f'invalid bind address {address!r}: use [host]:port, e.g. ":8443" or '
            '"127.0.0.1:8080", or "0" to disable'
        )
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"invalid bind address {address!r}: port must be between 0 and 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return (host or None), port


def _endpoint_path(name: str) -> str:
    return name if name.startswith("/") else "/" + name


Authorize = Callable[[list[str], str], Awaitable[tuple[int, str]]]


class ObservabilityServer:
    """An aiohttp server for ``/metrics`` (when ``metrics`` is given) and the liveness and
    readiness endpoints (when their checks are given).

    The manager runs one on ``metrics.bindAddress`` (metrics only, TLS from ``ssl_context``)
    and one on ``health.healthProbeBindAddress`` (probes only); local mode may serve all three
    from one address.
    """

    def __init__(
        self,
        bind_address: str,
        *,
        metrics: Metrics | None = None,
        liveness: HealthChecks | None = None,
        readiness: HealthChecks | None = None,
        liveness_endpoint: str = "healthz",
        readiness_endpoint: str = "readyz",
        ssl_context: ssl.SSLContext | None = None,
        authorize: Authorize | None = None,
    ) -> None:
        self.bind_address = bind_address
        self.authorize = authorize
        """``metrics.auth.enabled``: asked ``(Authorization headers, path)`` before serving
        ``/metrics``; answers (status, message)."""
        self.metrics = metrics
        self.liveness = liveness
        self.readiness = readiness
        self.liveness_endpoint = _endpoint_path(liveness_endpoint)
        self.readiness_endpoint = _endpoint_path(readiness_endpoint)
        self.ssl_context = ssl_context
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        """The aiohttp application (also usable with aiohttp's test client)."""
        app = web.Application()
        if self.metrics is not None:
            app.router.add_get("/metrics", self._serve_metrics)
        for path, checks in (
            (self.liveness_endpoint, self.liveness),
            (self.readiness_endpoint, self.readiness),
        ):
            if checks is not None:
                app.router.add_get(path, self._aggregated(path, checks))
                app.router.add_get(path + "/{check}", self._single(checks))
        return app

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        assert self.metrics is not None
        if self.authorize is not None:
            status, message = await self.authorize(
                request.headers.getall("Authorization", []), request.path
            )
            if status != 200:
                return web.Response(text=message + "\n", status=status)
        body, content_type = self.metrics.exposition(request.headers.get("Accept", ""))
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    @staticmethod
    def _aggregated(
        path: str, checks: HealthChecks
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        endpoint = path.lstrip("/")

        async def handler(request: web.Request) -> web.Response:
            exclude: set[str] = set()
            for value in request.query.getall("exclude", []):
                exclude.update(part.strip() for part in value.split(",") if part.strip())
            results = await checks.run(exclude)
            failed = any(not r.ok for r in results)
            verbose = "verbose" in request.query
            headers = {"X-Content-Type-Options": "nosniff"}
            if not failed and not verbose:
                return web.Response(text="ok", headers=headers)
            lines = []
            for r in results:
                if r.excluded:
                    lines.append(f"[+]{r.name} excluded: ok")
                elif r.ok:
                    lines.append(f"[+]{r.name} ok")
                else:
                    lines.append(f"[-]{r.name} failed: {r.message}")
            unknown = sorted(exclude - set(checks.names()))
            if unknown:
                names = ", ".join(f'"{n}"' for n in unknown)
                lines.append(f"warn: some health checks cannot be excluded: no matches for {names}")
            lines.append(f"{endpoint} check failed" if failed else f"{endpoint} check passed")
            return web.Response(
                text="\n".join(lines) + "\n", status=500 if failed else 200, headers=headers
            )

        return handler

    @staticmethod
    def _single(checks: HealthChecks) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            name = request.match_info["check"]
            if name not in checks.names():
                if name == "ping" and not checks.names():
                    return web.Response(text="ok")
                return web.Response(text=f"404 page not found: check {name!r}\n", status=404)
            result = await checks.run_one(name)
            if result.ok:
                return web.Response(text="ok")
            return web.Response(text=f"internal server error: {result.message}\n", status=500)

        return handler

    async def start(self) -> str | None:
        """Bind and serve; returns the base URL, or None when the address disables serving."""
        parsed = parse_bind_address(self.bind_address)
        if parsed is None:
            return None
        host, port = parsed
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        # Guarded: a connection cap and a deadline for the first request head
        # (docs/local-plane.md, "Listeners under abuse"); host None is every interface.
        sock = dual_stack_socket(port) if host is None else bind_socket(host, port)
        site = GuardedSite(
            self._runner,
            sock,
            name=f"metrics and probes on {self.bind_address}",
            ssl_context=self.ssl_context,
        )
        await site.start()
        self.port = site.port
        scheme = "https" if self.ssl_context is not None else "http"
        shown = host or "127.0.0.1"
        shown = f"[{shown}]" if ":" in shown else shown
        return f"{scheme}://{shown}:{self.port}"

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
