"""End to end: JobSet-level flows of a TrainJob through the whole local control plane (API
server, webhook, controller, executor running pods as processes): a failurePolicy restart of
the whole job, dependsOn ordering of an initializer before the trainer, suspend and resume,
``kubectl get``, ``wait`` and ``logs`` against the plane's kubeconfig, and the PlainML and MPI
examples (each file's runtime, then its TrainJob, as ``trainer run -f`` applies them).

The runtimes are written here (no mlPolicy framework: PlainML) so that each flow depends only
on the fields it exercises; their commands run this interpreter with the standard library.

Concurrent writes: the local API server computes a write from the object it read and stores it
after awaiting admission (the webhook, over HTTPS), without checking that the object is still
the one it read; a spec PATCH racing the controller's ``/status`` PATCH can lose either
change. The resume below is patched once the controller has written the suspended status, so
that no status write is in flight.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import builders as b
from tests.e2e.test_run import condition, trainjob, until
from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.kube import resources as r

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
PLURALS = {
    c.KIND_TRAINJOB: r.TRAINJOBS,
    c.KIND_TRAINING_RUNTIME: r.TRAINING_RUNTIMES,
    c.KIND_CLUSTER_TRAINING_RUNTIME: r.CLUSTER_TRAINING_RUNTIMES,
}


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    p = await start_local_plane(work_dir=tmp_path, state_dir=tmp_path / "state")
    try:
        yield p
    finally:
        await p.close()


def replicated_job(
    name: str,
    ancestor: str,
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    depends_on: list[dict[str, str]] | None = None,
    volume: str | None = None,
) -> dict[str, Any]:
    """One replicated job whose single container (named after the job) runs ``command``;
    ``volume`` mounts the PersistentVolumeClaim of that name at /workspace."""
    container: dict[str, Any] = {
        "name": name,
        "image": "python:3.11-slim",
        "command": command,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}]
        + [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    pod_spec: dict[str, Any] = {"containers": [container]}
    if volume:
        container["volumeMounts"] = [{"name": volume, "mountPath": "/workspace"}]
        pod_spec["volumes"] = [{"name": volume, "persistentVolumeClaim": {"claimName": volume}}]
    out: dict[str, Any] = {
        "name": name,
        "template": {
            "metadata": {"labels": {c.LABEL_ANCESTOR: ancestor}},
            "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
        },
    }
    if depends_on:
        out["dependsOn"] = depends_on
    return out


def jobset(plane: LocalPlane, name: str) -> dict[str, Any]:
    return (
        plane.server.storage.get_object("jobset.x-k8s.io/v1alpha2", "jobsets", "default", name)
        or {}
    )


def jobs_status(plane: LocalPlane, name: str) -> list[tuple[str, int]]:
    """The TrainJob's status.jobsStatus as (name, suspended) pairs."""
    job = plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, "default", name) or {}
    return [(x["name"], x["suspended"]) for x in (job.get("status") or {}).get("jobsStatus") or []]


def pods(plane: LocalPlane) -> list[dict[str, Any]]:
    return plane.server.storage.objects("v1", "pods", "default")


async def test_failure_policy_max_restarts_restarts_the_whole_job(
    plane: LocalPlane, tmp_path: Path
) -> None:
    """The first attempt fails (no marker yet), the JobSet restarts every Job once
    (status.restarts 1) and the second attempt succeeds."""
    attempts = tmp_path / "attempts"
    script = (
        "import os, sys; p = os.environ['ATTEMPTS']; first = not os.path.exists(p); "
        "open(p, 'a').write('attempt\\n'); "
        "print('first attempt fails' if first else 'second attempt succeeds'); "
        "sys.exit(1 if first else 0)"
    )
    rt = b.runtime(
        "restart-once",
        replicated_jobs=[replicated_job("node", c.ANCESTOR_TRAINER, [PY, "-c", script])],
        failurePolicy={"maxRestarts": 1},
    )
    await plane.kube.create(rt, gvr=r.CLUSTER_TRAINING_RUNTIMES)
    job = trainjob("restarts", [PY, "-c", script], runtime="restart-once")
    job["spec"]["trainer"]["env"] = [{"name": "ATTEMPTS", "value": str(attempts)}]
    await plane.kube.create(job, gvr=r.TRAINJOBS)

    await until(plane, lambda: condition(plane, "restarts", "Complete"), timeout=45)
    assert (jobset(plane, "restarts").get("status") or {}).get("restarts") == 1
    assert attempts.read_text().splitlines() == ["attempt", "attempt"]
    assert condition(plane, "restarts", "Failed") is None


