"""The server processes of the simulation benchmark (hack/bench/simulate.py) besides the API
server: the controller with its admission webhook, and the executor (the JobSet and Job
controllers, the scheduler and the simulated kubelet). Each runs what the local plane runs
(trainer/cli/localplane.py), alone in its own process, so that the benchmark can give each its
CPU seconds and its peak memory:

    python hack/bench/simulate_roles.py _controller --kubeconfig K --webhook-port P
        --cert-dir D --info FILE
    python hack/bench/simulate_roles.py _executor --kubeconfig K --simulate FILE
        --workdir D --info FILE

Each writes ``--info`` once ready (the controller: its metrics URL; the executor: ``{}``) and,
the executor, on SIGTERM, the API requests it made by verb, resource and code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from trainer.cli.localplane import local_config
from trainer.cli.process import ProcessOptions, ProcessState, run_controller
from trainer.cli.signals import stop_on_signals
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube
from trainer.local.executor.api import API_TIMEOUT, USER_AGENT
from trainer.local.executor.runner import Executor
from trainer.local.executor.simulation.config import load_simulation
from trainer.machinery.gctuning import tune_for_serving

EXECUTOR_WORKERS = 8


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


async def serve_controller(args: argparse.Namespace) -> None:
    """The local plane's controller and webhook (its Configuration: ``local_config``)."""
    api = await new_api_client(args.kubeconfig)
    stop, ready, state = stop_on_signals(), asyncio.Event(), ProcessState()
    options = ProcessOptions(
        webhook=True,
        webhook_extra_hosts=("127.0.0.1",),
        webhook_cert_dir=str(args.cert_dir),
    )
    run = asyncio.create_task(
        run_controller(
            api, local_config(args.webhook_port), stop, options=options, ready=ready, state=state
        )
    )
    waiting = asyncio.create_task(ready.wait())
    try:
        await asyncio.wait({run, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if ready.is_set():
            await asyncio.wait_for(state.webhook_serving.wait(), 60)
            write_json(args.info, {"metrics_url": state.metrics_url})
        await run
    finally:
        waiting.cancel()
        await api.close()


async def serve_executor(args: argparse.Namespace) -> None:
    """The local plane's executor on ``--simulate``'s nodes, counting its API requests."""
    counts: dict[str, int] = {}

    def on_request(verb: str, resource: str, code: int, _seconds: float) -> None:
        key = f"{verb} {resource} {code}"
        counts[key] = counts.get(key, 0) + 1

    api = await new_api_client(args.kubeconfig, qps_user_agent=USER_AGENT)
    kube = Kube(api, timeout=API_TIMEOUT, on_request=on_request)
    stop = stop_on_signals()
    executor = Executor(
        kube,
        workdir=args.workdir,
        state_dir=args.workdir / "executor-state",
        simulation=load_simulation(args.simulate),
        # In a process of its own the executor waits on the API server's round trips, not on
        # a CPU it shares: more reconciles in flight (runner.py's WORKERS says why the local
        # plane keeps one).
        workers=EXECUTOR_WORKERS,
    )
    await executor.start()
    write_json(args.info, {})
    try:
        await stop.wait()
    finally:
        await executor.stop()
        write_json(args.info, {"requests": counts})
        await api.close()


def main(argv: list[str]) -> int:
    mode, rest = argv[0], argv[1:]
    tune_for_serving()  # as trainer apiserver and trainer controller do
    parser = argparse.ArgumentParser(prog=f"simulate_roles.py {mode}")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--info", type=Path, required=True)
    if mode == "_controller":
        parser.add_argument("--webhook-port", type=int, required=True)
        parser.add_argument("--cert-dir", type=Path, required=True)
        asyncio.run(serve_controller(parser.parse_args(rest)))
    elif mode == "_executor":
        parser.add_argument("--simulate", type=Path, required=True)
        parser.add_argument("--workdir", type=Path, required=True)
        asyncio.run(serve_executor(parser.parse_args(rest)))
    else:
        parser.error(f"unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
