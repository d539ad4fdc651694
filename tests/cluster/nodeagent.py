"""Our node agent (``trainer node``) as Node ``agent-0`` of the bed, shared by the tier's
modules through the session's ``agent`` fixture (tests/cluster/conftest.py): the node agent's
own tests (test_node_agent.py) and the Helm chart's installer Jobs (test_helm.py), whose pods
must really run (a KWOK node would only pretend to)."""

from __future__ import annotations

import contextlib
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import bed as beds
import yaml
from netns import AGENT_POD_CIDR

from trainer.local.executor.sandbox.ssh import private_parent

ROOT = Path(__file__).resolve().parents[2]
NODE = "agent-0"
MARK = "trainer.kubeflow.org/node-agent"
# What the project's client says of a refused request (trainer.machinery.requests.APIError).
REFUSAL = re.compile(r"\b[45]\d\d [A-Z][A-Za-z]+: ")


@dataclass
class Lines:
    """A process's output lines as they come, read by a thread (a blocking read, no polling)."""

    stream: IO[str]
    seen: list[str] = field(default_factory=list)
    fresh: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.stream:
            self.seen.append(line.rstrip("\n"))
            self.fresh.put(line.rstrip("\n"))
        self.fresh.put(None)

    def until(self, wanted: Any, timeout: float, what: str) -> str:
        """The first new line for which ``wanted(line)`` holds."""
        while True:
            try:
                line = self.fresh.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"{what}: nothing within {timeout} s") from None
            if line is None:
                raise AssertionError(f"{what}: the output ended")
            if wanted(line):
                return line


@dataclass
class Agent:
    proc: subprocess.Popen[str]
    out: Lines
    state: Path
    leases: Lines | None = None
    watch: subprocess.Popen[str] | None = None

    def refusals(self) -> list[str]:
        return [line for line in self.out.seen if REFUSAL.search(line)]


@contextlib.contextmanager
def running_agent(bed: beds.Bed, folder: Path) -> Iterator[Agent]:
    """``trainer node`` as Node :data:`NODE` with the node's credentials, tainted and labelled
    :data:`MARK` so only pods placed there on purpose land on it; stopped and its Node deleted
    on the way out, its last output printed."""
    kubeconfig = beds.write_kubeconfig(
        folder / "node.kubeconfig", bed.server, bed.pki.ca.cert, bed.pki.node_agent
    )
    config = folder / "node.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "gpus": [],
                "capacity": {"cpu": "4", "memory": "8Gi"},
                "labels": {MARK: "test"},
                "taints": [{"key": MARK, "value": "test", "effect": "NoSchedule"}],
            }
        )
    )
    # Not under /tmp: OpenSSH's StrictModes refuses the MPI pods' authorized_keys there.
    state = Path(tempfile.mkdtemp(prefix="node-agent-", dir=private_parent()))
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "trainer.cli.main", "node", f"--kubeconfig={kubeconfig}",
            f"--node-name={NODE}", f"--node-config={config}", f"--state-dir={state}",
            f"--workdir={folder}", f"--pod-cidr={AGENT_POD_CIDR}",
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    running = Agent(proc, Lines(proc.stdout), state)
    try:
        yield running
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if running.watch is not None:
            running.watch.kill()
            running.watch.wait()
        bed.kubectl("delete", "node", NODE, "--wait=false", check=False)
        shutil.rmtree(state, ignore_errors=True)
        print(f"node agent's output:\n{chr(10).join(running.out.seen[-60:])}")
        refused = running.refusals()
        print(f"first request kube-apiserver refused: {refused[0] if refused else 'none'}")
