"""End to end: MPI TrainJobs run for real by `trainer run`: real OpenSSH (each node pod's sshd
on a port of its own, the launcher's ssh with the generated key Secret) and real OpenMPI
(mpirun over the generated hostfile), each pod with its own hostname
(docs/local-plane.md, "MPI on the local plane").

Covered: runLauncherAsNode false (examples/mpi, examples/mpi4py-allreduce) and true
(examples/deepspeed-cpu on the built-in deepspeed-distributed runtime, in
tests/e2e/test_mpi_deepspeed.py so that another test worker runs it), numProcPerNode 1 and
2, and the failures a user meets: a rank exiting non-zero, a Secret whose key pair does not
match (ssh's own refusal in the launcher's log), a private key others can read (no fsGroup:
OpenSSH's refusal). Each test is skipped, with the reason, where sshd, mpirun, mpi4py or
per-pod hostnames are missing.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.listeners import assert_no_pod_listeners, run_watched
from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.kube import resources as r
from trainer.local.executor.sandbox import ssh, uts
from trainer.runtime.sshkeys import generate_ssh_keypair

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 90


def _missing() -> str:
    """Why MPI TrainJobs cannot run here, or ``""``."""
    if not os.access("/usr/sbin/sshd", os.X_OK) or not os.access(ssh.SSH_CLIENT, os.X_OK):
        return "OpenSSH's sshd and ssh are needed (hack/system-packages.sh installs them)"
    bindir = os.path.dirname(sys.executable)
    if not shutil.which("mpirun", path=bindir + os.pathsep + os.environ.get("PATH", "")):
        return "mpirun is needed (the `mpi` extra: pip install -e '.[mpi]')"
    try:
        import mpi4py  # noqa: F401, PLC0415 - optional extra
    except ImportError:
        return "mpi4py is needed (the `mpi` extra: pip install -e '.[mpi]')"
    if shutil.which("pasta") is None:
        return (
            "OpenMPI's daemons need a network interface besides loopback in the pods' sandbox, "
            "which pasta gives it (Debian's passt: hack/system-packages.sh installs it)"
        )
    refused = uts.available()
    if refused:
        return f"pods cannot get hostnames of their own on this kernel: {refused}"
    if ssh.private_parent() is None:
        return "no state directory OpenSSH's StrictModes accepts (home is group-writable)"
    return ""


MISSING = _missing()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MISSING), reason=MISSING)]


def trainer_run(path: Path) -> subprocess.CompletedProcess[str]:
    """``trainer run -f PATH``, after checking that no pod (sshd, prterun, prted, a rank)
    listened in the host's network namespace while it ran (tests/e2e/listeners.py)."""
    argv = ["-m", "trainer.cli.main", "run", "-f", str(path), "--timeout", str(RUN_TIMEOUT)]
    done, listeners = run_watched(
        [sys.executable, *argv],
        cwd=ROOT,
        timeout=RUN_TIMEOUT + 30,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert_no_pod_listeners(listeners, done.stdout + done.stderr)
    return done


def pod_lines(out: str, pod_prefix: str) -> list[str]:
    """What pods whose name starts with ``pod_prefix`` logged, in order."""
    pattern = re.compile(rf"^{re.escape(pod_prefix)}-[a-z0-9]+ \| (.*)$", re.M)
    return pattern.findall(out)


def test_mpi_example_prints_each_node_pods_own_hostname() -> None:
    done = trainer_run(ROOT / "examples/mpi/trainjob.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TrainJob default/mpi-hostname: Complete" in done.stdout
    printed = pod_lines(done.stdout, "mpi-hostname-launcher-0-0")
    hosts = sorted(line for line in printed if re.fullmatch(r"mpi-hostname-node-0-\d", line))
    assert hosts == ["mpi-hostname-node-0-0", "mpi-hostname-node-0-1"], done.stdout


def test_prrte_daemons_start_ranks_on_their_main_thread(tmp_path: Path) -> None:
    """Each rank counts the threads of its parent, the node pod's prted: its main thread and
    PMIx's progress thread, none of PRRTE's 16 default odls worker threads, whose race with
    the main thread's reaping lost short-lived ranks (docs/local-plane.md, "OpenMPI's daemons
    start ranks on their main thread")."""
    docs = [d for d in yaml.safe_load_all((ROOT / "examples/mpi/trainjob.yaml").read_text()) if d]
    script = 'echo "$(hostname) daemon threads $(ls /proc/$PPID/task | wc -l)"'
    docs[1]["spec"]["trainer"]["command"] = ["mpirun", "sh", "-c", script]
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    done = trainer_run(path)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = pod_lines(done.stdout, "mpi-hostname-launcher-0-0")
    counts = sorted(line for line in printed if " daemon threads " in line)
    assert counts == [
        "mpi-hostname-node-0-0 daemon threads 2",
        "mpi-hostname-node-0-1 daemon threads 2",
    ], done.stdout


RANK = re.compile(r"rank (\d)/(\d) on (\S+): allreduce sum (\d+) \(expected (\d+)\)")


def test_mpi4py_allreduce_runs_two_ranks_on_each_of_two_node_pods() -> None:
    done = trainer_run(ROOT / "examples/mpi4py-allreduce/trainjob.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = RANK.findall("\n".join(pod_lines(done.stdout, "mpi4py-allreduce-launcher-0-0")))
    assert sorted(ranks) == [
        ("0", "4", "mpi4py-allreduce-node-0-0", "10", "10"),
        ("1", "4", "mpi4py-allreduce-node-0-0", "10", "10"),
        ("2", "4", "mpi4py-allreduce-node-0-1", "10", "10"),
        ("3", "4", "mpi4py-allreduce-node-0-1", "10", "10"),
    ], done.stdout


def _allreduce_docs() -> list[dict[str, Any]]:
    text = (ROOT / "examples/mpi4py-allreduce/trainjob.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def test_a_failing_rank_fails_the_trainjob_and_its_log_is_printed(tmp_path: Path) -> None:
    docs = _allreduce_docs()
    docs[1]["spec"]["trainer"]["command"] += ["--fail-rank", "3"]
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    done = trainer_run(path)
    assert done.returncode != 0
    assert "TrainJob default/mpi4py-allreduce failed: FailedJobs" in done.stdout, done.stdout
    launcher = "\n".join(pod_lines(done.stdout, "mpi4py-allreduce-launcher-0-0"))
    assert "rank 3 on mpi4py-allreduce-node-0-1: failing on purpose" in launcher
    assert "exited with non-zero status" in launcher  # mpirun's own report


def test_a_private_key_others_can_read_is_refused_by_ssh(tmp_path: Path) -> None:
    """Without fsGroup the controller's 0640 reaches the file as is; OpenSSH refuses it."""
    docs = _allreduce_docs()
    for rjob in docs[0]["spec"]["template"]["spec"]["replicatedJobs"]:
        del rjob["template"]["spec"]["template"]["spec"]["securityContext"]
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    done = trainer_run(path)
    assert done.returncode != 0
    launcher = "\n".join(pod_lines(done.stdout, "mpi4py-allreduce-launcher-0-0"))
    assert "UNPROTECTED PRIVATE KEY FILE!" in launcher, done.stdout
    assert "Permission denied (publickey)" in launcher


# --- The key material is the Secret's: a tampered Secret fails at ssh authentication ----------


@pytest.fixture
async def plane() -> AsyncIterator[tuple[LocalPlane, list[str]]]:
    logs: list[str] = []
    with tempfile.TemporaryDirectory(dir=ssh.private_parent()) as state:
        p = await start_local_plane(
            work_dir=ROOT,
            state_dir=Path(state),
            on_log=lambda pod, _container, line: logs.append(f"{pod} | {line}"),
        )
        try:
            yield p, logs
        finally:
            await p.close()


def failed(p: LocalPlane, name: str) -> dict[str, Any] | None:
    job = p.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, "default", name) or {}
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((x for x in conditions if x["status"] == "True" and x["type"] == "Failed"), None)


async def test_a_secret_whose_public_key_does_not_match_fails_at_ssh_authentication(
    plane: tuple[LocalPlane, list[str]],
) -> None:
    p, logs = plane
    runtime, job = _allreduce_docs()
    runtime["metadata"]["namespace"] = job["metadata"]["namespace"] = "default"
    name = job["metadata"]["name"]
    ours, other = generate_ssh_keypair(), generate_ssh_keypair()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{name}-mpi-ssh-auth",
            "namespace": "default",
            "labels": {c.LABEL_TRAINJOB_NAME: name},
        },
        "type": ssh.SSH_AUTH_TYPE,
        "data": {  # the launcher's identity is not the key sshd authorizes
            "ssh-privatekey": base64.b64encode(ours.private_pem).decode(),
            "ssh-publickey": base64.b64encode(other.public_authorized_key).decode(),
        },
    }
    await p.kube.create(secret, gvr=r.SECRETS)
    await p.kube.create(runtime, gvr=r.TRAINING_RUNTIMES)
    await p.kube.create(job, gvr=r.TRAINJOBS)
    changed = asyncio.Event()
    p.server.storage.store.subscribe(lambda _ev: changed.set())
    async with asyncio.timeout(RUN_TIMEOUT):
        while (condition := failed(p, name)) is None:
            changed.clear()
            await changed.wait()
    assert condition["reason"] == "FailedJobs"
    launcher = [line for line in logs if line.startswith(f"{name}-launcher-0-0-")]
    assert any("Permission denied (publickey)" in line for line in launcher), logs


def test_a_node_that_never_gets_ready_fails_the_trainjob_naming_the_pods(tmp_path: Path) -> None:
    """The node pods' sshd hangs without listening (a stand-in named sshd that sleeps): their
    readiness probe never passes, the launcher never starts (dependsOn Ready), and after
    `--ready-timeout` the TrainJob fails with a reason whose message names each pod that is
    not Ready and the probe holding it."""
    hung = tmp_path / "bin" / "sshd"
    hung.parent.mkdir()
    hung.write_text("#!/bin/sh\nexec sleep 600\n")
    hung.chmod(0o755)
    docs = [d for d in yaml.safe_load_all((ROOT / "examples/mpi/trainjob.yaml").read_text()) if d]
    for rjob in docs[0]["spec"]["template"]["spec"]["replicatedJobs"]:
        if rjob["name"] == "node":
            container = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
            container["command"] = [str(hung)]
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    argv = ["run", "-f", str(path), "--ready-timeout", "3", "--timeout", "60"]
    done = subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    failed = re.search(r"TrainJob default/mpi-hostname failed: (\w+): (.*)", done.stdout)
    assert failed is not None, done.stdout
    assert failed[1] == "DependsOnReadyTimeout"
    assert failed[2].startswith(
        "replicated job launcher waited more than 3s for node to be Ready "
        "(trainer run --ready-timeout): pod default/mpi-hostname-node-0-0-"
    ), failed[2]
    waits = re.findall(
        r"pod default/(mpi-hostname-node-0-\d)-[a-z0-9]+: Running, not Ready \(container node: "
        r"readinessProbe tcpSocket port 2222 has not passed\)",
        failed[2],
    )
    assert waits == ["mpi-hostname-node-0-0", "mpi-hostname-node-0-1"], failed[2]
    assert "mpi-hostname-launcher-0-0-" not in done.stdout  # it never started
