"""The startup, readiness and liveness probes of a locally run container, as the kubelet's
prober runs them.

A startupProbe gates ``started`` (and the other two); a readinessProbe flips ``ready`` on its
success / failure thresholds for as long as the process runs; a livenessProbe, once the
container has started and ``initialDelaySeconds`` after its process started, runs every
``periodSeconds``, and after ``failureThreshold`` failures in a row the container is killed
(:func:`kill_unhealthy`) and restarted as its pod's ``restartPolicy`` says (never under
``Never``). Each failed liveness probe is a Warning ``Unhealthy`` Event, ``Liveness probe
failed: <what the prober saw>``, and the kill a Normal ``Killing`` Event, ``Container <name>
failed liveness probe, will be restarted``.

Kinds: ``tcpSocket`` (the host port the pod's port was mapped to), ``httpGet`` (127.0.0.1,
HTTPS without verification), ``exec`` (the container's environment and working directory) and
``grpc`` (grpc.health.v1 on the mapped port: :mod:`~trainer.local.executor.kubelet.grpc_probe`). A
failure says what the kubelet says (``HTTP probe failed with statuscode: 500``, ``Get
"http://127.0.0.1:8080/healthz": dial tcp 127.0.0.1:8080: connect: connection refused``, an
exec probe's output); a probe that cannot be run at all (no such port name, no such
executable, no grpcio) is an error the kubelet throws away: it counts neither way.

Timing, bounded for a local run (:func:`probe_timing`): periodSeconds at least 0.1 s and at
most 5 s, initialDelaySeconds at most 30 s, timeoutSeconds from 1 to 10 s. Until a container
first turns ready its startup and readiness probes run every 0.25 s (a local process starts
faster than a pod); liveness keeps its period. The grace period of a liveness kill is the
probe's ``terminationGracePeriodSeconds``, else the pod's (default 30), at least 2 s as the
kubelet gives, and at most 5 s here (:data:`~trainer.local.executor.kubelet.podhost.GRACE_CAP`).

How often and how long to probe, and what a liveness failure does, are pure functions
(:func:`probe_timing`, :func:`liveness_fails`, :func:`kill_grace`, :func:`kill_message`);
running one probe (:func:`check`) is separate from the loops that react to its results.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
from dataclasses import dataclass
from typing import Any

from trainer.kube.events import NORMAL, WARNING
from trainer.local.executor.kubelet.grpc_probe import grpc_check
from trainer.local.executor.kubelet.podhost import (
    GRACE_CAP,
    Container,
    RunningPod,
    as_float,
    host_env_path,
    killpg,
    process_entry,
)
from trainer.local.executor.kubelet.policy import podenv
from trainer.local.executor.policy.podfields import LOOPBACK

PROBE_FAST = 0.25
PROBE_PERIOD_CAP = 5.0
PROBE_DELAY_CAP = 30.0
PROBE_TIMEOUT_CAP = 10.0
DEFAULT_GRACE = 30.0
"""terminationGracePeriodSeconds when a pod does not say (the API server's default)."""
MIN_KILL_GRACE = 2.0
"""``minimumGracePeriodInSeconds``: the kubelet always gives a killed container this long."""
EXEC_OUTPUT_LIMIT = 10 * 1024
"""What the kubelet keeps of an exec probe's output (``maxReadLength``)."""


@dataclass(frozen=True)
class ProbeResult:
    """One probe's outcome: ``ok``, what the prober says about it (``output``), and
    ``errored`` when the probe could not be run at all (the kubelet throws such a result
    away: it counts neither as a success nor as a failure)."""

    ok: bool
    output: str = ""
    errored: bool = False


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


def liveness_fails(failures: int, timing: ProbeTiming) -> bool:
    """Whether ``failures`` failed liveness probes in a row kill the container."""
    return failures >= timing.failure_threshold


def kill_grace(pod_spec: dict[str, Any], probe: dict[str, Any]) -> float:
    """How long a container killed for its liveness probe has between SIGTERM and SIGKILL:
    the probe's ``terminationGracePeriodSeconds``, else the pod's (``setTerminationGracePeriod``),
    at least :data:`MIN_KILL_GRACE` (the kubelet's ``killContainer``), at most
    :data:`~trainer.local.executor.kubelet.podhost.GRACE_CAP` here."""
    grace = probe.get("terminationGracePeriodSeconds")
    if grace is None:
        grace = pod_spec.get("terminationGracePeriodSeconds")
    seconds = as_float(grace, DEFAULT_GRACE)
    return min(max(seconds, MIN_KILL_GRACE), GRACE_CAP)


def kill_message(container: str, *, restart: bool) -> str:
    """The kubelet's ``Killing`` message for a container that failed its liveness probe."""
    message = f"Container {container} failed liveness probe"
    return f"{message}, will be restarted" if restart else message


def restarts_after_kill(policy: str, *, sidecar: bool) -> bool:
    """Whether a container killed for its liveness probe is started again: whatever its exit
    code, unless the pod's restartPolicy is Never (a sidecar always is)."""
    return sidecar or policy != "Never"


async def run_probes(pod: RunningPod, c: Container, started_at: float) -> None:
    """Run the container's startup probe until it passes, then its readiness and liveness
    probes side by side. ``started_at`` is when the process started (the event loop's
    clock)."""
    startup = c.spec.get("startupProbe")
    readiness = c.spec.get("readinessProbe")
    liveness = c.spec.get("livenessProbe")
    if startup:
        await probe_loop(pod, c, startup, startup=True)
        c.started = True
        c.started_event.set()
        c.ready = not readiness
        await pod.sync_status()
    loops = []
    if readiness:
        loops.append(probe_loop(pod, c, readiness, startup=False))
    if liveness:
        loops.append(liveness_loop(pod, c, liveness, started_at))
    await asyncio.gather(*loops)


async def probe_loop(
    pod: RunningPod, c: Container, probe: dict[str, Any], *, startup: bool
) -> None:
    """Probe until the startup probe passes, or (readiness) for as long as the process runs,
    flipping ``ready`` on the success / failure thresholds."""
    timing = probe_timing(probe)
    await asyncio.sleep(timing.initial_delay)
    ok_count = fail_count = 0
    while True:
        result = await check(pod, c, probe, timeout=timing.timeout)
        if not result.errored:
            ok = result.ok
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


async def liveness_loop(
    pod: RunningPod, c: Container, probe: dict[str, Any], started_at: float
) -> None:
    """Probe every period from ``initialDelaySeconds`` after the process started; a failure
    is an ``Unhealthy`` Event, and ``failureThreshold`` of them in a row kill the container."""
    timing = probe_timing(probe)
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, started_at + timing.initial_delay - loop.time()))
    failures = 0
    while not pod.terminating.is_set():
        result = await check(pod, c, probe, timeout=timing.timeout)
        if result.errored:
            pod.event(WARNING, "Unhealthy", f"Liveness probe errored: {result.output}")
        elif result.ok:
            failures = 0
        else:
            failures += 1
            pod.event(WARNING, "Unhealthy", f"Liveness probe failed: {result.output}")
            if liveness_fails(failures, timing):
                await kill_unhealthy(pod, c, probe)
                return
        await asyncio.sleep(timing.period)


