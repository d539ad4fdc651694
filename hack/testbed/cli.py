"""The real-Kubernetes test bed by hand (docs/testbed.md).

    hack/cluster.py up [--nodes 4] [--gpus-per-node 8] [--without jobset,kueue,trainer]
                       [--controller ours|upstream]
    hack/cluster.py run [options] -- COMMAND...   # start, run COMMAND in the bed, stop
    hack/cluster.py exec -- kubectl get nodes     # a command in a running bed's namespace

``up`` starts the bed in a network namespace of its own (hack/testbed/netns.py), prints the
admin kubeconfig and the log of every program, and stops it all on Ctrl-C or SIGTERM, leaving no
process, port or file behind. ``run`` gives COMMAND ``KUBECONFIG`` and exits with its status.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bed as beds
import netns
from bins import BuildError, cache_root
from install import CONTROLLERS, PARTS, install_parts
from procs import BedError

STATE = cache_root() / "current.json"


def say(line: str) -> None:
    print(f"testbed: {line}", file=sys.stderr, flush=True)


def start(args: argparse.Namespace) -> beds.Bed:
    without = {p for p in args.without.split(",") if p}
    unknown = without - set(PARTS)
    if unknown:
        raise BedError(f"--without: unknown {sorted(unknown)}; accepted: {', '.join(PARTS)}")
    started = time.monotonic()
    bed = beds.start_bed(args.nodes, args.gpus_per_node, say=say)
    try:
        install_parts(bed, [p for p in PARTS if p not in without], say, args.controller)
        say(f"ready in {time.monotonic() - started:.1f} s")
    except BaseException:
        bed.stop(keep=args.keep)
        raise
    return bed


def report(bed: beds.Bed) -> None:
    say(f"kubeconfig: {bed.kubeconfig}")
    for name, log in bed.logs().items():
        say(f"log of {name}: {log}")


def up(args: argparse.Namespace) -> int:
    bed = start(args)
    report(bed)
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps({"pid": os.getpid(), "kubeconfig": str(bed.kubeconfig)}))
    say(f"ready; in another shell: {sys.argv[0]} exec -- kubectl get nodes; Ctrl-C stops it")
    stopped = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stopped.wait(1):
            dead = [name for name, alive in bed.alive().items() if not alive]
            if dead:
                say(f"{', '.join(dead)} exited; stopping (logs above)")
                return 1
    finally:
        STATE.unlink(missing_ok=True)
        say("stopping")
        bed.stop(keep=args.keep)
    return 0


def run(args: argparse.Namespace) -> int:
    if not args.command:
        raise BedError("run: give the command after --")
    bed = start(args)
    report(bed)
    try:
        env = {
            **os.environ,
            "KUBECONFIG": str(bed.kubeconfig),
            "TRAINER_TESTBED_ROOT": str(bed.root),
        }
        return subprocess.call(args.command, env=env)
    finally:
        bed.stop(keep=args.keep)


def exec_(args: argparse.Namespace) -> int:
    try:
        state = json.loads(STATE.read_text())
    except (OSError, ValueError):
        raise BedError(f"no running bed ({STATE} is missing): start one with 'up'") from None
    env = {**os.environ, "KUBECONFIG": state["kubeconfig"]}
    argv = netns.enter_argv(int(state["pid"]), args.command or ["bash"])
    return subprocess.call(argv, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    for verb in ("up", "run"):
        p = sub.add_parser(verb)
        p.add_argument("--nodes", type=int, default=4, help="KWOK nodes (default 4)")
        p.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu per node")
        p.add_argument("--without", default="", help=f"comma-separated parts to leave out: {PARTS}")
        p.add_argument("--keep", action="store_true", help="keep the bed's folder (logs) on exit")
        p.add_argument(
            "--controller", choices=CONTROLLERS, default="ours",
            help="whose Kubeflow Trainer to install: this repository's (default) or "
            "upstream's v2.3.0 release",
        )  # fmt: skip
        if verb == "run":
            p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("exec")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if getattr(args, "command", None) and args.command[0] == "--":
        args.command = args.command[1:]
    if args.verb == "exec":
        return exec_(args)
    if not netns.inside():
        # Again, in a network namespace made for the bed (netns.py says why).
        return subprocess.call(netns.wrap([sys.executable, *sys.argv]))
    try:
        return up(args) if args.verb == "up" else run(args)
    except (BedError, BuildError) as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
