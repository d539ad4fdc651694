"""The pods' network sandbox (docs/local-plane.md, "The network sandbox"), with real
namespaces: a process started in a sandbox binds every address and is still out of reach of
this host's namespace and of another user (``setpriv --reuid=65534``), while the kubelet's
probes reach in and the plane's services reach out; and the listener check of the example
tests sees a listener when one is there."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.listeners import pod_listeners
from trainer.jobset import contract as jsc
from trainer.local.executor.sandbox import sandbox, uts

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
POD = {"metadata": {"namespace": "ns", "name": "p-0", "labels": {jsc.LABEL_JOBSET_NAME: "js"}}}

LISTENER = """
import socket, sys
port = int(sys.argv[1])
four = socket.socket(socket.AF_INET)
four.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
four.bind(("0.0.0.0", port)); four.listen()
six = socket.socket(socket.AF_INET6)
six.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
six.bind(("::", port)); six.listen()
print("listening", socket.gethostname(), flush=True)
conn, _ = four.accept()
conn.sendall(b"inside")
conn.close()
sys.stdin.read()
"""

ATTACK = """
import socket, sys
port = int(sys.argv[1])
hosts = ["127.0.0.1", "::1"] + sys.argv[2:]
for host in hosts:
    try:
        socket.create_connection((host, port), timeout=2).close()
        print("connected", host)
    except OSError as exc:
        print("refused", host, type(exc).__name__)
"""


def need_sandbox() -> None:
    why = sandbox.available()
    if why:
        pytest.skip(f"this host cannot make network namespaces: {why}")


def host_addresses() -> list[str]:
    """This host's non-loopback addresses."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    return [a for a in out.split() if not a.startswith("127.")][:4]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def plane_service() -> AsyncIterator[int]:
    """A stand-in for a plane service on the host's loopback: answers ``host``."""

    async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"host")
        await w.drain()
        w.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()


async def start_in(box: sandbox.Sandbox, code: str, *args: str) -> asyncio.subprocess.Process:
    exe, argv = uts.command(
        "p-0", sys.executable, [sys.executable, "-c", code, *args], None, box.fds
    )
    return await asyncio.create_subprocess_exec(
        *argv,
        executable=exe,
        pass_fds=[fd for fd in box.fds if fd >= 0],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )


async def test_a_pod_binding_every_address_is_reachable_only_inside_its_sandbox(
    tmp_path: Path, plane_service: int
) -> None:
    need_sandbox()
    boxes = sandbox.Sandboxes(tmp_path / "sandboxes", [plane_service])
    box = await boxes.acquire(POD)
    port = free_port()
    proc = await start_in(box, LISTENER, str(port))
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.decode().split() == ["listening", "p-0"]

        # Nothing of it in the host's namespace (what `ss -ltnp` shows) ...
        assert not pod_listeners(os.getpid())
        # ... nor reachable from it, by this user or another, on any address.
        attack = subprocess.run(
            [*NOBODY, sys.executable, "-I", "-c", ATTACK, str(port), *host_addresses()]
            if os.geteuid() == 0 and shutil.which("setpriv")
            else [sys.executable, "-I", "-c", ATTACK, str(port), *host_addresses()],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert "connected" not in attack.stdout, attack.stdout
        assert attack.stdout.count("refused") >= 2

        # The kubelet reaches in (a probe's connection) ...
        reader, writer = await box.connect(port)
        assert await reader.read() == b"inside"
        writer.close()
        # ... and a pod reaches the plane's service at its usual address.
        probe = await start_in(
            box,
            "import socket,sys; s=socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
            "print(s.recv(9).decode())",
            str(plane_service),
        )
        out, _ = await asyncio.wait_for(probe.communicate(), 30)
        assert out.decode().strip() == "host"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()
        await boxes.release(POD)


async def test_the_pods_of_one_jobset_share_a_sandbox_and_another_jobset_has_its_own(
    tmp_path: Path,
) -> None:
    need_sandbox()
    boxes = sandbox.Sandboxes(tmp_path / "sandboxes")
    other: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "q-0", "labels": {jsc.LABEL_JOBSET_NAME: "other"}}
    }
    sibling: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "p-1", "labels": {jsc.LABEL_JOBSET_NAME: "js"}}
    }
    first = await boxes.acquire(POD)
    second = await boxes.acquire(sibling)
    third = await boxes.acquire(other)
    try:
        assert first is second and first is not third
        port = free_port()
        proc = await start_in(first, LISTENER, str(port))
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)
        reader, writer = await second.connect(port)  # the sibling pod's view
        assert await reader.read() == b"inside"
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await third.connect(port)  # another TrainJob's pods cannot
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()
    finally:
        await boxes.release(POD)
        assert boxes._boxes  # the sibling still runs: the sandbox stays
        await boxes.release(sibling)
        await boxes.release(other)
    assert not boxes._boxes
    assert not (tmp_path / "sandboxes" / "box-1").exists()


