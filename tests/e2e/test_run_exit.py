"""``trainer run`` returns promptly once its TrainJob is finished (docs/local-plane.md,
"Stopping"): a trainer whose main process exits while a child it started still holds its
output is finished then (the child is killed with its process group, as a container's
processes end with its PID 1), and the command exits soon after printing Complete, with no
process left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests import builders as b
from trainer.local.executor.kubelet.podhost import GRACE_CAP

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

CHILD_SLEEPS = 300
RUN_TIMEOUT = ("--timeout", "60")
"""A child keeping the trainer running would outlast it (exit 2)."""
EXIT_BOUND = GRACE_CAP - 1
"""Seconds from the Complete line to the command's exit, at most. It takes about 0.1 s (0.5 s
before the exit skipped the interpreter's last collections); the bound is generous for a
loaded CI machine and still below a pod's grace period, which a stop must not spend on
processes that are gone."""


def gone(pid: int) -> bool:
    """Process ``pid`` has exited (a zombie not yet reaped by PID 1 counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_run_exits_promptly_after_complete_leaving_no_process(tmp_path: Path) -> None:
    child = (
        f"import subprocess, sys; "
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({CHILD_SLEEPS})']); "
        f"print('child', c.pid, flush=True)"
    )
    job = b.trainjob(
        "leaves-a-child",
        runtime="torch-local-cpu",
        trainer={"command": [sys.executable, "-c", child]},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.cli.main", "run", "-f", str(path), *RUN_TIMEOUT],
        cwd=tmp_path,
        # This checkout's trainer, whatever the installed one is (the run's cwd is tmp_path).
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    complete_at: list[float] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not complete_at and "TrainJob default/leaves-a-child: Complete" in line:
                complete_at.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    exited_at = time.monotonic()
    reader.join(10)
    out = "".join(lines)
    assert code == 0, out
    assert complete_at, out
    assert exited_at - complete_at[0] < EXIT_BOUND, out
    pid = int(next(x for x in lines if " | child " in x).split()[-1])
    assert gone(pid), f"the child {pid} a container left outlived trainer run"
