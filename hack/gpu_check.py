"""Check this machine's GPUs on the local plane: what the node, the scheduler and the device
hand-out promise (docs/local-plane.md, "The node" and "Scheduling"), tried as a user tries it
(``trainer run`` subprocesses), one verdict line per scenario (docs/local-plane.md, "Checking a
GPU machine").

    hack/gpu-check.sh [--only a,b] [--fake-gpus N] [--steps 300] [--timeout 300] [--keep]

N is the number of GPUs ``nvidia-smi`` lists (or ``--fake-gpus N`` declares through
``--node-config``, for a dry run of the scheduling on a CPU-only machine). The scenarios:

``node``
    The Node advertises ``nvidia.com/gpu: N`` (capacity and allocatable) and GPU feature
    discovery's labels (a plane started in a subprocess, ``_node`` below).
``one-gpu``
    1 node x 1 GPU of DDP over NCCL (``hack/gpu_check_pod.py train`` under torchrun, whose
    ``--nproc-per-node auto`` must count 1): Complete, the process saw exactly one CUDA device
    and its UUID is the one assigned; steps/s.
``bare-vs-run``
    The same program under bare ``torchrun --nproc-per-node 1`` and under ``trainer run``: wall
    time to exit and steps/s of each; FAIL when ``trainer run`` trains at under half of bare's
    steps/s (what two ranks sharing one GPU look like).
``two-nodes-one-gpu-each``
    2 nodes x 1 GPU. N >= 2: both pods run at once on different GPUs, each seeing one; N == 1:
    it can never fit and ``trainer run`` exits 2 with kube-scheduler's Unschedulable message.
``more-gpus-than-node``
    1 node x (N+1) GPUs: ``trainer run`` exits 2 saying it can never run.
``no-gpu-container``
    A container without a GPU request gets ``CUDA_VISIBLE_DEVICES=""`` and
    ``NVIDIA_VISIBLE_DEVICES=void`` (and torch sees no CUDA device).
``queued``
    Two TrainJobs each needing all N GPUs, in one file: the second is reported waiting and runs
    after the first; the pods' own timestamps must not overlap.

CUDA parts run where torch (the interpreter running this) sees the GPUs; otherwise, and with
``--fake-gpus``, they SKIP with the reason and the scheduling parts still run, on the devices'
environment variables. Exit status: 0 when nothing FAILed, 1 otherwise, 2 when there is no GPU
to check (no ``nvidia-smi``, or it lists none) or the arguments are wrong. Only the standard
library is used here; the project is reached through its CLI (``python -m trainer.cli.main``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_check_jobs import (
    GPU,
    POD_PROGRAM,
    probe_job,
    runtime,
    stream,
    train_command,
    train_job,
)

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = (
    "node",
    "one-gpu",
    "bare-vs-run",
    "two-nodes-one-gpu-each",
    "more-gpus-than-node",
    "no-gpu-container",
    "queued",
)
QUERY = ("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")
SLOWDOWN_LIMIT = 0.5
"""``trainer run`` below this share of bare torchrun's steps/s is a FAIL."""
STOP_GRACE_S = 20.0
"""After a scenario's time is up, how long ``trainer run`` gets to stop its pods (SIGINT)."""
TAIL_LINES = 20
NODE_PREFIX = "node: "
"""How ``_node`` marks its answer among the plane's log lines."""