async def test_a_grpc_probe_socket_is_private_to_this_user(tmp_path: Path) -> None:
    need_sandbox()
    boxes = sandbox.Sandboxes(tmp_path / "sandboxes")
    box = await boxes.acquire(POD)
    try:
        path = Path(await box.unix_path(50051))
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
    finally:
        await boxes.release(POD)


AS_ANOTHER_USER = """
import asyncio, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from trainer.local.executor.sandbox import sandbox, uts

async def main():
    port, listener = int(sys.argv[2]), sys.argv[4]
    why = sandbox.available()
    if why:
        print("unavailable", why, flush=True)
        return
    boxes = sandbox.Sandboxes(Path(sys.argv[3]))
    pod = {"metadata": {"namespace": "ns", "name": "p-0"}}
    box = await boxes.acquire(pod)
    cmd = [sys.executable, "-c", listener, str(port)]
    exe, argv = uts.command("p-0", sys.executable, cmd, None, box.fds)
    proc = await asyncio.create_subprocess_exec(
        *argv, executable=exe, pass_fds=[f for f in box.fds if f >= 0],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    print((await proc.stdout.readline()).decode().strip(), flush=True)
    print("ready", flush=True)
    sys.stdin.readline()  # the test attacks from the host meanwhile
    reader, writer = await box.connect(port)
    print("probe", (await reader.read()).decode(), flush=True)
    writer.close()
    proc.stdin.close()
    await proc.wait()
    await boxes.release(pod)
    print("done", flush=True)

asyncio.run(main())
"""


def test_an_ordinary_user_gets_a_sandbox_too() -> None:
    """The whole sandbox as uid 65534: its holder makes a user namespace of its own, a pod
    joins it and binds 0.0.0.0, the host cannot reach that port and the probe can."""
    need_sandbox()
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or shutil.which("setpriv") is None or python is None:
        pytest.skip("needs root, setpriv and /usr/bin/python3 to run as a second user")
    # A copy of the package uid 65534 can read (CI's checkout is in a private directory).
    shared = Path(tempfile.mkdtemp(prefix="sandbox-user-"))
    try:
        shutil.copytree(
            Path(__file__).resolve().parents[2] / "trainer",
            shared / "trainer",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        for path in [shared, *shared.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        state = shared / "state"
        state.mkdir()
        os.chown(state, 65534, 65534)
        port = free_port()
        args = [str(shared), str(port), str(state), LISTENER]
        proc = subprocess.Popen(
            [*NOBODY, python, "-I", "-c", AS_ANOTHER_USER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # Apart: asyncio's child watcher sometimes logs "Unknown child process pid N" on
            # stderr as the listener exits (seen in CI), which says nothing of the sandbox.
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        seen = [proc.stdout.readline() for _ in range(2)]
        assert seen == ["listening p-0\n", "ready\n"], "".join(seen) + proc.stdout.read()
        assert not pod_listeners(proc.pid)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        proc.stdin.write("\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
        assert out.splitlines() == ["probe inside", "done"], out + err
        assert "Traceback" not in err, err
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_the_listener_check_sees_a_pod_listening_in_the_hosts_namespace() -> None:
    """The check the example tests run must be able to fail."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        found = pod_listeners(os.getpid())
        assert {(x.pid, x.address) for x in found} >= {
            (proc.pid, f"0.0.0.0:{port}"),
            (proc.pid, f"[::]:{port}"),
        }
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("argv", "env", "elastic"),
    [
        (["torchrun", "train.py"], {"PET_RDZV_BACKEND": "c10d"}, True),
        (["torchrun", "--rdzv_backend=c10d", "train.py"], {}, True),
        (["torchrun", "--rdzv-backend", "c10d", "train.py"], {}, True),
        (["torchrun", "train.py"], {"PET_NNODES": "2"}, False),
        (["python", "train.py", "c10d"], {}, False),
    ],
)
def test_which_containers_run_an_elastic_rendezvous(
    argv: list[str], env: dict[str, str], elastic: bool
) -> None:
    assert sandbox.elastic_rendezvous(argv, env) is elastic
