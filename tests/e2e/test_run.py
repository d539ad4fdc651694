"""End to end: TrainJobs through the whole local control plane (API server, webhook,
controller, executor running pods as processes), as `trainer run` does it."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests import builders as b
from tests.e2e.listeners import assert_no_pod_listeners, run_watched
from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.kube import resources as r

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # pragma: no cover - the dev install includes the torch extra
    HAVE_TORCH = False


@pytest.mark.skipif(not HAVE_TORCH, reason="needs the torch extra (pip install -e '.[torch]')")
def test_ddp_example_trains_across_two_nodes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc, listeners = run_watched(
        [
            sys.executable,
            "-m",
            "trainer.cli.main",
            "run",
            "-f",
            str(ROOT / "examples/torch-ddp-cpu/trainjob.yaml"),
            "--timeout",
            "240",
            "--feature-gates",
            "TrainJobStatus=true",
        ],
        cwd=ROOT,
        timeout=300,
        env=env,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # Its torchrun store listened in the TrainJob's network sandbox, not on this host, and
    # rank 0 still reached the status server (forwarded into the sandbox).
    assert_no_pod_listeners(listeners, out)
    assert "TrainJob default/torch-ddp-cpu: Complete" in out
    finals = re.findall(r"rank (\d) final loss: ([0-9.]+) weights checksum: (-?[0-9.]+)", out)
    assert sorted(f[0] for f in finals) == ["0", "1"], out
    assert finals[0][1:] == finals[1][1:]  # same loss and weights on both ranks
    # Rank 0 reported every epoch to the status server; the last report is the final loss.
    assert f"reports progress 100%, ETA 0s, loss={finals[0][1]}" in out, out
    assert "progress report failed" not in out
    checkpoint = ROOT / "torch-ddp-cpu-checkpoint" / "model.pt"
    assert checkpoint.exists()
    checkpoint.unlink()
    checkpoint.parent.rmdir()


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    p = await start_local_plane(work_dir=tmp_path, state_dir=tmp_path / "state")
    try:
        yield p
    finally:
        await p.close()


async def until(plane: LocalPlane, check: Any, timeout: float = 60.0) -> Any:
    changed = asyncio.Event()
    hook = lambda _ev: changed.set()  # noqa: E731
    plane.server.storage.store.subscribe(hook)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not (result := check()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError("condition not reached")
            changed.clear()
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                continue
        return result
    finally:
        plane.server.storage.store.unsubscribe(hook)


def trainjob(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    runtime = spec.pop("runtime", "torch-local-cpu")
    return b.trainjob(name, runtime=runtime, trainer={"command": command}, **spec)


def state(plane: LocalPlane, name: str) -> dict[str, str]:
    job = plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, "default", name) or {}
    return {x["type"]: x["status"] for x in (job.get("status") or {}).get("conditions") or []}


def condition(plane: LocalPlane, name: str, type_: str) -> dict[str, Any] | None:
    job = plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, "default", name) or {}
    return next(
        (
            x
            for x in (job.get("status") or {}).get("conditions") or []
            if x["type"] == type_ and x["status"] == "True"
        ),
        None,
    )


async def test_a_failing_command_fails_the_trainjob_with_the_jobset_reason(
    plane: LocalPlane,
) -> None:
    job = trainjob("fails", [sys.executable, "-c", "import sys; sys.exit(3)"])
    await plane.kube.create(job, gvr=r.TRAINJOBS)
    failed = await until(plane, lambda: condition(plane, "fails", "Failed"))
    assert failed["reason"] == "FailedJobs"
    assert "first failed job: fails-node-0" in failed["message"]


async def test_a_plain_command_completes(plane: LocalPlane) -> None:
    job = trainjob(
        "hello",
        [sys.executable, "-c", "import os; print('hello from', os.environ['PET_NODE_RANK'])"],
    )
    job["spec"]["trainer"]["numNodes"] = 2
    await plane.kube.create(job, gvr=r.TRAINJOBS)
    await until(plane, lambda: condition(plane, "hello", "Complete"))


async def test_deleting_a_running_trainjob_leaves_no_process(
    plane: LocalPlane, tmp_path: Path
) -> None:
    marker = tmp_path / "pids"
    script = (
        f"import os, time; open({str(marker)!r}, 'a').write(str(os.getpid()) + '\\n'); "
        "time.sleep(600)"
    )
    await plane.kube.create(trainjob("sleeper", [sys.executable, "-c", script]), gvr=r.TRAINJOBS)
    # The process writing its pid is not an API event either (it may come after the pod's
    # last status write): check it a bounded number of times.
    for _ in range(600):
        if marker.exists() and marker.read_text().strip():
            break
        await asyncio.sleep(0.05)
    pid = int(marker.read_text().split()[0])
    await plane.kube.delete(r.TRAINJOBS, "default", "sleeper")
    await plane.server.storage.gc.idle()

    # A process exit is not an API event: check it a bounded number of times.
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"process {pid} of the deleted TrainJob is still running")
