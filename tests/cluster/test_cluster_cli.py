"""``hack/cluster.py up`` as a developer runs it: it prints the kubeconfig and every log, serves
a cluster, and on Ctrl-C leaves no process, port or file behind (docs/testbed.md)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.cluster.conftest import ROOT, _skip_reason


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def test_up_serves_a_cluster_and_ctrl_c_leaves_nothing_behind() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    parts = ("--nodes", "2", "--without", "jobset,kueue,trainer")
    argv = [sys.executable, "hack/cluster.py", "up", *parts]
    up = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    stderr = up.stderr
    assert stderr is not None

    def read() -> None:
        for line in stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    said: list[str] = []
    root: Path | None = None
    try:
        while not any("ready;" in line for line in said):
            said.append(lines.get(timeout=120))
        kubeconfig = next(
            line.split("kubeconfig: ", 1)[1].strip() for line in said if "kubeconfig: " in line
        )
        logs = [line for line in said if "log of " in line]
        assert {line.split("log of ", 1)[1].split(":")[0] for line in logs} >= {
            "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
        }  # fmt: skip
        nodes = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "name"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert nodes == ["node/kwok-node-0", "node/kwok-node-1"]
        root = Path(kubeconfig).parent
        assert processes_mentioning(str(root))
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
    assert root is not None
    assert not root.exists(), os.listdir(root)
    assert processes_mentioning(str(root)) == []