async def kill_unhealthy(pod: RunningPod, c: Container, probe: dict[str, Any]) -> None:
    """Kill a container that failed its liveness probe, as the kubelet does: a ``Killing``
    Event, SIGTERM to its process group, SIGKILL once the grace period is over. Its exit is
    then reported as any exit (137 after SIGKILL, 143 after SIGTERM) and the restart policy
    decides (:func:`restarts_after_kill`)."""
    proc = c.proc
    if proc is None or pod.terminating.is_set():
        return
    c.killed_by_probe = True
    restart = restarts_after_kill(pod.policy, sidecar=c.sidecar)
    pod.event(NORMAL, "Killing", kill_message(c.name, restart=restart))
    killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), kill_grace(pod.pod.get("spec") or {}, probe))
    killpg(proc.pid, signal.SIGKILL)


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


def dial_error(port: int, exc: BaseException) -> str:
    """A failed connection as Go's dialer words it (``dial tcp 127.0.0.1:8080: connect:
    connection refused``, ``... i/o timeout``)."""
    where = f"dial tcp {LOOPBACK}:{port}"
    if isinstance(exc, TimeoutError):
        return f"{where}: i/o timeout"
    if isinstance(exc, OSError) and exc.errno:
        text = os.strerror(exc.errno)
        return f"{where}: connect: {text[:1].lower()}{text[1:]}"
    return f"{where}: {exc}"


def _no_port(c: Container, port: Any) -> ProbeResult:
    return ProbeResult(False, f"couldn't find port: {port} in container {c.name}", errored=True)


async def check(
    pod: RunningPod, c: Container, probe: dict[str, Any], *, timeout: float
) -> ProbeResult:
    """Run ``probe`` once; a kind this executor does not run passes (with a warning, once).
    A probe that fails in a way the kinds do not word (an exec probe's process that cannot be
    started) fails with the error."""
    try:
        if "tcpSocket" in probe:
            return await tcp_probe(pod, c, probe["tcpSocket"] or {}, timeout)
        if "httpGet" in probe:
            return await http_probe(pod, c, probe["httpGet"] or {}, timeout)
        if "exec" in probe:
            return await exec_probe(pod, c, probe["exec"] or {}, timeout)
        if "grpc" in probe:
            return await grpc_probe(pod, c, probe["grpc"] or {}, timeout)
    except (OSError, ValueError) as exc:
        return ProbeResult(False, str(exc))
    pod.host.warn_once(
        f"probe:{pod.uid}:{c.name}",
        f"pod {pod.key}: container {c.name}: probe kind {sorted(probe)} is not run "
        "locally; treated as passing",
    )
    return ProbeResult(True)