class NoGpu(Exception):
    """Nothing to check: no ``nvidia-smi``, or no GPU listed."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_mib: int


@dataclass(frozen=True)
class Host:
    gpus: list[Gpu]
    fake: bool
    no_cuda: str
    """Why the CUDA parts are skipped ("" when torch sees the GPUs)."""

    @property
    def n(self) -> int:
        return len(self.gpus)

    @property
    def uuids(self) -> set[str]:
        return {g.uuid for g in self.gpus}


@dataclass(frozen=True)
class Verdict:
    status: str
    scenario: str
    text: str
    details: list[str] = field(default_factory=list)
    """Lines shown under a FAIL (the end of ``trainer run``'s output)."""


@dataclass(frozen=True)
class Run:
    rc: int
    output: str
    wall_s: float

    def tail(self) -> list[str]:
        return self.output.splitlines()[-TAIL_LINES:]


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with the checkout first on PYTHONPATH (its trainer, not another)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def run_bounded(argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> Run:
    """Run ``argv`` with output captured; past ``timeout``, SIGINT (``trainer run`` then stops
    its pods, as at Ctrl-C), then SIGKILL after :data:`STOP_GRACE_S`."""
    began = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        out += f"\n[gpu-check: stopped after {timeout:g}s]"
    return Run(proc.returncode, out, time.monotonic() - began)


def reports(out: Path, prefix: str) -> list[dict[str, Any]]:
    """The pods' JSON reports named ``prefix*``, in name order."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob(f"{prefix}*.json"))]


def nvidia_gpus() -> list[Gpu]:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        raise NoGpu("no nvidia-smi on PATH")
    try:
        done = subprocess.run(
            [tool, *QUERY], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoGpu(f"{tool} did not answer: {exc}") from None
    if done.returncode != 0:
        raise NoGpu(f"{tool} failed: {(done.stderr or done.stdout).strip()}")
    gpus = []
    for line in filter(str.strip, done.stdout.splitlines()):
        fields = [f.strip() for f in line.split(",")]
        try:
            gpus.append(Gpu(int(fields[0]), fields[1], fields[2], int(float(fields[3]))))
        except (ValueError, IndexError):
            raise NoGpu(f"{tool}: unexpected line {line!r}") from None
    if not gpus:
        raise NoGpu(f"{tool} lists no GPU")
    return sorted(gpus, key=lambda g: g.index)


def fake_gpus(n: int) -> list[Gpu]:
    """What ``--node-config`` declares with ``count: n`` (UUIDs GPU-fake-<i>)."""
    return [Gpu(i, f"GPU-fake-{i}", "Fake GPU", 1024) for i in range(n)]


def torch_view(work: Path, gpus: list[Gpu]) -> tuple[str, str]:
    """(why the CUDA parts skip, or ""; what torch sees, for the header), from the pod
    program's probe run on the host."""
    out = work / "host"
    out.mkdir()
    env = subprocess_env(
        {"GPU_CHECK_OUT": str(out), "GPU_CHECK_GROUP": "host", "GPU_CHECK_TORCH": "1"}
    )
    done = run_bounded([sys.executable, str(POD_PROGRAM), "probe"], work, env, 120)
    found = reports(out, "probe-host")
    if done.rc != 0 or not found:
        last = (done.output.strip().splitlines() or ["no output"])[-1]
        return f"torch does not load in {sys.executable}: {last}", "torch: unusable"
    view = found[0]
    seen = f"torch {view['torch']} sees {view['device_count']} CUDA device(s)"
    if not view["cuda_available"]:
        if "+cpu" in view["torch"]:
            hint = "a CPU build: docs/local-plane.md, 'Checking a GPU machine', says which"
            return f"torch {view['torch']} sees no CUDA device ({hint})", seen
        return f"torch {view['torch']} sees no CUDA device", seen
    if not view["nccl"]:
        return f"torch {view['torch']} has no NCCL", seen
    unknown = {str(u).lower() for u in view["uuids"]} - {g.uuid.lower() for g in gpus}
    if unknown:
        return f"torch's device UUIDs {sorted(unknown)} are not nvidia-smi's", seen
    return "", seen


def verdict_line(v: Verdict) -> str:
    return f"{v.status} {v.scenario}: {v.text}"


class Checks:
    """The scenarios, each a method returning its :class:`Verdict`."""

    def __init__(self, host: Host, work: Path, args: argparse.Namespace) -> None:
        self.host = host
        self.work = work
        self.steps = args.steps
        self.timeout = args.timeout
        self.hold = args.hold
        self.node_config: Path | None = None
        if host.fake:
            self.node_config = work / "node.json"
            declared = {"gpus": [{"product": "Fake GPU", "memoryMiB": 1024, "count": host.n}]}
            self.node_config.write_text(json.dumps(declared), encoding="utf-8")

    # --- plumbing ---------------------------------------------------------------------------
    def place(self, scenario: str) -> tuple[Path, Path]:
        """The scenario's directory and, in it, the pods' report directory."""
        where = self.work / scenario
        out = where / "out"
        out.mkdir(parents=True)
        return where, out

    def trainer_run(self, where: Path, docs: list[dict[str, Any]], timeout: float) -> Run:
        """``trainer run`` of the check's runtime and ``docs``, in ``where``."""
        jobs = where / "jobs.yaml"
        jobs.write_text(stream([runtime(), *docs]), encoding="utf-8")
        argv = [sys.executable, "-m", "trainer.cli.main", "run", "-f", str(jobs)]
        argv += ["--timeout", f"{timeout:g}"]
        if self.node_config is not None:
            argv += ["--node-config", str(self.node_config)]
        return run_bounded(argv, where, subprocess_env(), timeout + 60)

    def fail(self, scenario: str, text: str, run: Run | None = None) -> Verdict:
        return Verdict("FAIL", scenario, text, run.tail() if run else [])

    # --- scenarios --------------------------------------------------------------------------
    def node(self) -> Verdict:
        name = "node"
        argv = [sys.executable, str(Path(__file__).resolve()), "_node"]
        if self.node_config is not None:
            argv.append(str(self.node_config))
        done = run_bounded(argv, self.work, subprocess_env(), 120)
        printed = [x for x in done.output.splitlines() if x.startswith(NODE_PREFIX)]
        if done.rc != 0 or not printed:
            return self.fail(name, f"no node from the plane (exit {done.rc})", done)
        node = json.loads(printed[-1].removeprefix(NODE_PREFIX))
        status, labels = node.get("status") or {}, node["metadata"].get("labels") or {}
        first = self.host.gpus[0]
        want = {
            "capacity " + GPU: str(self.host.n),
            "allocatable " + GPU: str(self.host.n),
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "-".join(first.name.split()),
            "nvidia.com/gpu.count": str(self.host.n),
            "nvidia.com/gpu.memory": str(first.memory_mib),
        }
        got = {
            "capacity " + GPU: (status.get("capacity") or {}).get(GPU),
            "allocatable " + GPU: (status.get("allocatable") or {}).get(GPU),
            **{k: labels.get(k) for k in want if k.startswith("nvidia.com/gpu.")},
        }
        wrong = [f"{k}={got[k]!r} (want {v!r})" for k, v in want.items() if got[k] != v]
        if wrong:
            return self.fail(name, "node local: " + ", ".join(wrong), done)
        return Verdict(
            "PASS",
            name,
            f"node local advertises {GPU}={self.host.n} (capacity and allocatable); labels "
            f"product={want['nvidia.com/gpu.product']}, count={self.host.n}, "
            f"memory={first.memory_mib}",
        )

    def one_gpu(self) -> Verdict:
        name = "one-gpu"
        if self.host.no_cuda:
            return Verdict("SKIP", name, self.host.no_cuda)
        where, out = self.place(name)
        run = self.trainer_run(where, [train_job(name, out, self.steps, nodes=1)], self.timeout)
        if run.rc != 0:
            return self.fail(name, f"trainer run exited {run.rc}, not Complete", run)
        ranks = reports(out, f"train-{name}-")
        problem = self.check_ranks(ranks, 1)
        if problem:
            return self.fail(name, problem, run)
        r = ranks[0]
        return Verdict(
            "PASS",
            name,
            f"1 node x 1 GPU Complete; its process saw 1 CUDA device, "
            f"{r['cuda_visible_devices']} (the one assigned); {r['steps_per_s']:.0f} steps/s "
            f"over {r['steps']} steps; trainer run exited after {run.wall_s:.1f} s",
        )

    def check_ranks(self, ranks: list[dict[str, Any]], world: int) -> str:
        """Why the train reports of a job of ``world`` ranks, one GPU each, are wrong ("")."""
        sizes = sorted({r["world_size"] for r in ranks})
        if sizes and sizes != [world]:
            return (
                f"world size {sizes}, want {world}: torchrun's --nproc-per-node auto counted "
                "more GPUs than the pod's"
            )
        if len(ranks) != world:
            return f"{len(ranks)} rank report(s), want {world}"
        for r in ranks:
            assigned = r["cuda_visible_devices"]
            where = f"rank {r['rank']}"
            if r["device_count"] != 1:
                return f"{where} saw {r['device_count']} CUDA devices, want 1"
            if assigned not in self.host.uuids:
                return f"{where}: CUDA_VISIBLE_DEVICES={assigned!r} is not one GPU's UUID"
            if r["nvidia_visible_devices"] != assigned:
                return f"{where}: NVIDIA_VISIBLE_DEVICES={r['nvidia_visible_devices']!r}"
            if r["uuid"] is None:
                return f"{where}: this torch gives no device UUID to compare"
            if r["uuid"] != assigned.lower():
                return f"{where} ran on {r['uuid']}, but was assigned {assigned}"
        if len({r["cuda_visible_devices"] for r in ranks}) != world:
            return "ranks shared a GPU: " + ", ".join(r["cuda_visible_devices"] for r in ranks)
        return ""

    def bare_vs_run(self) -> Verdict:
        name = "bare-vs-run"
        if self.host.no_cuda:
            return Verdict("SKIP", name, self.host.no_cuda)
        where, out = self.place(name)
        env = subprocess_env({"GPU_CHECK_OUT": str(out), "GPU_CHECK_GROUP": "bare"})
        env["GPU_CHECK_STEPS"] = str(self.steps)
        argv = [*train_command(), "--standalone", "--nproc-per-node", "1", str(POD_PROGRAM)]
        bare = run_bounded([*argv, "train"], where, env, self.timeout)
        mine = reports(out, "train-bare-")
        if bare.rc != 0 or not mine:
            return self.fail(name, f"bare torchrun exited {bare.rc}", bare)
        run = self.trainer_run(where, [train_job("run", out, self.steps, nodes=1)], self.timeout)
        theirs = reports(out, "train-run-")
        if run.rc != 0 or not theirs:
            return self.fail(name, f"trainer run exited {run.rc}, not Complete", run)
        b, t = mine[0]["steps_per_s"], theirs[0]["steps_per_s"]
        figures = (
            f"bare torchrun {bare.wall_s:.1f} s to exit, {b:.0f} steps/s; trainer run "
            f"{run.wall_s:.1f} s to exit, {t:.0f} steps/s ({run.wall_s - bare.wall_s:+.1f} s, "
            f"{100 * t / b:.0f}% of bare's steps/s)"
        )
        if t < SLOWDOWN_LIMIT * b:
            return self.fail(name, figures + f": under {SLOWDOWN_LIMIT:.0%} of bare", run)
        return Verdict("PASS", name, figures)

    def two_nodes_one_gpu_each(self) -> Verdict:
        name = "two-nodes-one-gpu-each"
        where, out = self.place(name)
        if self.host.n == 1:
            run = self.trainer_run(where, [probe_job(name, out, nodes=2, gpus=1)], 120)
            return self.never_fits(name, run, needs=2, out=out)
        if not self.host.no_cuda:
            run = self.trainer_run(where, [train_job(name, out, self.steps, nodes=2)], self.timeout)
            if run.rc != 0:
                return self.fail(name, f"trainer run exited {run.rc}, not Complete", run)
            ranks = reports(out, f"train-{name}-")
            problem = self.check_ranks(ranks, 2)
            if problem:
                return self.fail(name, problem, run)
            speeds = ", ".join(f"{r['steps_per_s']:.0f}" for r in ranks)
            uuids = " and ".join(r["cuda_visible_devices"] for r in ranks)
            return Verdict(
                "PASS",
                name,
                f"2 nodes x 1 GPU Complete: ranks on {uuids} at once, each saw 1 CUDA device; "
                f"{speeds} steps/s",
            )
        job = probe_job(name, out, nodes=2, gpus=1, meet=2)
        run = self.trainer_run(where, [job], 120)
        pods = reports(out, f"probe-{name}-")
        if run.rc != 0 or len(pods) != 2:
            return self.fail(name, f"trainer run exited {run.rc}, {len(pods)} pod report(s)", run)
        seen = [p["cuda_visible_devices"] for p in pods]
        if any(s not in self.host.uuids for s in seen) or len(set(seen)) != 2:
            return self.fail(name, f"pods saw CUDA_VISIBLE_DEVICES {seen}, want 2 distinct", run)
        if any(p["nvidia_visible_devices"] != p["cuda_visible_devices"] for p in pods):
            return self.fail(name, "NVIDIA_VISIBLE_DEVICES differs from CUDA_VISIBLE_DEVICES")
        return Verdict(
            "PASS",
            name,
            f"2 pods ran at once with CUDA_VISIBLE_DEVICES {seen[0]} and {seen[1]} "
            f"({self.host.no_cuda}: CUDA not run)",
        )

    def never_fits(self, name: str, run: Run, *, needs: int, out: Path) -> Verdict:
        expected = [
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
            f"(needs {needs} {GPU}, {self.host.n} free)",
            "can never run on this node",
        ]
        missing = [e for e in expected if e not in run.output]
        if run.rc != 2 or missing:
            return self.fail(name, f"trainer run exited {run.rc}, missing {missing}", run)
        if any(out.iterdir()):
            return self.fail(name, "a pod ran", run)
        return Verdict(
            "PASS",
            name,
            f"{needs} {GPU} on a node of {self.host.n}: never fits, trainer run exited 2 after "
            f"{run.wall_s:.1f} s: Insufficient {GPU} (needs {needs}, {self.host.n} free)",
        )

    def more_gpus_than_node(self) -> Verdict:
        name = "more-gpus-than-node"
        where, out = self.place(name)
        run = self.trainer_run(where, [probe_job(name, out, nodes=1, gpus=self.host.n + 1)], 120)
        return self.never_fits(name, run, needs=self.host.n + 1, out=out)

    def no_gpu_container(self) -> Verdict:
        name = "no-gpu-container"
        where, out = self.place(name)
        job = probe_job(name, out, nodes=1, gpus=0, torch=not self.host.no_cuda)
        run = self.trainer_run(where, [job], 120)
        pods = reports(out, f"probe-{name}-")
        if run.rc != 0 or len(pods) != 1:
            return self.fail(name, f"trainer run exited {run.rc}, {len(pods)} pod report(s)", run)
        pod = pods[0]
        cvd, nvd = pod["cuda_visible_devices"], pod["nvidia_visible_devices"]
        if cvd != "" or nvd != "void":
            return self.fail(
                name, f"CUDA_VISIBLE_DEVICES={cvd!r} NVIDIA_VISIBLE_DEVICES={nvd!r}", run
            )
        text = (
            'a pod without a GPU request got CUDA_VISIBLE_DEVICES="", NVIDIA_VISIBLE_DEVICES=void'
        )
        if self.host.no_cuda:
            return Verdict("PASS", name, f"{text} ({self.host.no_cuda}: torch not asked)")
        if pod["cuda_available"] or pod["device_count"] != 0:
            return self.fail(name, f"torch saw {pod['device_count']} CUDA device(s)", run)
        return Verdict("PASS", name, f"{text}; torch.cuda.is_available() is False")

    def queued(self) -> Verdict:
        name = "queued"
        where, out = self.place(name)
        n, torch = self.host.n, not self.host.no_cuda
        jobs = [
            probe_job(job, out, nodes=1, gpus=n, hold=self.hold, torch=torch)
            for job in ("queued-a", "queued-b")
        ]
        run = self.trainer_run(where, jobs, 120)
        pods = sorted(reports(out, "probe-queued-"), key=lambda p: p["start"])
        if run.rc != 0 or len(pods) != 2:
            return self.fail(name, f"trainer run exited {run.rc}, {len(pods)} pod report(s)", run)
        first, second = pods
        gap = second["start"] - first["end"]
        if gap < 0:
            return self.fail(name, f"{second['group']} started {-gap:.1f} s before the end", run)
        waited = f"TrainJob default/{second['group']} waiting:"
        if waited not in run.output:
            return self.fail(name, f"no '{waited}' line", run)
        for pod in pods:
            seen = set(pod["cuda_visible_devices"].split(","))
            if seen != self.host.uuids:
                return self.fail(name, f"{pod['group']} saw {sorted(seen)}, want all {n}", run)
            if torch and pod["device_count"] != n:
                return self.fail(name, f"{pod['group']}: {pod['device_count']} CUDA devices", run)
        return Verdict(
            "PASS",
            name,
            f"2 TrainJobs of {n} {GPU}: {second['group']} waited and started {gap:.1f} s after "
            f"{first['group']} ended; each saw all {n} GPU(s), never at once",
        )


def header(host: Host, seen: str) -> str:
    if host.fake:
        listed = ", ".join(g.uuid for g in host.gpus)
        return f"gpu-check: {host.n} fake GPU(s) declared with --node-config: {listed}"
    listed = "; ".join(f"{g.index} {g.name} {g.uuid} {g.memory_mib} MiB" for g in host.gpus)
    return f"gpu-check: {host.n} GPU(s) from nvidia-smi: {listed}; {seen}"


def run_checks(args: argparse.Namespace) -> int:
    try:
        gpus = fake_gpus(args.fake_gpus) if args.fake_gpus else nvidia_gpus()
    except NoGpu as exc:
        print(f"gpu-check: {exc}: no NVIDIA GPU to check (--fake-gpus N dry-runs the scheduling)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    if args.fake_gpus:
        no_cuda, seen = "--fake-gpus: the declared GPUs are not devices", ""
    else:
        no_cuda, seen = torch_view(work, gpus)
    host = Host(gpus, bool(args.fake_gpus), no_cuda)
    print(header(host, seen), flush=True)
    checks = Checks(host, work, args)
    methods: dict[str, Callable[[], Verdict]] = {
        s: getattr(checks, s.replace("-", "_")) for s in SCENARIOS
    }
    verdicts = []
    for scenario in args.only:
        print(f"running scenario {scenario}...", flush=True)
        verdict = methods[scenario]()
        verdicts.append(verdict)
        print(verdict_line(verdict), flush=True)
        for line in verdict.details:
            print(f"    | {line}")
    failed = [v for v in verdicts if v.status == "FAIL"]
    counts = {s: sum(v.status == s for v in verdicts) for s in ("PASS", "FAIL", "SKIP")}
    print("gpu-check: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if failed or args.keep:
        print(f"gpu-check: outputs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def print_node(config: str | None) -> int:
    """``_node [CONFIG]``: start a plane, print its Node as JSON once registered, stop."""
    # Only this subprocess loads the project; the driver reaches it through its CLI.
    import asyncio  # noqa: PLC0415

    from trainer.cli.localplane import start_local_plane  # noqa: PLC0415
    from trainer.local.executor.node.config import load_node_config  # noqa: PLC0415

    async def main() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="gpu-check-node-") as tmp:
            plane = await start_local_plane(
                work_dir=Path(tmp),
                node_config=load_node_config(config) if config else None,
            )
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    node = plane.server.storage.get_object("v1", "nodes", "", "local")
                    if node is not None:
                        return dict(node)
                    await asyncio.sleep(0.05)
                raise SystemExit("the node was not registered within 30 s")
            finally:
                await plane.close()

    print(NODE_PREFIX + json.dumps(asyncio.run(main())))
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu-check", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    parser.add_argument("--fake-gpus", type=int, default=0, metavar="N", help="declare N GPUs")
    parser.add_argument("--steps", type=int, default=300, help="timed training steps")
    parser.add_argument("--timeout", type=float, default=300, help="per training run, seconds")
    parser.add_argument("--hold", type=float, default=3, help="queued: first job's hold, s")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown or not only:
        parser.error(f"--only: unknown {unknown}; the scenarios: {', '.join(SCENARIOS)}")
    if args.fake_gpus < 0 or args.steps < 1 or args.timeout <= 0 or args.hold < 0:
        parser.error("--fake-gpus, --steps, --timeout and --hold must be positive")
    args.only = only
    return args


def main(argv: list[str]) -> int:
    if argv[:1] == ["_node"]:
        return print_node(argv[1] if len(argv) > 1 else None)
    return run_checks(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
