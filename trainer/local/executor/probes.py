"""The startup and readiness probes of a locally run container.

A startupProbe gates ``started`` (and readiness); a readinessProbe flips ``ready`` on its
success / failure thresholds for as long as the process runs. Kinds: ``tcpSocket`` (the host
port the pod's port was mapped to), ``httpGet`` (127.0.0.1, HTTPS without verification),
``exec`` (the container's environment and working directory) and ``grpc`` (grpc.health.v1
on the mapped port: :mod:`~trainer.local.executor.grpc_probe`). Until a container first turns
ready it is probed every 0.25 s (a local process starts faster than a pod), afterwards every
periodSeconds (at most 5 s); initialDelaySeconds is honoured up to 30 s. livenessProbe is not
run.

How often and how long to probe is a pure function of the probe spec (:func:`probe_timing`);
running one probe (:func:`check`) is separate from the loop that reacts to its results.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
from dataclasses import dataclass
from typing import Any

from trainer.local.executor import podenv
from trainer.local.executor.grpc_probe import grpc_check
from trainer.local.executor.podfields import LOOPBACK
from trainer.local.executor.podhost import (
    Container,
    RunningPod,
    as_float,
    host_env_path,
    killpg,
    process_entry,
)

PROBE_FAST = 0.25
PROBE_PERIOD_CAP = 5.0
PROBE_DELAY_CAP = 30.0
PROBE_TIMEOUT_CAP = 10.0


@dataclass(frozen=True)
class ProbeTiming:
    """A probe's schedule and thresholds, bounded for a local run."""

    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int


def probe_timing(probe: dict[str, Any]) -> ProbeTiming:
    """The bounded timing of ``probe`` (Kubernetes defaults for absent or malformed fields)."""
    return ProbeTiming(
        initial_delay=min(max(as_float(probe.get("initialDelaySeconds"), 0), 0), PROBE_DELAY_CAP),
        period=min(max(as_float(probe.get("periodSeconds"), 10), 0.1), PROBE_PERIOD_CAP),
        timeout=min(max(as_float(probe.get("timeoutSeconds"), 1), 1), PROBE_TIMEOUT_CAP),
        success_threshold=max(int(as_float(probe.get("successThreshold"), 1)), 1),
        failure_threshold=max(int(as_float(probe.get("failureThreshold"), 3)), 1),
    )


async def run_probes(pod: RunningPod, c: Container) -> None:
    """Run the container's startup probe until it passes, then its readiness probe."""
    startup = c.spec.get("startupProbe")
    readiness = c.spec.get("readinessProbe")
    if startup:
        await probe_loop(pod, c, startup, startup=True)
        c.started = True
        c.started_event.set()
        c.ready = not readiness
        await pod.sync_status()
    if readiness:
        await probe_loop(pod, c, readiness, startup=False)


async def probe_loop(
    pod: RunningPod, c: Container, probe: dict[str, Any], *, startup: bool
) -> None:
    """Probe until the startup probe passes, or (readiness) for as long as the process runs,
    flipping ``ready`` on the success / failure thresholds."""
    timing = probe_timing(probe)
    await asyncio.sleep(timing.initial_delay)
    ok_count = fail_count = 0
    while True:
        ok = await check(pod, c, probe, timeout=timing.timeout)
        ok_count, fail_count = (ok_count + 1, 0) if ok else (0, fail_count + 1)
        if startup and ok:
            return
        if not startup:
            if not c.ready and ok and ok_count >= timing.success_threshold:
                c.ready = True
                await pod.sync_status()
            elif c.ready and not ok and fail_count >= timing.failure_threshold:
                c.ready = False
                await pod.sync_status()
        await asyncio.sleep(timing.period if c.ready else min(timing.period, PROBE_FAST))


async def connect(
    pod: RunningPod, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``port`` on the pod's loopback: inside its network sandbox when it has
    one, else on the host's."""
    if pod.sandbox is None:
        return await asyncio.open_connection(LOOPBACK, port, ssl=ssl_context)
    reader, writer = await pod.sandbox.connect(port)
    if ssl_context is not None:
        await writer.start_tls(ssl_context, server_hostname=LOOPBACK)
    return reader, writer


async def check(pod: RunningPod, c: Container, probe: dict[str, Any], *, timeout: float) -> bool:
    """Run ``probe`` once; a kind this executor does not run passes (with a warning, once)."""
    try:
        if "tcpSocket" in probe:
            port = podenv.host_port(pod.pod, c.spec, probe["tcpSocket"].get("port"))
            if port is None:
                return False
            _, writer = await asyncio.wait_for(connect(pod, port), timeout)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        if "httpGet" in probe:
            return await http_probe(pod, c, probe["httpGet"], timeout)
        if "exec" in probe:
            return await exec_probe(pod, c, probe["exec"], timeout)
        if "grpc" in probe:
            spec = probe["grpc"] or {}
            port = podenv.host_port(pod.pod, c.spec, spec.get("port"))
            if port is None:
                return False
            target = (
                f"unix:{await pod.sandbox.unix_path(port)}"
                if pod.sandbox is not None
                else f"{LOOPBACK}:{port}"
            )
            return await grpc_check(target, str(spec.get("service") or ""), timeout)
    except ImportError as exc:
        pod.host.warn_once(f"grpc-probe:{pod.uid}:{c.name}", f"pod {pod.key}: {exc}")
        return False
    except (OSError, TimeoutError, ValueError, IndexError):
        return False
    pod.host.warn_once(
        f"probe:{pod.uid}:{c.name}",
        f"pod {pod.key}: container {c.name}: probe kind {sorted(probe)} is not run "
        "locally; treated as passing",
    )
    return True


async def http_probe(pod: RunningPod, c: Container, spec: dict[str, Any], timeout: float) -> bool:
    """GET the probe's path on 127.0.0.1; a status 200-399 passes."""
    port = podenv.host_port(pod.pod, c.spec, spec.get("port"))
    if port is None:
        return False
    context = None
    if str(spec.get("scheme") or "HTTP").upper() == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.wait_for(connect(pod, port, context), timeout)
    try:
        path = str(spec.get("path") or "/")
        headers = "".join(
            f"{h.get('name')}: {h.get('value')}\r\n" for h in spec.get("httpHeaders") or []
        )
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nUser-Agent: kube-probe/local"
            f"\r\nAccept: */*\r\nConnection: close\r\n{headers}\r\n".encode()
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        code = int(status_line.split()[1])
        return 200 <= code < 400
    finally:
        writer.close()


async def exec_probe(pod: RunningPod, c: Container, spec: dict[str, Any], timeout: float) -> bool:
    """Run the probe's command in the container's environment; exit code 0 passes."""
    assert c.plan is not None
    argv = c.plan.render([str(a) for a in spec.get("command") or []])
    env = c.plan.process_env(pod.host.base_env)
    exe = podenv.find_executable(argv[0], c.plan.cwd, host_env_path(env))
    if exe is None:
        return False
    executable, full, keep = await process_entry(pod, exe, argv)
    proc = await asyncio.create_subprocess_exec(
        full[0],
        *full[1:],
        executable=executable,
        cwd=c.plan.cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
        pass_fds=keep,
    )
    try:
        return await asyncio.wait_for(proc.wait(), timeout) == 0
    finally:
        killpg(proc.pid, signal.SIGKILL)
