"""End to end: a container's memory and CPU limits hold on the local plane where this host
allows cgroups (docs/local-plane.md, "Limits"): a process over its memory limit is killed by
the kernel and its container ends ``OOMKilled`` with exit code 137, through the API, in the
TrainJob's ``Failed`` message and in ``trainer run``'s output; a CPU limit is the CFS quota of
the container's own cgroup; and no cgroup is left behind. Skipped, with the reason, where the
plane cannot make cgroups (not root, no memory or cpu controller)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_run import condition, trainjob, until
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.kube import resources as r
from trainer.local.executor.sandbox import cgroups

ROOT = Path(__file__).resolve().parents[2]
HOST = cgroups.layout()
ALLOCATE = "data = b'x' * (300 << 20); print('allocated', len(data))"


def needs(*controllers: str) -> pytest.MarkDecorator:
    missing = [n for n in controllers if n not in HOST.roots]
    return pytest.mark.skipif(
        bool(missing),
        reason=f"this host cannot hold {' and '.join(missing)} limits: {HOST.missing}",
    )


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    p = await start_local_plane(work_dir=tmp_path, state_dir=tmp_path / "state")
    try:
        yield p
    finally:
        await p.close()


def limited(name: str, command: list[str], limits: dict[str, str], **env: str) -> dict[str, Any]:
    job = trainjob(name, command)
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": limits, "requests": limits}
    job["spec"]["trainer"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return job


def pod_of(plane: LocalPlane, job: str) -> dict[str, Any]:
    pods = plane.server.storage.objects("v1", "pods", "default")
    return next(p for p in pods if p["metadata"]["name"].startswith(f"{job}-node-0-0-"))


def record_terminations(plane: LocalPlane, job: str) -> list[tuple[str, dict[str, Any]]]:
    """(pod uid, terminated state) of the job's containers as the kubelet writes them: the pod
    restarts its container in place (restartPolicy OnFailure), so the state moves on to
    ``lastState``, and the Job controller deletes the pod once past its backoffLimit."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(ev: Any) -> None:
        meta = ev.obj.get("metadata") or {}
        if ev.key[1] != "pods" or not str(meta.get("name")).startswith(f"{job}-node-0-0-"):
            return
        for st in (ev.obj.get("status") or {}).get("containerStatuses") or []:
            for state in (st.get("state") or {}, st.get("lastState") or {}):
                if "terminated" in state and (meta["uid"], state["terminated"]) not in seen:
                    seen.append((meta["uid"], state["terminated"]))

    plane.server.storage.store.subscribe(record)
    return seen


def leftover(uid: str) -> list[Path]:
    """The pod's cgroups still on this host (none once its containers ended)."""
    roots = dict.fromkeys(HOST.roots.values())
    return [path for root in roots if (path := root / cgroups.PARENT / uid).exists()]


@needs(cgroups.MEMORY)
async def test_a_container_over_its_memory_limit_ends_oomkilled(plane: LocalPlane) -> None:
    terminations = record_terminations(plane, "oom")
    job = limited("oom", [sys.executable, "-c", ALLOCATE], {"memory": "64Mi", "cpu": "1"})
    await plane.kube.create(job, gvr=r.TRAINJOBS)
    await until(plane, lambda: condition(plane, "oom", "Failed"))
    assert terminations, "the container never terminated"
    uid, terminated = terminations[0]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137), terminated
    # Why it failed, on the TrainJob (docs/troubleshooting.md, "Why a TrainJob failed"); the
    # cause may follow JobSet's failure by a moment (the pod watch is another stream).
    failed = await until(
        plane,
        lambda: (
            "first failure" in str(condition(plane, "oom", "Failed"))
            and condition(plane, "oom", "Failed")
        ),
    )
    assert "container node exited with code 137 (OOMKilled)" in failed["message"], failed
    # The pod, deleted by the Job controller, has its process killed and its cgroup removed;
    # neither is an API event: check a bounded number of times.
    for _ in range(100):
        if not leftover(uid):
            break
        await asyncio.sleep(0.05)
    assert leftover(uid) == []


@needs(cgroups.CPU)
async def test_a_cpu_limit_is_the_quota_of_the_containers_cgroup(
    plane: LocalPlane, tmp_path: Path
) -> None:
    out = tmp_path / "quota"
    file = "cpu.max" if HOST.version == 2 else "cpu.cfs_quota_us"
    # The container reads the quota of the cgroup it runs in (cgroup v2's line "0::PATH", v1's
    # "N:cpu[,cpuacct]:PATH").
    script = (
        "import os\n"
        "for line in open('/proc/self/cgroup'):\n"
        "    hid, names, path = line.rstrip('\\n').split(':', 2)\n"
        "    if (hid == '0') if os.environ['V'] == '2' else ('cpu' in names.split(',')):\n"
        "        quota = open(os.environ['ROOT'] + path + '/' + os.environ['FILE']).read()\n"
        "        open(os.environ['OUT'], 'w').write(path + ' ' + quota.strip())\n"
    )
    job = limited(
        "cpu",
        [sys.executable, "-c", script],
        {"cpu": "500m"},
        V=str(HOST.version),
        ROOT=str(HOST.roots[cgroups.CPU]),
        FILE=file,
        OUT=str(out),
    )
    await plane.kube.create(job, gvr=r.TRAINJOBS)
    await until(plane, lambda: condition(plane, "cpu", "Complete"))
    uid = pod_of(plane, "cpu")["metadata"]["uid"]
    quota = "50000 100000" if HOST.version == 2 else "50000"
    assert out.read_text() == f"/{cgroups.PARENT}/{uid}/node {quota}"
    assert leftover(uid) == []


@needs(cgroups.MEMORY)
def test_trainer_run_names_the_oomkilled_container(tmp_path: Path) -> None:
    job = limited("oom-run", [sys.executable, "-c", ALLOCATE], {"memory": "64Mi", "cpu": "1"})
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump(job))
    done = subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", "run", "-f", str(path), "--timeout", "60"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "allocated" not in done.stdout
    assert "TrainJob default/oom-run: Failed" in done.stdout
    assert re.search(
        r"TrainJob default/oom-run failed: FailedJobs: .*; first failure: replicated job node, "
        r"node index 0, pod oom-run-node-0-0-\w+, container node exited with code 137 "
        r"\(OOMKilled\)",
        done.stdout,
    ), done.stdout


async def test_where_cgroups_cannot_be_made_one_warning_says_so_and_pods_run(
    plane: LocalPlane, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A host the plane cannot make cgroups on (as another user, off Linux): what
    :func:`cgroups.layout` finds there."""
    why = "cannot make a cgroup: /sys/fs/cgroup/trainer-local: Permission denied"
    monkeypatch.setattr(cgroups, "layout", lambda: cgroups.Layout(2, {}, why))
    for name in ("unlimited-a", "unlimited-b"):
        job = limited(name, [sys.executable, "-c", ALLOCATE], {"memory": "64Mi", "cpu": "1"})
        await plane.kube.create(job, gvr=r.TRAINJOBS)
    for name in ("unlimited-a", "unlimited-b"):
        await until(plane, lambda name=name: condition(plane, name, "Complete"))
    warnings = [r.getMessage() for r in caplog.records if "not enforced" in r.getMessage()]
    assert warnings == [
        f"memory and CPU limits are not enforced: {why}; containers run without them"
    ]
