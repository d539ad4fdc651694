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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.listeners import pod_listeners
from trainer.local.executor import sandbox, uts

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
POD = {"metadata": {"namespace": "ns", "name": "p-0", "labels": {sandbox.JOBSET_LABEL: "js"}}}

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
        "metadata": {"namespace": "ns", "name": "q-0", "labels": {sandbox.JOBSET_LABEL: "other"}}
    }
    sibling: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "p-1", "labels": {sandbox.JOBSET_LABEL: "js"}}
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


def test_an_ordinary_user_gets_a_sandbox_too(tmp_path: Path) -> None:
    """The holder as uid 65534: a user namespace of its own makes the network namespace."""
    need_sandbox()
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as a second user")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from trainer.local.executor import sandbox; print(repr(sandbox.available()))"
    )
    root = str(Path(__file__).resolve().parents[2])
    # The system's interpreter: the test's may live where uid 65534 cannot run it (pyenv).
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    done = subprocess.run(
        [*NOBODY, python, "-I", "-c", code, root],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if "Permission denied" in done.stderr or "No module named" in done.stderr:
        pytest.skip(f"uid 65534 cannot run the checkout here: {done.stderr.strip()[-200:]}")
    assert done.stdout.strip() == "''", done.stdout + done.stderr


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
