"""Benchmark large admission reviews against small ones on the same webhook, over HTTPS.

Scenario: four concurrent mutations of a ~2.3 MB TrainJob (48,000 env vars) while
small TrainJob reviews (about 2 KB, the one hack/bench/webhook.py uses) arrive at a fixed rate
on their own connections; then one review of an 80,000-env TrainJob alone, with the same
stream of small ones. For each, the small reviews' latency (p50/p99/max, measured from each
request's scheduled start) and the large reviews' times. Where the large reviews run is the
variable, on the same app:

* ``process`` (the webhook's design: :mod:`webhooks.offload`, worker processes at nice 10);
* ``process-nice0``: the same at normal priority;
* ``thread``: the same two steps in a thread of this process (``asyncio.to_thread``);
* ``inline``: everything on the event loop (the webhook before reviews were offloaded).

The server runs in a separate process (so its event loop is the one measured), the load
generator in this one. On a shared machine the figures move with the other tenants: run it
more than once (``--repeat``) and compare modes within one run.

    python hack/bench/webhook_large.py [--modes process,thread,inline] [--repeat 2]
        [--rate 50] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib import percentiles, proc_cpu_seconds
from fastapi.responses import Response
from webhook_client import HOST, Connection, http_request, review_body

from trainer.admission.types import ClusterView
from trainer.listeners.https_app import HttpsAppServer
from trainer.machinery.sockets import bind_socket
from trainer.runtime.builtin import builtin_runtimes
from webhooks.app import PATH_MUTATE_TRAINJOB, PATH_VALIDATE_TRAINJOB, create_app
from webhooks.certs import ServerTLS, generate_bundle, write_cert_dir
from webhooks.lookup import StaticLookup
from webhooks.offload import Offload
from webhooks.review import Answer, Needs, Outcome, answer, finish_review, run_review

ROOT = Path(__file__).resolve().parents[2]


async def get_json(conn: Connection, path: str) -> Any:
    conn.writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    head = await conn.reader.readuntil(b"\r\n\r\n")
    length = 0
    for field in head.split(b"\r\n")[1:]:
        if field[:15].lower() == b"content-length:":
            length = int(field[15:])
    return json.loads(await conn.reader.readexactly(length))


class ThreadOffload(Offload):
    """The comparison: the same steps in threads of the serving process."""

    async def review(
        self,
        body: bytes,
        path: str,
        now: str,
        read_view: Callable[[Needs], Awaitable[ClusterView | Outcome]],
    ) -> Answer:
        result = await asyncio.to_thread(run_review, body, path, now, keep=True)
        if isinstance(result, Answer):
            return result
        view = await read_view(result)
        if isinstance(view, Outcome):
            return answer(result.uid, result.meta, view)
        return await asyncio.to_thread(finish_review, result, path, view, now)


def serve(cert_dir: Path, mode: str) -> None:
    tls = ServerTLS()
    tls.reload(cert_dir / "tls.crt", cert_dir / "tls.key")
    offload = {
        "process": Offload(),
        "process-nice0": Offload(nice=0),
        "thread": ThreadOffload(),
        "inline": Offload(inline_max_bytes=1 << 40),
    }[mode]
    app = create_app(StaticLookup(runtimes=builtin_runtimes().values()), offload=offload)
    lags: list[float] = []

    @app.get("/bench-lag", include_in_schema=False)
    async def lag() -> Response:
        """The event loop's lags since the last call (percentiles), then forgets them."""
        out = percentiles(lags)
        lags.clear()
        return Response(json.dumps(out), media_type="application/json")

    async def probe() -> None:
        # How late a 5 ms timer fires: how long the loop was held by something else.
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(max(0.0, time.perf_counter() - start - 0.005))

    async def main() -> None:
        server = HttpsAppServer(app, HOST, 0, tls.context, sock=bind_socket(HOST, 0))
        probing = asyncio.create_task(probe())
        serving = asyncio.create_task(server.serve())
        await server.ready.wait()
        print(f"LISTENING {server.port}", flush=True)
        try:
            await serving
        finally:
            probing.cancel()
            await offload.close()

    asyncio.run(main())


def large_review(env: int, uid: str) -> bytes:
    review = json.loads(review_body(uid))
    review["request"]["object"]["spec"]["trainer"]["env"] = [
        {"name": f"LARGE_ENV_{i}", "value": f"value-{i}"} for i in range(env)
    ]
    return json.dumps(review, separators=(",", ":")).encode()


