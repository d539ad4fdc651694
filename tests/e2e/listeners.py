"""What ``ss -ltnp`` shows in this host's network namespace while an example runs: the TCP
listeners owned by pod processes (docs/local-plane.md, "The network sandbox").

A pod's processes are the descendants of ``trainer run`` that the local kubelet started in a
session of their own (every container's process group leads a new session); the plane's own
listeners (API server, webhook, status server, dashboard) belong to ``trainer run``'s
session. The sockets are read from ``/proc/net/tcp`` and ``/proc/net/tcp6`` of this process,
which lists the host namespace's sockets only, and matched to processes by inode through
``/proc/PID/fd``, as ``ss -p`` does. Sampled every 0.1 s while the command runs.

A socket ``trainer run`` itself holds is the plane's, whoever else holds it too: a container's
process is forked from ``trainer run``, leads its new session, and only then closes the fds it
inherited and execs, so a sample in that window sees the plane's listeners in a pod's session.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"
POLL = 0.1


@dataclass(frozen=True)
class Listener:
    pid: int
    command: str
    address: str

    def __str__(self) -> str:
        return f"{self.address} (pid {self.pid}: {self.command})"


def _address(hex_addr: str, family: int) -> str:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if family == socket.AF_INET:
        packed = raw[::-1]
    else:  # four little-endian 32-bit words
        packed = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    text = socket.inet_ntop(family, packed)
    return f"[{text}]:{int(port, 16)}" if family == socket.AF_INET6 else f"{text}:{int(port, 16)}"


def listening_sockets() -> dict[str, str]:
    """Inode -> local address of every TCP socket listening in this namespace."""
    found: dict[str, str] = {}
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == LISTEN:
                    found[fields[9]] = _address(fields[1], family)
    return found


def _stat(pid: str) -> tuple[int, int] | None:
    """(ppid, session) of a process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[3])


def pod_processes(root: int) -> list[int]:
    """Descendants of ``root`` in another session than ``root``'s."""
    tree: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(entry)) is not None:
            tree[int(entry)] = st
    if root not in tree:
        return []
    session = tree[root][1]
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in tree.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if tree[pid][1] != session:
            out.append(pid)
    return out


def _socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets a process holds open."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    found.add(target[8:-1])
    return found


def pod_listeners(root: int) -> set[Listener]:
    """The host-namespace listeners owned by pod processes under ``root`` (not the plane's own,
    which ``root`` holds)."""
    sockets = listening_sockets()
    for inode in _socket_inodes(root):
        sockets.pop(inode, None)
    found: set[Listener] = set()
    for pid in pod_processes(root):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:[") and target[8:-1] in sockets:
                        command = Path(f"/proc/{pid}/cmdline").read_bytes()
                        text = command.replace(b"\0", b" ").decode(errors="replace").strip()
                        found.add(Listener(pid, text[:120], sockets[target[8:-1]]))
    return found


class Watch:
    """Samples :func:`pod_listeners` of ``proc`` until it exits."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.found: set[Listener] = set()
        self.samples = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self.proc.poll() is None:
            self.found |= pod_listeners(self.proc.pid)
            self.samples += 1
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(POLL)

    def join(self) -> None:
        self._thread.join()


def run_watched(
    args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> tuple[subprocess.CompletedProcess[str], set[Listener]]:
    """Run ``args`` (a ``trainer run``) to the end; its result and the listeners its pods
    opened in this host's network namespace."""
    proc = subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watch = Watch(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise
    finally:
        watch.join()
    return subprocess.CompletedProcess(args, proc.returncode, out, err), watch.found


def assert_no_pod_listeners(found: set[Listener], output: str = "") -> None:
    """Fails naming every listener a pod opened in the host's network namespace."""
    assert not found, (
        "pod processes listen in the host's network namespace (they must be sandboxed): "
        + "; ".join(sorted(map(str, found)))
        + ("\n" + output[-4000:] if output else "")
    )
