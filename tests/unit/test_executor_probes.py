"""The local kubelet's probes (trainer/local/executor/kubelet/probes.py): what a liveness failure
does (pure functions), and what one tcpSocket or httpGet probe reports, in the kubelet's words,
against real sockets on loopback. The restarts themselves:
tests/integration/test_kubelet_liveness.py."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from trainer.local.executor.kubelet import probes
from trainer.local.executor.kubelet.containers import should_restart
from trainer.local.executor.kubelet.podhost import Container


@pytest.mark.parametrize(
    ("pod_grace", "probe_grace", "want"),
    [
        (None, None, 5.0),  # the default 30 s, at most 5 s here
        (3, None, 3.0),
        (3, 4, 4.0),  # the probe's own wins
        (0, None, 2.0),  # the kubelet always gives 2 s
        (30, 1, 2.0),
        (60, 60, 5.0),
    ],
)
def test_kill_grace(pod_grace: int | None, probe_grace: int | None, want: float) -> None:
    spec = {} if pod_grace is None else {"terminationGracePeriodSeconds": pod_grace}
    probe = {} if probe_grace is None else {"terminationGracePeriodSeconds": probe_grace}
    assert probes.kill_grace(spec, probe) == want


def test_liveness_kills_after_failure_threshold_failures_in_a_row() -> None:
    timing = probes.probe_timing({"failureThreshold": 3, "periodSeconds": 60})
    assert [probes.liveness_fails(n, timing) for n in (1, 2, 3)] == [False, False, True]
    assert timing.period == probes.PROBE_PERIOD_CAP  # bounded for a local run
    assert probes.liveness_fails(1, probes.probe_timing({})) is False  # default threshold 3


@pytest.mark.parametrize(
    ("policy", "sidecar", "restart", "message"),
    [
        ("Always", False, True, "Container web failed liveness probe, will be restarted"),
        ("OnFailure", False, True, "Container web failed liveness probe, will be restarted"),
        ("Never", False, False, "Container web failed liveness probe"),
        ("Never", True, True, "Container web failed liveness probe, will be restarted"),
    ],
)
def test_a_killed_container_restarts_unless_never(
    policy: str, sidecar: bool, restart: bool, message: str
) -> None:
    assert probes.restarts_after_kill(policy, sidecar=sidecar) is restart
    assert probes.kill_message("web", restart=restart) == message
    # Whatever the exit code: one that exits 0 on SIGTERM restarts under OnFailure too.
    for code in (0, 137, 143):
        assert (
            should_restart(
                code=code, policy=policy, init=sidecar, sidecar=sidecar, killed_by_probe=True
            )
            is restart
        )


def test_dial_errors_read_as_go_writes_them() -> None:
    assert (
        probes.dial_error(8080, ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))
        == "dial tcp 127.0.0.1:8080: connect: connection refused"
    )
    assert probes.dial_error(8080, TimeoutError()) == "dial tcp 127.0.0.1:8080: i/o timeout"


@dataclass
class Host:
    warnings: list[str] = field(default_factory=list)
    base_env: dict[str, str] = field(default_factory=dict)

    def warn_once(self, key: str, message: str) -> None:
        self.warnings.append(message)


@dataclass
class FakePod:
    pod: dict[str, Any]
    host: Host = field(default_factory=Host)
    sandbox: Any = None
    uid: str = "uid"
    key: str = "default/p"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
async def http_500() -> AsyncIterator[int]:
    """A server answering every request with 500."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def run(probe: dict[str, Any]) -> probes.ProbeResult:
    container = Container(
        {"name": "main", "ports": [{"name": "web", "containerPort": 80}]}, init=False, previous={}
    )
    return await probes.check(FakePod({"metadata": {}}), container, probe, timeout=2)  # type: ignore[arg-type]


async def test_what_the_probes_report(http_500: int) -> None:
    closed = free_port()
    assert await run({"tcpSocket": {"port": http_500}}) == probes.ProbeResult(True)
    assert await run({"tcpSocket": {"port": closed}}) == probes.ProbeResult(
        False, f"dial tcp 127.0.0.1:{closed}: connect: connection refused"
    )
    assert await run({"httpGet": {"path": "/healthz", "port": http_500}}) == probes.ProbeResult(
        False, "HTTP probe failed with statuscode: 500"
    )
    assert await run({"httpGet": {"path": "/healthz", "port": closed}}) == probes.ProbeResult(
        False,
        f'Get "http://127.0.0.1:{closed}/healthz": dial tcp 127.0.0.1:{closed}: connect: '
        "connection refused",
    )
    # A port name the container does not declare: the probe cannot run; it counts neither way.
    missing = await run({"httpGet": {"port": "admin"}})
    assert (missing.ok, missing.errored) == (False, True)