async def tcp_probe(
    pod: RunningPod, c: Container, spec: dict[str, Any], timeout: float
) -> ProbeResult:
    """Connect to the probe's port; a connection passes."""
    port = podenv.host_port(pod.pod, c.spec, spec.get("port"))
    if port is None:
        return _no_port(c, spec.get("port"))
    try:
        _, writer = await asyncio.wait_for(connect(pod, port), timeout)
    except (OSError, TimeoutError) as exc:
        return ProbeResult(False, dial_error(port, exc))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ProbeResult(True)


async def grpc_probe(
    pod: RunningPod, c: Container, spec: dict[str, Any], timeout: float
) -> ProbeResult:
    """grpc.health.v1 Check on the probe's port
    (:mod:`~trainer.local.executor.kubelet.grpc_probe`)."""
    port = podenv.host_port(pod.pod, c.spec, spec.get("port"))
    if port is None:
        return _no_port(c, spec.get("port"))
    target = (
        f"unix:{await pod.sandbox.unix_path(port)}"
        if pod.sandbox is not None
        else f"{LOOPBACK}:{port}"
    )
    try:
        ok, output = await grpc_check(
            target, str(spec.get("service") or ""), timeout, f"{LOOPBACK}:{port}"
        )
    except ImportError as exc:
        pod.host.warn_once(f"grpc-probe:{pod.uid}:{c.name}", f"pod {pod.key}: {exc}")
        return ProbeResult(False, str(exc), errored=True)
    except (OSError, ValueError) as exc:
        return ProbeResult(False, f"error: health rpc probe failed: {exc}")
    return ProbeResult(ok, output)


async def http_probe(
    pod: RunningPod, c: Container, spec: dict[str, Any], timeout: float
) -> ProbeResult:
    """GET the probe's path on 127.0.0.1; a status 200-399 passes."""
    port = podenv.host_port(pod.pod, c.spec, spec.get("port"))
    if port is None:
        return _no_port(c, spec.get("port"))
    scheme = str(spec.get("scheme") or "HTTP").lower()
    path = str(spec.get("path") or "/")
    url = f"{scheme}://{LOOPBACK}:{port}{path}"
    context = None
    if scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        reader, writer = await asyncio.wait_for(connect(pod, port, context), timeout)
    except (OSError, TimeoutError) as exc:
        return ProbeResult(False, f'Get "{url}": {dial_error(port, exc)}')
    try:
        headers = "".join(
            f"{h.get('name')}: {h.get('value')}\r\n" for h in spec.get("httpHeaders") or []
        )
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nUser-Agent: kube-probe/local"
            f"\r\nAccept: */*\r\nConnection: close\r\n{headers}\r\n".encode()
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
    except TimeoutError:
        return ProbeResult(
            False,
            f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting '
            "headers)",
        )
    except OSError as exc:
        return ProbeResult(False, f'Get "{url}": {exc.strerror or exc}')
    finally:
        writer.close()
    try:
        code = int(status_line.split()[1])
    except (IndexError, ValueError):
        line = status_line.decode(errors="replace").strip()
        return ProbeResult(False, f'Get "{url}": malformed HTTP response "{line}"')
    if 200 <= code < 400:
        return ProbeResult(True)
    return ProbeResult(False, f"HTTP probe failed with statuscode: {code}")


async def _read_limited(stream: asyncio.StreamReader) -> bytes:
    """Everything ``stream`` gives until its end, keeping the first :data:`EXEC_OUTPUT_LIMIT`
    bytes (the rest is read and dropped, so the writer never blocks)."""
    kept = b""
    while chunk := await stream.read(65536):
        if len(kept) < EXEC_OUTPUT_LIMIT:
            kept += chunk[: EXEC_OUTPUT_LIMIT - len(kept)]
    return kept


async def exec_probe(
    pod: RunningPod, c: Container, spec: dict[str, Any], timeout: float
) -> ProbeResult:
    """Run the probe's command in the container's environment; exit code 0 passes. Its
    output (stdout and stderr, the first 10 KiB) is what a failure says."""
    assert c.plan is not None
    argv = c.plan.render([str(a) for a in spec.get("command") or []])
    if not argv:
        return ProbeResult(False, "exec probe without a command", errored=True)
    env = c.plan.process_env(pod.host.base_env)
    exe = podenv.find_executable(argv[0], c.plan.cwd, host_env_path(env))
    if exe is None:
        message = f'exec: "{argv[0]}": executable file not found in $PATH'
        return ProbeResult(False, message, errored=True)
    executable, full, keep = await process_entry(pod, exe, argv)
    proc = await asyncio.create_subprocess_exec(
        full[0],
        *full[1:],
        executable=executable,
        cwd=c.plan.cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        pass_fds=keep,
    )
    assert proc.stdout is not None
    reading = asyncio.get_running_loop().create_task(_read_limited(proc.stdout))
    try:
        code = await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        reading.cancel()
        return ProbeResult(False, f'command "{" ".join(argv)}" timed out')
    finally:
        killpg(proc.pid, signal.SIGKILL)  # what it left in its group holds the pipe no more
    try:
        output = await asyncio.wait_for(reading, 1.0)
    except TimeoutError:  # a process that left the group still holds it
        output = b""
    return ProbeResult(code == 0, output.decode(errors="replace"))
