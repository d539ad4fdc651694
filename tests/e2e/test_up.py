"""End to end: the ``trainer up`` command as a user runs it. It writes a kubeconfig, kubectl
applies a TrainJob and waits for it to complete, SIGTERM stops it cleanly, and a second
``trainer up`` on the same ``--state-file`` still has the TrainJob."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_flows import KUBECTL, kubectl

PY = sys.executable
READY = "local control plane ready"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]


async def start_up(cwd: Path, kubeconfig: Path, state: Path) -> asyncio.subprocess.Process:
    """Start ``trainer up`` and return once it reports ready (fails on an early exit)."""
    proc = await asyncio.create_subprocess_exec(
        PY,
        "-m",
        "trainer.cli.main",
        "up",
        "--kubeconfig",
        str(kubeconfig),
        "--state-file",
        str(state),
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line:
            await proc.wait()
            pytest.fail(f"trainer up exited {proc.returncode} before ready:\n{''.join(seen)}")
        seen.append(line)
        if READY in line:
            return proc


async def stop_up(proc: asyncio.subprocess.Process) -> str:
    """SIGTERM, then the rest of its output; it must exit 0."""
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_trainer_up_serves_kubectl_stops_cleanly_and_keeps_state(tmp_path: Path) -> None:
    kubeconfig, state = tmp_path / "kubeconfig", tmp_path / "state.db"
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "upjob", "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": "torch-local-cpu"},
            "trainer": {"command": [PY, "-c", "print('trained')"]},
        },
    }
    proc = await start_up(tmp_path, kubeconfig, state)
    try:
        assert kubeconfig.exists()
        runtimes = await kubectl(kubeconfig, "get", "clustertrainingruntimes", "-o", "name")
        assert "clustertrainingruntime.trainer.kubeflow.org/torch-local-cpu" in runtimes.split()
        applied = await kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(job))
        assert applied.strip() == "trainjob.trainer.kubeflow.org/upjob created"
        waited = await kubectl(
            kubeconfig, "wait", "--for=condition=Complete", "trainjob/upjob", "--timeout=45s"
        )
        assert waited.strip() == "trainjob.trainer.kubeflow.org/upjob condition met"
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    assert "stopping" in await stop_up(proc)

    proc = await start_up(tmp_path, kubeconfig, state)
    try:
        row = await kubectl(kubeconfig, "get", "trainjob", "upjob", "--no-headers")
        assert row.split()[:2] == ["upjob", "Complete"], row
    finally:
        await stop_up(proc)
