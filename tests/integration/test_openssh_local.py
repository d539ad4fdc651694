"""Real OpenSSH with what the local executor gives an MPI pod (trainer.local.executor.sandbox.ssh
and uts): the sshd config it writes, the client wrapper, a key pair from the controller's own
generator (trainer.runtime.sshkeys) laid out as the Secret volume lays it out, and the pod's
own hostname. Proves that real OpenSSH refuses a private key its group or others can read
(the controller's 0640 as written without fsGroup), accepts the mode the local kubelet gives
it with fsGroup (0600), and refuses a key that is not in authorized_keys."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.local.executor.kubelet.policy.volumes import local_mode
from trainer.local.executor.policy import sshports
from trainer.local.executor.sandbox import ssh, uts
from trainer.plugins.mpi import SSH_PRIVATE_KEY_MODE, SSH_PUBLIC_KEY_MODE
from trainer.runtime.sshkeys import generate_ssh_keypair

SSHD = "/usr/sbin/sshd"
HOST = "job-node-0-0"


def _needs_openssh() -> None:
    for program in (SSHD, ssh.SSH_CLIENT):
        if not os.access(program, os.X_OK):
            pytest.skip(f"{program} is not installed (hack/system-packages.sh installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"sshd exited: {proc.stdout.read() if proc.stdout else b''!r}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)  # polling a port: there is no event to await
    raise AssertionError(f"sshd did not listen on {port} within {seconds}s")


class Pods:
    """Two pods' directories under a StrictModes-safe parent: ``node`` runs sshd, ``launcher``
    the client; both mount the same key pair."""

    def __init__(self, root: Path) -> None:
        self.root = root
        keys = generate_ssh_keypair()
        self.port = _free_port()
        self.annotation = json.dumps({"port": 2222, "hosts": {HOST: self.port}})
        self.node_auth = root / "node" / "volumes" / "mpi-ssh-auth"
        self.launcher_auth = root / "launcher" / "volumes" / "mpi-ssh-auth"
        for auth in (self.node_auth, self.launcher_auth):
            auth.mkdir(parents=True)
            (auth / "id_rsa").write_bytes(keys.private_pem)
            (auth / "authorized_keys").write_bytes(keys.public_authorized_key)
            (auth / "authorized_keys").chmod(local_mode(SSH_PUBLIC_KEY_MODE, 1000))

    def pod(self, hostname: str) -> dict[str, object]:
        return {
            "metadata": {"name": hostname, "annotations": {sshports.LOCAL_SSH: self.annotation}},
            "spec": {"hostname": hostname, "subdomain": "job"},
        }


@pytest.fixture
def pods() -> Iterator[Pods]:
    _needs_openssh()
    parent = ssh.private_parent()
    if parent is None:
        pytest.skip("no directory OpenSSH's StrictModes accepts (home is group-writable)")
    with tempfile.TemporaryDirectory(dir=parent) as root:
        yield Pods(Path(root))


@pytest.fixture
def sshd(pods: Pods) -> Iterator[subprocess.Popen[bytes]]:
    files = ssh.Files(pods.root / "node" / "ssh")
    argv = ssh.sshd_setup(
        files, pods.pod(HOST), HOST, [SSHD, "-De"], str(pods.node_auth), dict(os.environ)
    )
    executable = SSHD
    if uts.available() == "":  # "" means the kernel allows a UTS namespace
        executable, argv = uts.command(HOST, SSHD, argv)
    proc = subprocess.Popen(argv, executable=executable, stdout=subprocess.PIPE, stderr=-2)
    try:
        _wait_listening(pods.port, proc)
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def _ssh(pods: Pods, command: str) -> subprocess.CompletedProcess[str]:
    files = ssh.Files(pods.root / "launcher" / "ssh")
    launcher = pods.pod("job-launcher-0-0")
    env = {**os.environ, **ssh.client_setup(files, launcher, str(pods.launcher_auth), os.environ)}
    return subprocess.run(
        ["ssh", f"{HOST}.job", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_fs_group_mode_of_the_generated_key_logs_in(
    pods: Pods, sshd: subprocess.Popen[bytes]
) -> None:
    (pods.launcher_auth / "id_rsa").chmod(local_mode(SSH_PRIVATE_KEY_MODE, 1000))  # 0600
    done = _ssh(pods, "hostname; echo $HOME")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    if uts.available() == "":
        assert lines[0] == HOST  # the session runs in the node pod's UTS namespace
    assert lines[1] == str(pods.root / "node" / "ssh" / "home")


def test_a_session_gets_the_prrte_daemon_settings(
    pods: Pods, sshd: subprocess.Popen[bytes]
) -> None:
    """What prted, started by mpirun through this sshd, reads (docs/local-plane.md, "OpenMPI's
    daemons start ranks on their main thread")."""
    (pods.launcher_auth / "id_rsa").chmod(local_mode(SSH_PRIVATE_KEY_MODE, 1000))
    (name, default), *_ = ssh.PRRTE_DAEMON_ENV.items()
    done = _ssh(pods, f"echo ${name}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.environ.get(name, default)


@pytest.mark.parametrize("mode", [SSH_PRIVATE_KEY_MODE, 0o644], ids=["0640", "0644"])
def test_openssh_refuses_a_private_key_others_can_read(
    pods: Pods, sshd: subprocess.Popen[bytes], mode: int
) -> None:
    (pods.launcher_auth / "id_rsa").chmod(mode)
    done = _ssh(pods, "true")
    assert done.returncode == 255
    assert "UNPROTECTED PRIVATE KEY FILE" in done.stderr
    assert f"Permissions 0{mode:o} for" in done.stderr
    assert "Permission denied (publickey)" in done.stderr


def test_a_key_not_in_authorized_keys_is_refused(pods: Pods, sshd: subprocess.Popen[bytes]) -> None:
    (pods.launcher_auth / "id_rsa").write_bytes(generate_ssh_keypair().private_pem)
    (pods.launcher_auth / "id_rsa").chmod(0o600)
    done = _ssh(pods, "true")
    assert done.returncode == 255
    assert "Permission denied (publickey)" in done.stderr


def test_a_pod_process_answers_hostname_with_the_pods_hostname_and_resolves_it(
    tmp_path: Path,
) -> None:
    refused = uts.available()
    if refused:
        pytest.skip(f"this kernel gives no UTS namespace here: {refused}")
    hostname = shutil.which("hostname")
    if hostname is None:
        pytest.skip("no hostname program on this machine")
    hosts = tmp_path / "etc-hosts"
    uts.write_hosts(str(hosts), ssh.host_names("job-node-0-1", "job", "team"))
    executable, argv = uts.command("job-node-0-1", hostname, ["hostname"], str(hosts))
    done = subprocess.run(argv, executable=executable, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "job-node-0-1")
    script = (
        "import socket; n = socket.gethostname(); "
        "print(n, socket.gethostbyname(n), socket.gethostbyname(n + '.job.team.svc'))"
    )
    python = ["python", "-c", script]
    executable, argv = uts.command("job-node-0-1", sys.executable, python, str(hosts))
    done = subprocess.run(argv, executable=executable, capture_output=True, text=True, check=False)
    assert done.stdout.split() == ["job-node-0-1", "127.0.0.1", "127.0.0.1"], done.stderr
    assert socket.gethostname() != "job-node-0-1"  # the host keeps its own
    with pytest.raises(OSError):
        socket.gethostbyname("job-node-0-1.job.team.svc")  # and its own /etc/hosts
