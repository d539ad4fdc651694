"""Benchmark the admission webhook over HTTPS on loopback.

The server (uvicorn, our TLS context, the real app with a static lookup of the built-in
runtimes, plus the bare baselines) runs in a separate process pinned to one CPU;
the load generator runs in this process, pinned to the other. The load generator is a minimal
HTTP/1.1 keep-alive client over asyncio TLS streams (much cheaper than a full HTTP client, so
the server, not the client, is what saturates).

Runs, each ``--seconds`` long after a short warm-up:

1. saturated, ``--concurrency`` (32) connections in a closed loop, on the TrainJob validating
   route: throughput and p50/p90/p99 latency;
2. the same against the two bare FastAPI baselines on the same server, which check nothing:
   ``/bench-echo`` echoes the review back with an allowing ``response`` added (the baseline the
   target names: "a bare endpoint that echoes the review"), and ``/bench-allow`` parses the
   review and answers with the allowing response alone (cheaper still: the stricter
   comparison, reported beside it). The saturated runs are interleaved in ``--slices`` (6)
   slices per endpoint, in ABBA order (validate, echo, allow, allow, echo, validate, ...), so
   a change in the machine's speed during the benchmark (other tenants of a shared host)
   weighs on all alike instead of on whichever ran last; each endpoint still gets
   ``--seconds`` of load in all, and the figures are over all its slices (the per-slice
   throughputs are in the report too);
3. fixed rate, ``--rate`` (200) requests/s open loop on the validating route: latency measured
   from each request's scheduled start (no coordinated omission).

Targets: p99 <= 10 ms at 200 req/s; saturated throughput >= half the bare endpoint's.
Writes hack/bench/reports/webhook.json.

    python hack/bench/webhook.py [--seconds 60] [--slices 6] [--concurrency 32] [--rate 200]
        [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import resource
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import percentiles, proc_cpu_seconds
from fastapi import FastAPI, Request
from fastapi.responses import Response
from webhook_client import HOST, Connection, expect_allowed, http_request, review_body

from trainer.listeners.https_app import HttpsAppServer
from trainer.machinery.sockets import bind_socket
from trainer.runtime.builtin import builtin_runtimes
from webhooks.app import create_app
from webhooks.certs import ServerTLS, generate_bundle, write_cert_dir
from webhooks.lookup import StaticLookup

ROOT = Path(__file__).resolve().parents[2]
VALIDATE = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
ECHO = "/bench-echo"
ALLOW = "/bench-allow"


# ---------------------------------------------------------------------------------------------
# The server process


def add_baselines(app: FastAPI) -> FastAPI:
    """The two bare baselines, which check nothing, added to the webhook app: ``POST
    /bench-echo`` echoes the review back with an allowing ``response`` added (the whole review,
    as Kubernetes' example webhooks answer), and ``POST /bench-allow`` answers with the allowing
    response alone. Benchmark-only: the production app does not have them."""

    def allowed(review: dict[str, Any]) -> dict[str, Any]:
        return {"uid": review["request"]["uid"], "allowed": True}

    @app.post(ECHO, include_in_schema=False)
    async def bench_echo(request: Request) -> Response:
        review = json.loads(await request.body())
        review["response"] = allowed(review)
        return Response(json.dumps(review, ensure_ascii=True), media_type="application/json")

    @app.post(ALLOW, include_in_schema=False)
    async def bench_allow(request: Request) -> Response:
        review = json.loads(await request.body())
        answer = {"apiVersion": review["apiVersion"], "kind": review["kind"]}
        answer["response"] = allowed(review)
        return Response(json.dumps(answer, ensure_ascii=True), media_type="application/json")

    return app


def run_server(cert_dir: Path, cpu: int | None, log: bool) -> None:
    """Serve the app on an ephemeral port; print ``LISTENING <port>`` once accepting."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if log:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    tls = ServerTLS()
    tls.reload(cert_dir / "tls.crt", cert_dir / "tls.key")
    app = add_baselines(create_app(StaticLookup(runtimes=builtin_runtimes().values())))

    async def main() -> None:
        sock = bind_socket(HOST, 0)
        server = HttpsAppServer(app, HOST, 0, tls.context, sock=sock, handle_signals=True)
        watcher = asyncio.create_task(server.ready.wait())
        serving = asyncio.create_task(server.serve())
        await watcher
        print(f"LISTENING {server.port}", flush=True)
        await serving

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# The load generator


class CPUClock:
    """This process's CPU time over a run (is the load generator itself the bottleneck?)."""

    def __init__(self) -> None:
        self.start = time.process_time()
        self.wall = time.perf_counter()

    def utilisation(self) -> float:
        return round(
            (time.process_time() - self.start) / max(time.perf_counter() - self.wall, 1e-9), 3
        )


class Tally:
    """What one endpoint's saturated slices added up to."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.seconds = 0.0
        self.client_cpu = 0.0
        self.server_cpu = 0.0
        self.slices: list[float] = []

    def report(self) -> dict[str, Any]:
        seconds = max(self.seconds, 1e-9)
        return {
            "requests": len(self.latencies),
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "throughput_rps": round(len(self.latencies) / seconds, 1),
            **percentiles(self.latencies),
            "client_cpu_utilisation": round(self.client_cpu / seconds, 3),
            "server_cpu_utilisation": round(self.server_cpu / seconds, 3),
            "slice_throughput_rps": [round(x, 1) for x in self.slices],
        }


async def saturate(
    conns: list[Connection],
    request: bytes,
    seconds: float,
    check: Callable[[int, bytes], bool],
    tally: Tally | None = None,
    pid: int | None = None,
) -> dict[str, Any]:
    """Closed loop: every connection sends its next request as soon as the last returns.
    With ``tally``, the slice is also added to it (``pid``: the server, whose CPU is read)."""
    latencies: list[float] = []
    errors = 0
    clock = CPUClock()
    server_cpu = proc_cpu_seconds(pid) if pid is not None else 0.0
    start = time.perf_counter()
    deadline = start + seconds

    async def worker(conn: Connection) -> None:
        nonlocal errors
        while True:
            sent = time.perf_counter()
            if sent >= deadline:
                return
            status, body = await conn.post(request)
            latencies.append(time.perf_counter() - sent)
            if not check(status, body):
                errors += 1

    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.perf_counter() - start
    if tally is not None:
        tally.latencies += latencies
        tally.errors += errors
        tally.seconds += elapsed
        tally.client_cpu += clock.utilisation() * elapsed
        if pid is not None:
            tally.server_cpu += proc_cpu_seconds(pid) - server_cpu
        tally.slices.append(len(latencies) / elapsed)
    return {
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(elapsed, 3),
        "throughput_rps": round(len(latencies) / elapsed, 1),
        **percentiles(latencies),
        "client_cpu_utilisation": clock.utilisation(),
    }


def abba(names: list[str], rounds: int) -> list[str]:
    """``rounds`` turns of each name, in ABBA order (A B C C B A A B C ...): a linear drift in the
    machine's speed then costs every name the same."""
    order: list[str] = []
    for i in range(rounds):
        order += names if i % 2 == 0 else names[::-1]
    return order


async def interleaved(
    conns: list[Connection],
    requests: dict[str, bytes],
    seconds: float,
    slices: int,
    check: Callable[[int, bytes], bool],
    pid: int,
) -> dict[str, dict[str, Any]]:
    """Each of ``requests`` saturated for ``seconds`` in all, in ``slices`` interleaved
    slices on the same connections."""
    tallies = {name: Tally() for name in requests}
    for name in abba(list(requests), slices):
        await saturate(conns, requests[name], seconds / slices, check, tallies[name], pid)
    return {name: tally.report() for name, tally in tallies.items()}


async def fixed_rate(
    conns: list[Connection], request: bytes, seconds: float, rate: float
) -> dict[str, Any]:
    """Open loop at ``rate`` requests/s; latency from each request's scheduled start."""
    queue: asyncio.Queue[float | None] = asyncio.Queue()
    latencies: list[float] = []
    service: list[float] = []
    errors = 0
    total = int(seconds * rate)
    clock = CPUClock()
    start = time.perf_counter() + 0.05

    async def producer() -> None:
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                # Pacing the load (the point of an open-loop run), not waiting for a result.
                await asyncio.sleep(delay)
            queue.put_nowait(due)
        for _ in conns:
            queue.put_nowait(None)

    async def worker(conn: Connection) -> None:
        nonlocal errors
        while (due := await queue.get()) is not None:
            sent = time.perf_counter()
            status, body = await conn.post(request)
            done = time.perf_counter()
            latencies.append(done - due)
            service.append(done - sent)
            if not expect_allowed(status, body):
                errors += 1

    await asyncio.gather(producer(), *(worker(c) for c in conns))
    elapsed = time.perf_counter() - start
    return {
        "target_rps": rate,
        "requests": len(latencies),
        "errors": errors,
        "achieved_rps": round(len(latencies) / elapsed, 1),
        "latency_from_schedule": percentiles(latencies),
        "service_latency": percentiles(service),
        "client_cpu_utilisation": clock.utilisation(),
    }


async def with_connections(
    port: int,
    ctx: ssl.SSLContext,
    n: int,
    run: Callable[[list[Connection]], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    conns = [await Connection.open(port, ctx) for _ in range(n)]
    try:
        return await run(conns)
    finally:
        await asyncio.gather(*(c.close() for c in conns))


async def measured(pid: int, run: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """``run``'s result plus the server process's CPU utilisation while it ran."""
    cpu, wall = proc_cpu_seconds(pid), time.perf_counter()
    result = await run
    result["server_cpu_utilisation"] = round(
        (proc_cpu_seconds(pid) - cpu) / (time.perf_counter() - wall), 3
    )
    return result


async def load(port: int, ca: bytes, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    ctx = ssl.create_default_context(cadata=ca.decode())
    body = review_body()
    validate = http_request(VALIDATE, body)
    echo = http_request(ECHO, body)
    allow = http_request(ALLOW, body)
    n = args.concurrency
    results: dict[str, Any] = {}

    def ok(status: int, payload: bytes) -> bool:
        return expect_allowed(status, payload)

    # Warm-up (imports, caches, connection set-up) is not measured.
    for request in (validate, echo, allow):

        async def warm(conns: list[Connection], request: bytes = request) -> dict[str, Any]:
            return await saturate(conns, request, 2, ok)

        await with_connections(port, ctx, n, warm)

    print(
        f"saturated validate, bare echo and bare allow, {n} connections, {args.seconds:.0f} s "
        f"each in {args.slices} interleaved slices ...",
        flush=True,
    )
    every = await with_connections(
        port,
        ctx,
        n,
        lambda c: interleaved(
            c,
            {"validate": validate, "echo": echo, "allow": allow},
            args.seconds,
            args.slices,
            ok,
            pid,
        ),
    )
    results["validate_saturated"] = every["validate"]
    results["echo_saturated"] = every["echo"]
    results["allow_saturated"] = every["allow"]
    for name in ("validate", "echo", "allow"):
        print(f"  {name + ':':10s}{summary(results[name + '_saturated'])}", flush=True)
    print(f"fixed rate {args.rate:.0f} req/s on validate, {args.seconds:.0f} s ...", flush=True)
    results["validate_fixed_rate"] = await measured(
        pid,
        with_connections(port, ctx, n, lambda c: fixed_rate(c, validate, args.seconds, args.rate)),
    )
    fr = results["validate_fixed_rate"]
    print(
        f"  achieved {fr['achieved_rps']} req/s, p50 {fr['latency_from_schedule']['p50_ms']} ms, "
        f"p99 {fr['latency_from_schedule']['p99_ms']} ms, errors {fr['errors']}",
        flush=True,
    )
    return results


def summary(r: dict[str, Any]) -> str:
    return (
        f"{r['throughput_rps']} req/s, p50 {r['p50_ms']} ms, p90 {r['p90_ms']} ms, "
        f"p99 {r['p99_ms']} ms, errors {r['errors']}, client CPU {r['client_cpu_utilisation']}, "
        f"server CPU {r['server_cpu_utilisation']}, slices "
        + " ".join(f"{x:.0f}" for x in r.get("slice_throughput_rps", []))
    )


async def start_server(
    cert_dir: Path, cpu: int | None, args: argparse.Namespace
) -> tuple[asyncio.subprocess.Process, int]:
    cmd = [sys.executable, __file__, "--serve", "--cert-dir", str(cert_dir)]
    if cpu is not None:
        cmd += ["--server-cpu", str(cpu)]
    if args.log:
        cmd.append("--log")
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line.startswith(b"LISTENING "):
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    return proc, int(line.split()[1])


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu = cpus[0] if len(cpus) >= 2 else None
    client_cpu = cpus[1] if len(cpus) >= 2 else None
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="webhook-bench-") as tmp:
        bundle = generate_bundle(["localhost", HOST], datetime.now(UTC))
        write_cert_dir(tmp, bundle)
        proc, port = await start_server(Path(tmp), server_cpu, args)
        try:
            results = await load(port, bundle.ca_cert, args, proc.pid)
        finally:
            proc.terminate()  # SIGTERM: uvicorn's graceful shutdown
            await asyncio.wait_for(proc.wait(), 30)
    validate = results["validate_saturated"]
    echo = results["echo_saturated"]
    fixed = results["validate_fixed_rate"]
    ratio = validate["throughput_rps"] / max(echo["throughput_rps"], 1e-9)
    allow = results["allow_saturated"]
    allow_ratio = validate["throughput_rps"] / max(allow["throughput_rps"], 1e-9)
    return {
        "benchmark": "webhook",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": len(cpus),
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "transport": "HTTPS (TLS 1.3, ECDSA P-256) on loopback, HTTP/1.1 keep-alive, uvicorn h11",
        "seconds_per_run": args.seconds,
        "saturated_slices_per_endpoint": args.slices,
        "saturated_order": "ABBA (validate, echo, allow, allow, echo, validate, ...)",
        "concurrency": args.concurrency,
        "request_bytes": len(review_body()),
        "server_logging": "INFO to stderr" if args.log else "off",
        # Other work on the machine skews the figures: the 1/5/15-minute load averages.
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "peak_rss_client_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        **results,
        "targets": {
            "fixed_rate_p99_ms_max": 10.0,
            "fixed_rate_p99_ms": fixed["latency_from_schedule"]["p99_ms"],
            "fixed_rate_p99_met": fixed["latency_from_schedule"]["p99_ms"] <= 10.0,
            "throughput_ratio_min": 0.5,
            "throughput_ratio_validate_over_bare": round(ratio, 3),
            "throughput_ratio_met": ratio >= 0.5,
            # Not the target: against the cheaper allow-only endpoint.
            "throughput_ratio_validate_over_allow_only": round(allow_ratio, 3),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="load per endpoint and run, in seconds"
    )
    parser.add_argument(
        "--slices",
        type=int,
        default=6,
        help="interleaved slices per endpoint in the saturated runs (1: one run each)",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=float, default=200.0, help="fixed-rate run, requests/s")
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/webhook.json")
    parser.add_argument("--log", action="store_true", help="server logs every review (INFO)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--server-cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slices < 1:
        parser.error("--slices must be at least 1")
    if args.serve:
        run_server(args.cert_dir, args.server_cpu, args.log)
        return 0
    report = asyncio.run(bench(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    t = report["targets"]
    print(
        f"p99 at {args.rate:.0f} req/s: {t['fixed_rate_p99_ms']} ms "
        f"({'met' if t['fixed_rate_p99_met'] else 'MISSED'} <= 10 ms); "
        f"validate/bare echo throughput {t['throughput_ratio_validate_over_bare']} "
        f"({'met' if t['throughput_ratio_met'] else 'MISSED'} >= 0.5); "
        f"validate/bare allow-only {t['throughput_ratio_validate_over_allow_only']}"
    )
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