async def scenario(
    port: int, ctx: ssl.SSLContext, larges: list[bytes], path: str, rate: float
) -> dict[str, Any]:
    """``larges`` at once on their own connections, small reviews at ``rate`` meanwhile."""
    small = http_request(PATH_VALIDATE_TRAINJOB, review_body("small"))
    conns = [await Connection.open(port, ctx) for _ in range(8)]
    big_conns = [await Connection.open(port, ctx) for _ in larges]
    for conn in conns:  # warm: connections, imports
        await conn.post(small)
    done = asyncio.Event()
    latencies: list[float] = []
    errors = 0

    async def smalls() -> None:
        nonlocal errors
        queue: asyncio.Queue[float] = asyncio.Queue()
        start = time.perf_counter()

        async def worker(conn: Connection) -> None:
            nonlocal errors
            while True:
                due = await queue.get()
                status, body = await conn.post(small)
                latencies.append(time.perf_counter() - due)
                if status != 200 or b'"allowed": true' not in body:
                    errors += 1
                queue.task_done()

        workers = [asyncio.create_task(worker(c)) for c in conns]
        i = 0
        while not done.is_set():
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                # Pacing the open-loop load, not waiting for a result.
                await asyncio.sleep(delay)
            queue.put_nowait(due)
            i += 1
        await queue.join()
        for w in workers:
            w.cancel()

    async def large(conn: Connection, body: bytes) -> tuple[float, bool]:
        sent = time.perf_counter()
        status, answer = await conn.post(http_request(path, body))
        return time.perf_counter() - sent, status == 200 and b'"allowed": true' in answer

    await get_json(conns[0], "/bench-lag")  # forget what came before
    stream = asyncio.create_task(smalls())
    started = time.perf_counter()
    results = await asyncio.gather(*(large(c, b) for c, b in zip(big_conns, larges, strict=True)))
    wall = time.perf_counter() - started
    done.set()
    await stream
    loop_lag = await get_json(conns[0], "/bench-lag")
    for conn in conns + big_conns:
        await conn.close()
    return {
        "large_reviews": len(larges),
        "large_bytes": len(larges[0]),
        "large_seconds": sorted(round(t, 2) for t, _ in results),
        "large_errors": sum(1 for _, ok in results if not ok),
        "large_wall_seconds": round(wall, 2),
        "small_requests": len(latencies),
        "small_errors": errors,
        "small_latency": percentiles(latencies),
        "server_loop_lag": loop_lag,
    }


async def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="webhook-large-") as tmp:
        bundle = generate_bundle(["localhost", HOST], datetime.now(UTC))
        write_cert_dir(tmp, bundle)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--serve",
            mode,
            "--cert-dir",
            tmp,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        port = int(line.split()[1])
        ctx = ssl.create_default_context(cadata=bundle.ca_cert.decode())
        try:
            # The first large review starts the workers: not measured.
            await scenario(port, ctx, [large_review(2000, "warm")], PATH_MUTATE_TRAINJOB, 20)
            cpu = proc_cpu_seconds(proc.pid)
            four = await scenario(
                port,
                ctx,
                [large_review(args.env, f"large-{i}") for i in range(4)],
                PATH_MUTATE_TRAINJOB,
                args.rate,
            )
            one = await scenario(
                port, ctx, [large_review(80_000, "huge")], PATH_VALIDATE_TRAINJOB, args.rate
            )
            return {
                "mode": mode,
                "four_mutations": four,
                "one_80k_env_validation": one,
                "server_main_process_cpu_seconds": round(proc_cpu_seconds(proc.pid) - cpu, 2),
            }
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)


def line(r: dict[str, Any]) -> str:
    s, lag = r["small_latency"], r["server_loop_lag"]
    return (
        f"large {r['large_bytes'] / 1e6:.2f} MB x{r['large_reviews']}: {r['large_seconds']} s; "
        f"small n={r['small_requests']} p50 {s['p50_ms']:.1f} p99 {s['p99_ms']:.1f} "
        f"max {s['max_ms']:.1f} ms; loop lag p99 {lag['p99_ms']:.1f} max {lag['max_ms']:.1f} ms; "
        f"errors {r['small_errors'] + r['large_errors']}"
    )


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for round_ in range(args.repeat):
        for mode in args.modes.split(","):
            result = await run_mode(mode, args)
            result["round"] = round_ + 1
            runs.append(result)
            print(f"[{round_ + 1}] {mode:8s} 4 mutations: {line(result['four_mutations'])}")
            print(f"[{round_ + 1}] {mode:8s} 80k env:     {line(result['one_80k_env_validation'])}")
    return {
        "benchmark": "webhook_large",
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "small_rate_rps": args.rate,
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--modes", default="process,thread,inline")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--rate", type=float, default=50.0, help="small reviews per second")
    parser.add_argument("--env", type=int, default=48_000, help="env vars of each mutation")
    parser.add_argument("--out", type=Path, default=ROOT / "hack/bench/reports/webhook_large.json")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.cert_dir, args.serve)
        return 0
    report = asyncio.run(bench(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
