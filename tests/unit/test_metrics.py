"""Observability: metric names and types in the exposition, the HTTP server with its probes,
and structured logging."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from trainer.machinery.workqueue import Result, WorkQueue, run_workers
from trainer.observability.logging import (
    REDACTED,
    parse_level,
    redact,
    setup_logging,
    with_fields,
)
from trainer.observability.metrics import (
    HealthChecks,
    Metrics,
    ObservabilityServer,
    parse_bind_address,
)


def exposition(metrics: Metrics) -> str:
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain; version=0.0.4")
    return body.decode()


def sample(metrics: Metrics, metric: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(metric, labels)


EXPECTED_TYPES = [
    ("trainer_reconcile_total", "counter"),
    ("trainer_reconcile_duration_seconds", "histogram"),
    ("trainer_workqueue_depth", "gauge"),
    ("trainer_workqueue_adds_total", "counter"),
    ("trainer_workqueue_queue_duration_seconds", "histogram"),
    ("trainer_workqueue_work_duration_seconds", "histogram"),
    ("trainer_workqueue_retries_total", "counter"),
    ("trainer_api_requests_total", "counter"),
    ("trainer_api_request_duration_seconds", "histogram"),
    ("trainer_trainjobs", "gauge"),
    ("trainer_leader", "gauge"),
    ("trainer_build_info", "gauge"),
]


@pytest.mark.parametrize(("name", "kind"), EXPECTED_TYPES)
def test_exposition_declares_each_metric_with_its_type(name: str, kind: str) -> None:
    text = exposition(Metrics())
    assert f"# TYPE {name} {kind}\n" in text
    assert f"# HELP {name} " in text


def test_every_metric_follows_the_naming_rules() -> None:
    families = list(text_string_to_metric_families(exposition(Metrics())))
    for family in families:
        assert family.name.startswith("trainer_"), family.name
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
    assert {f.name for f in families} >= {"trainer_reconcile", "trainer_leader"}


def test_registries_are_private() -> None:
    first, second = Metrics(), Metrics()
    first.set_leader(True)
    assert sample(first, "trainer_leader") == 1.0
    assert sample(second, "trainer_leader") == 0.0
    assert REGISTRY.get_sample_value("trainer_leader") is None


def test_build_info_is_one_with_the_version() -> None:
    metrics = Metrics(version="9.9.9")
    text = exposition(metrics)
    assert 'trainer_build_info{python_version="' in text
    assert 'version="9.9.9"} 1.0' in text


async def test_queue_and_reconcile_hooks_feed_the_metrics() -> None:
    metrics = Metrics()
    now = [100.0]
    queue = WorkQueue("trainjob", clock=lambda: now[0], metrics=metrics.queue("trainjob"))
    queue.add("ns/a")
    queue.add("ns/a")
    queue.add("ns/b")
    assert sample(metrics, "trainer_workqueue_depth", name="trainjob") == 2
    assert sample(metrics, "trainer_workqueue_adds_total", name="trainjob") == 2
    now[0] += 1.5

    async def handler(key: str) -> Result:
        now[0] += 0.25
        return Result(error=RuntimeError("x")) if key == "ns/b" else Result(requeue_after=60)

    workers = asyncio.create_task(
        run_workers(queue, handler, 1, metrics=metrics.reconciler("trainjob"))
    )
    for _ in range(20):
        await asyncio.sleep(0)
    queue.shutdown()
    await asyncio.wait_for(workers, 1.0)
    labels = {"controller": "trainjob"}
    assert sample(metrics, "trainer_reconcile_total", result="requeue", **labels) == 1
    assert sample(metrics, "trainer_reconcile_total", result="error", **labels) == 1
    assert sample(metrics, "trainer_reconcile_total", result="success", **labels) == 0
    assert sample(metrics, "trainer_reconcile_duration_seconds_count", **labels) == 2
    assert sample(metrics, "trainer_reconcile_duration_seconds_sum", **labels) == 0.5
    assert sample(metrics, "trainer_workqueue_retries_total", name="trainjob") == 1
    assert sample(metrics, "trainer_workqueue_queue_duration_seconds_count", name="trainjob") == 2
    # a waited 1.5 s, b 1.75 s (a's work came first)
    assert sample(metrics, "trainer_workqueue_queue_duration_seconds_sum", name="trainjob") == 3.25
    assert sample(metrics, "trainer_workqueue_work_duration_seconds_sum", name="trainjob") == 0.5
    assert sample(metrics, "trainer_workqueue_depth", name="trainjob") == 0


def test_api_requests_and_states() -> None:
    metrics = Metrics()
    metrics.observe_api_request("get", "leases.coordination.k8s.io", 200, 0.01)
    metrics.observe_api_request("update", "leases.coordination.k8s.io", 409, 0.02)
    metrics.observe_api_request("update", "leases.coordination.k8s.io", 0, 10.0)
    resource = "leases.coordination.k8s.io"
    assert sample(metrics, "trainer_api_requests_total", verb="get", resource=resource, code="200")
    assert sample(
        metrics, "trainer_api_requests_total", verb="update", resource=resource, code="<error>"
    )
    assert sample(metrics, "trainer_api_request_duration_seconds_count", verb="update") == 2
    metrics.set_trainjob_states({"Running": 3, "Complete": 1})
    metrics.set_trainjob_states({"Running": 2, "Failed": 1})
    assert sample(metrics, "trainer_trainjobs", state="Running") == 2
    assert sample(metrics, "trainer_trainjobs", state="Complete") == 0  # dropped, not stale
    assert sample(metrics, "trainer_trainjobs", state="Failed") == 1


def test_reconcile_results_are_checked() -> None:
    with pytest.raises(ValueError, match="reconcile result 'requeue_after'"):
        Metrics().reconciler("x").observe_reconcile("requeue_after", 0.1)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (":8443", (None, 8443)),
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:9090", ("::1", 9090)),
        ("localhost:0", ("localhost", 0)),
        ("0", None),
        ("", None),
    ],
)
def test_parse_bind_address(address: str, expected: tuple[str | None, int] | None) -> None:
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize("address", ["8443", "host:", ":http", ":70000"])
def test_parse_bind_address_rejects(address: str) -> None:
    with pytest.raises(ValueError, match="invalid bind address"):
        parse_bind_address(address)


class CertsReady:
    def __init__(self) -> None:
        self.ready = False

    async def __call__(self) -> None:
        if not self.ready:
            raise RuntimeError("certificates are not ready")


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, Metrics, CertsReady, aiohttp.ClientSession]]:
    metrics = Metrics()
    liveness = HealthChecks()
    readiness = HealthChecks()
    certs = CertsReady()
    readiness.add("certs", certs)
    readiness.add("ping", lambda: None)
    server = ObservabilityServer(
        "127.0.0.1:0", metrics=metrics, liveness=liveness, readiness=readiness
    )
    url = await server.start()
    assert url is not None and server.port
    async with aiohttp.ClientSession() as session:
        try:
            yield url, metrics, certs, session
        finally:
            await server.stop()


async def fetch(session: aiohttp.ClientSession, url: str) -> tuple[int, str, str]:
    async with session.get(url) as resp:
        return resp.status, await resp.text(), resp.headers.get("Content-Type", "")


async def test_http_metrics_endpoint(
    served: tuple[str, Metrics, CertsReady, aiohttp.ClientSession],
) -> None:
    url, metrics, _, session = served
    metrics.set_leader(True)
    status, text, content_type = await fetch(session, url + "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    assert "# TYPE trainer_leader gauge\ntrainer_leader 1.0" in text
    async with session.get(
        url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    ) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await resp.text()).endswith("# EOF\n")


async def test_readyz_fails_with_a_message_until_checks_pass(
    served: tuple[str, Metrics, CertsReady, aiohttp.ClientSession],
) -> None:
    url, _, certs, session = served
    assert await fetch(session, url + "/healthz") == (200, "ok", "text/plain; charset=utf-8")
    status, text, _ = await fetch(session, url + "/readyz")
    assert status == 500
    assert text == (
        "[-]certs failed: certificates are not ready\n[+]ping ok\nreadyz check failed\n"
    )
    status, text, _ = await fetch(session, url + "/readyz/certs")
    assert (status, text) == (500, "internal server error: certificates are not ready\n")
    status, text, _ = await fetch(session, url + "/readyz?exclude=certs")
    assert (status, text) == (200, "ok")
    certs.ready = True
    assert (await fetch(session, url + "/readyz"))[:2] == (200, "ok")
    assert (await fetch(session, url + "/readyz/certs"))[:2] == (200, "ok")
    status, text, _ = await fetch(session, url + "/readyz?verbose")
    assert (status, text) == (200, "[+]certs ok\n[+]ping ok\nreadyz check passed\n")
    assert (await fetch(session, url + "/readyz/absent"))[0] == 404


async def test_custom_endpoint_names_and_disabled_server() -> None:
    checks = HealthChecks()
    server = ObservabilityServer(
        "127.0.0.1:0",
        liveness=checks,
        readiness=checks,
        liveness_endpoint="alive",
        readiness_endpoint="/ready",
    )
    url = await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            assert (await fetch(session, f"{url}/alive"))[:2] == (200, "ok")
            assert (await fetch(session, f"{url}/ready"))[:2] == (200, "ok")
            assert (await fetch(session, f"{url}/metrics"))[0] == 404  # no metrics given
    finally:
        await server.stop()
    assert await ObservabilityServer("0", metrics=Metrics()).start() is None


async def test_a_hanging_check_times_out() -> None:
    checks = HealthChecks(timeout=0.01)

    async def hang() -> None:
        await asyncio.Event().wait()

    checks.add("slow", hang)
    result = await checks.run_one("slow")
    assert not result.ok and result.message == "timed out after 0.01s"
    with pytest.raises(ValueError, match="already registered"):
        checks.add("slow", hang)


# --- logging ----------------------------------------------------------------------------------
@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = setup_logging("debug", "text", stream=stream, logger="trainer.test")
    yield stream
    logging.getLogger("trainer.test").removeHandler(handler)


def test_text_logs_are_one_line_key_value(log_stream: io.StringIO) -> None:
    log = with_fields(logging.getLogger("trainer.test"), controller="trainjob")
    log.info("Reconciled\nTrainJob", extra={"key": "default/mnist", "duration": 0.25})
    line = log_stream.getvalue()
    assert line.count("\n") == 1
    assert line.startswith("ts=")
    assert (
        ' level=info logger=trainer.test msg="Reconciled\\nTrainJob" controller=trainjob '
        "key=default/mnist duration=0.25\n"
    ) in line


def test_json_logs_with_an_exception_stay_on_one_line() -> None:
    stream = io.StringIO()
    handler = setup_logging("info", "json", stream=stream, logger="trainer.test.json")
    try:
        log = logging.getLogger("trainer.test.json")
        log.debug("hidden")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("Reconciler error", extra={"key": "ns/a"})
    finally:
        logging.getLogger("trainer.test.json").removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["level"] == "error" and record["key"] == "ns/a"
    assert record["error"] == "RuntimeError: boom"
    assert "Traceback" in record["stacktrace"]
    assert list(record)[:4] == ["ts", "level", "logger", "msg"]


def test_secret_material_is_never_logged(log_stream: io.StringIO) -> None:
    log = logging.getLogger("trainer.test")
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----"
    secret = {"kind": "Secret", "metadata": {"name": "ssh"}, "data": {"id_rsa": "c2VjcmV0"}}
    log.info(
        "loaded %s",
        pem,
        extra={"token": "abc123", "object": secret, "header": "Bearer abc.def", "key": "ns/a"},
    )
    line = log_stream.getvalue()
    for leaked in ("MIIEabc", "abc123", "c2VjcmV0", "abc.def"):
        assert leaked not in line
    assert f"token={REDACTED}" in line and "key=ns/a" in line
    assert redact({"password": "x", "tls.key": "y", "name": "z"}) == {
        "password": REDACTED,
        "tls.key": REDACTED,
        "name": "z",
    }


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("info", logging.INFO),
        ("debug", logging.DEBUG),
        ("warn", logging.WARNING),
        ("error", logging.ERROR),
        ("2", logging.DEBUG),  # --zap-log-level=2 (the shipped manifests)
        ("0", logging.INFO),
        (3, logging.DEBUG),
    ],
)
def test_parse_level(level: str | int, expected: int) -> None:
    assert parse_level(level) == expected


def test_bad_level_and_format() -> None:
    with pytest.raises(ValueError, match="invalid log level 'loud'"):
        parse_level("loud")
    with pytest.raises(ValueError, match="invalid log format 'xml'"):
        setup_logging("info", "xml", stream=io.StringIO())  # type: ignore[arg-type]