async def test_depends_on_runs_the_initializer_to_completion_before_the_trainer(
    plane: LocalPlane, tmp_path: Path
) -> None:
    """A TrainingRuntime whose ``node`` job dependsOn ``dataset-initializer`` (Complete): the
    trainer reads the file the initializer wrote on their shared PVC, and starts after the
    initializer ended."""
    init_script = (
        "import os, time; time.sleep(0.5); "
        "open(os.path.join(os.environ['DATA'], 'data.txt'), 'w').write(repr(time.time()))"
    )
    node_script = (
        "import os, time; start = time.time(); d = os.environ['DATA']; "
        "ended = float(open(os.path.join(d, 'data.txt')).read()); "
        "open(os.path.join(d, 'node.txt'), 'w').write(repr(start)); "
        "print('initializer ended', start - ended, 's before the trainer started')"
    )
    rt = b.runtime(
        "with-initializer",
        replicated_jobs=[
            replicated_job(
                c.ANCESTOR_DATASET_INITIALIZER,
                c.ANCESTOR_DATASET_INITIALIZER,
                [PY, "-c", init_script],
                env={"DATA": "/workspace"},
                volume="data",
            ),
            replicated_job(
                "node",
                c.ANCESTOR_TRAINER,
                [PY, "-c", node_script],
                env={"DATA": "/workspace"},
                depends_on=[{"name": c.ANCESTOR_DATASET_INITIALIZER, "status": "Complete"}],
                volume="data",
            ),
        ],
        kind=c.KIND_TRAINING_RUNTIME,
    )
    await plane.kube.create(rt, gvr=r.TRAINING_RUNTIMES)
    job = trainjob("ordered", [PY, "-c", node_script], runtime="with-initializer")
    job["spec"]["runtimeRef"]["kind"] = c.KIND_TRAINING_RUNTIME
    await plane.kube.create(job, gvr=r.TRAINJOBS)

    # While the initializer runs, the trainer's Job is not created.
    await until(
        plane, lambda: any("dataset-initializer" in p["metadata"]["name"] for p in pods(plane))
    )
    assert not any("-node-" in p["metadata"]["name"] for p in pods(plane))

    await until(plane, lambda: condition(plane, "ordered", "Complete"), timeout=45)
    pvc = tmp_path / "state" / "default" / "pvc" / "data"
    ended = float((pvc / "data.txt").read_text())
    started = float((pvc / "node.txt").read_text())
    assert started > ended


async def test_suspend_then_resume(plane: LocalPlane, tmp_path: Path) -> None:
    """Created suspended: the JobSet and its Jobs are suspended and no pod (no process) runs;
    patched to ``suspend: false`` it runs to Complete, and Suspended turns False (Resumed)."""
    ran = tmp_path / "ran"
    script = f"open({str(ran)!r}, 'w').write('ran')"
    job = trainjob("paused", [PY, "-c", script], suspend=True)
    await plane.kube.create(job, gvr=r.TRAINJOBS)

    suspended = await until(plane, lambda: condition(plane, "paused", c.COND_SUSPENDED))
    assert suspended["reason"] == c.REASON_SUSPENDED
    await until(plane, lambda: (jobset(plane, "paused").get("spec") or {}).get("suspend"))

    def suspended_jobs() -> list[dict[str, Any]]:
        jobs = plane.server.storage.objects("batch/v1", "jobs", "default")
        return [j for j in jobs if (j.get("spec") or {}).get("suspend")]

    await until(plane, suspended_jobs)
    # The TrainJob reports its suspended Job; once it does, the controller has nothing more to
    # write until the resume (see the module docstring on concurrent writes).
    await until(plane, lambda: jobs_status(plane, "paused") == [("node", 1)])
    await plane.server.storage.gc.idle()
    assert pods(plane) == []
    assert not ran.exists()

    await plane.kube.patch(r.TRAINJOBS, "default", "paused", {"spec": {"suspend": False}})
    await until(plane, lambda: condition(plane, "paused", "Complete"), timeout=45)
    assert ran.read_text() == "ran"
    obj = (
        plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, "default", "paused")
        or {}
    )
    resumed = next(x for x in obj["status"]["conditions"] if x["type"] == c.COND_SUSPENDED)
    assert (resumed["status"], resumed["reason"]) == ("False", c.REASON_RESUMED)


KUBECTL = shutil.which("kubectl")


