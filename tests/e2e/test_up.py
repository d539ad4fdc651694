"""End to end: the ``trainer up`` command as a user runs it. It writes a kubeconfig, kubectl
applies a TrainJob and waits for it to complete, SIGTERM stops it cleanly, and a second
``trainer up`` on the same ``--state-file`` still has the TrainJob, and deletes the one whose
TTL after finishing expires across the restart. ``trainer run --kubeconfig`` runs a TrainJob on
the plane, and a pod's in-cluster client reaches the plane as its ServiceAccount."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.test_run_flows import KUBECTL, kubectl
from trainer.machinery.times import parse_time

PY = sys.executable
READY = "local control plane ready"
TTL = 5  # seconds: longer than stopping the plane takes, so the TTL expires across the restart
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


def train_job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": "torch-local-cpu"},
            "trainer": {"command": [PY, "-c", "print('trained')"]},
            **spec,
        },
    }


async def test_trainer_up_serves_kubectl_stops_cleanly_and_keeps_state(tmp_path: Path) -> None:
    """Also the TTL after finishing across a restart (docs/lifecycle.md): ``ttljob`` finishes,
    the whole plane stops before its TTL expires, and the restarted plane deletes it."""
    kubeconfig, state = tmp_path / "kubeconfig", tmp_path / "state.db"
    jobs = [train_job("upjob"), train_job("ttljob", ttlSecondsAfterFinished=TTL)]
    proc = await start_up(tmp_path, kubeconfig, state)
    try:
        assert kubeconfig.exists()
        runtimes = await kubectl(kubeconfig, "get", "clustertrainingruntimes", "-o", "name")
        assert "clustertrainingruntime.trainer.kubeflow.org/torch-local-cpu" in runtimes.split()
        applied = await kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(jobs))
        assert applied.split("\n")[0] == "trainjob.trainer.kubeflow.org/upjob created"
        waited = await kubectl(
            kubeconfig,
            "wait",
            "--for=condition=Complete",
            "trainjob/upjob",
            "trainjob/ttljob",
            "--timeout=45s",
        )
        assert waited.split("\n")[0] == "trainjob.trainer.kubeflow.org/upjob condition met"
        times = await kubectl(
            kubeconfig,
            "get",
            "trainjob",
            "ttljob",
            "-o",
            "jsonpath={.status.startTime} {.status.completionTime}",
        )
        started, finished = (parse_time(t) for t in times.split())
        assert started is not None and finished is not None and started <= finished
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    assert "stopping" in await stop_up(proc)
    left = (finished + dt.timedelta(seconds=TTL) - dt.datetime.now(dt.UTC)).total_seconds()

    proc = await start_up(tmp_path, kubeconfig, state)
    try:
        row = await kubectl(kubeconfig, "get", "trainjob", "upjob", "--no-headers")
        assert row.split()[:2] == ["upjob", "Complete"], row
        # Finished before the stop, TTL not yet expired then: the new controller deletes it
        # once it expires (at once if it expired while the plane was down).
        assert left > 0, f"the plane took over {TTL}s to stop; raise TTL"
        await kubectl(kubeconfig, "wait", "--for=delete", "trainjob/ttljob", "--timeout=60s")
        gone = dt.datetime.now(dt.UTC)
        assert gone >= finished + dt.timedelta(seconds=TTL), (gone, finished)
        jobsets = await kubectl(kubeconfig, "get", "jobsets", "-o", "name")
        assert jobsets.split() == ["jobset.jobset.x-k8s.io/upjob"], jobsets
    finally:
        await stop_up(proc)


IN_CLUSTER = """
import asyncio
from kubernetes_asyncio import client, config

async def main():
    config.load_incluster_config()
    async with client.ApiClient() as api:
        review = await client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        print("in-cluster as", review.status.user_info.username)

asyncio.run(main())
"""


async def test_trainer_run_on_the_planes_kubeconfig_and_a_pods_in_cluster_client(
    tmp_path: Path,
) -> None:
    """``trainer run --kubeconfig`` on a ``trainer up`` plane: created there, followed to
    Complete, its pod's log printed under the pod's name. And a pod's in-cluster client
    (docs/local-plane.md, "In-cluster configuration") finds the API server and is its
    ServiceAccount, while the token's standard path exists in the pod's mount namespace only:
    this host still looks like no pod to the programs run on it."""
    kubeconfig, marker = tmp_path / "kubeconfig", Path("/var/run/secrets/kubernetes.io")
    existed = marker.exists()
    proc = await start_up(tmp_path, kubeconfig, tmp_path / "state.db")
    try:
        job = tmp_path / "by-trainer-run.yaml"
        job.write_text(yaml.safe_dump(train_job("by-trainer-run")))
        run = await asyncio.create_subprocess_exec(
            *(PY, "-m", "trainer.cli.main", "run", "--kubeconfig", str(kubeconfig)),
            *("-f", str(job), "--timeout", "90"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out = (await asyncio.wait_for(run.communicate(), 120))[0].decode()
        assert run.returncode == 0, out
        assert "TrainJob default/by-trainer-run: Complete" in out, out
        assert re.search(r"^by-trainer-run-node-0-0-\w+ \| trained$", out, re.MULTILINE), out

        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client", "namespace": "default"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "client", "image": "python:3.11", "command": [PY, "-c", IN_CLUSTER]}
                ],
            },
        }
        await kubectl(kubeconfig, "create", "-f", "-", stdin=yaml.safe_dump(pod))
        await kubectl(
            kubeconfig,
            "wait",
            "--for=jsonpath={.status.phase}=Succeeded",
            "pod/client",
            "--timeout=60s",
        )
        said = await kubectl(kubeconfig, "logs", "client")
        assert said.strip() == "in-cluster as system:serviceaccount:default:default", said
        assert marker.exists() == existed
    finally:
        await stop_up(proc)