async def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> str:
    """Run kubectl with ``kubeconfig`` in a subprocess, without blocking the loop that may be
    serving it; returns stdout, failing the test with stderr on a non-zero exit."""
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    data = stdin.encode() if stdin is not None else None
    out, err = await asyncio.wait_for(proc.communicate(data), timeout)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_get_trainjobs_shows_the_state(plane: LocalPlane, tmp_path: Path) -> None:
    assert KUBECTL is not None
    await plane.kube.create(trainjob("listed", [PY, "-c", "print('done')"]), gvr=r.TRAINJOBS)
    await until(plane, lambda: condition(plane, "listed", "Complete"))

    out = await kubectl(tmp_path / "state" / "kubeconfig", "get", "trainjobs")
    header, *rows = [line.split() for line in out.splitlines()]
    assert header[:2] == ["NAME", "STATE"], out
    assert [row[:2] for row in rows] == [["listed", "Complete"]], out


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_shows_this_host_as_a_ready_node_with_its_capacity(
    plane: LocalPlane, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "state" / "kubeconfig"
    await plane.executor.kubelet.heartbeat.registered.wait()
    out = await kubectl(kubeconfig, "get", "nodes")
    header, *rows = [line.split() for line in out.splitlines()]
    assert header == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"], out
    assert [row[:3] for row in rows] == [["local", "Ready", "<none>"]], out
    described = await kubectl(kubeconfig, "describe", "node", "local")
    capacity = described.split("Capacity:", 1)[1].split("Allocatable:", 1)[0]
    assert f"cpu:                {os.cpu_count()}" in capacity, described
    assert "pods:               110" in capacity, described
    assert "KubeletReady" in described and "HolderIdentity:  local" in described, described


async def apply_example(plane: LocalPlane, path: str) -> str:
    """Create an example file's runtimes, then its TrainJob (as ``trainer run -f`` does);
    returns the TrainJob's name."""
    docs = [d for d in yaml.safe_load_all((ROOT / path).read_text()) if d]
    docs.sort(key=lambda d: d["kind"] == c.KIND_TRAINJOB)
    for doc in docs:
        if PLURALS[doc["kind"]].namespaced:
            doc["metadata"].setdefault("namespace", "default")
        await plane.kube.create(doc, gvr=PLURALS[doc["kind"]])
    return str(docs[-1]["metadata"]["name"])


async def test_the_plainml_example_completes_on_two_nodes(plane: LocalPlane) -> None:
    name = await apply_example(plane, "examples/plainml/trainjob.yaml")
    await until(plane, lambda: condition(plane, name, "Complete"), timeout=45)
    nodes = sorted(p["metadata"]["name"].rsplit("-", 1)[0] for p in pods(plane))
    assert nodes == [f"{name}-node-0-0", f"{name}-node-0-1"]


@pytest.mark.skipif(
    shutil.which("mpirun") is not None or Path("/usr/sbin/sshd").exists(),
    reason="checks how the MPI example fails on a host without OpenMPI and sshd",
)
async def test_the_mpi_example_fails_clearly_without_mpi_on_this_host(plane: LocalPlane) -> None:
    # Every terminated container of node 0's pods, recorded as written: the Job controller may
    # delete a failed pod again before the test gets to read it.
    terminations: list[dict[str, Any]] = []

    def record(ev: Any) -> None:
        if ev.key[1] == "pods" and "-node-0-0-" in ev.obj["metadata"]["name"]:
            for st in (ev.obj.get("status") or {}).get("containerStatuses") or []:
                if "terminated" in (st.get("state") or {}):
                    terminations.append(st["state"]["terminated"])

    plane.server.storage.store.subscribe(record)
    name = await apply_example(plane, "examples/mpi/trainjob.yaml")
    failed = await until(plane, lambda: condition(plane, name, "Failed"), timeout=45)
    plane.server.storage.store.unsubscribe(record)
    assert failed["reason"] == "FailedJobs"
    assert f"first failed job: {name}-node-0" in failed["message"]
    assert terminations, "node 0's container never terminated"
    terminated = terminations[0]
    assert (terminated["reason"], terminated["exitCode"]) == ("ContainerCannotRun", 127)
    assert 'exec: "/usr/sbin/sshd": executable file not found' in terminated["message"]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_wait_and_logs_follow_a_trainjob(plane: LocalPlane, tmp_path: Path) -> None:
    """``kubectl wait --for=condition=Complete`` returns once the TrainJob completes, and
    ``kubectl logs`` prints each node's output from its pod."""
    script = "import os; print('hello from rank', os.environ['JOB_COMPLETION_INDEX'])"
    job = trainjob("logged", [PY, "-c", script])
    job["spec"]["trainer"]["numNodes"] = 2
    await plane.kube.create(job, gvr=r.TRAINJOBS)
    kubeconfig = tmp_path / "state" / "kubeconfig"
    out = await kubectl(
        kubeconfig, "wait", "--for=condition=Complete", "trainjob/logged", "--timeout=40s"
    )
    assert out.strip() == "trainjob.trainer.kubeflow.org/logged condition met"

    names = sorted(p["metadata"]["name"] for p in pods(plane))
    assert len(names) == 2, names
    logs = [await kubectl(kubeconfig, "logs", name) for name in names]
    assert sorted(line.strip() for line in logs) == [
        f"hello from rank {i}" for i in range(len(names))
    ]
