"""The process that holds one sandbox's network namespace (docs/local-plane.md, "The network
sandbox"), run as a script by :mod:`~trainer.local.executor.sandbox.sandbox`:
``python -I netns_holder.py FD``.

It unshares a network namespace (and, unless it runs as root, a user namespace that maps
this user to itself, which gives the right to configure the network namespace and to join
it, to this user only; root keeps the host's user namespace, so that what pods do as root,
sshd's privilege separation for one, works as before), brings the namespace's loopback up
and says ``ready`` on the control socket FD (a ``SOCK_SEQPACKET`` Unix socket). From then on
every message it receives asks for one socket made inside the namespace (``inet`` or
``inet6``, TCP), answered with the socket's descriptor (``SCM_RIGHTS``): a socket keeps the
namespace it was made in, so the executor, in the host's namespace, binds, listens and
connects with it there. That is the whole path between the host and a sandbox: the
listeners that carry the plane's services in, and the probes' connections. The holder exits
when the control socket closes (the executor stopped or gave the sandbox up) and dies with
its parent (``PR_SET_PDEATHSIG``).

Only the standard library is imported: the script runs with ``-I``.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
READY = b"ready"
FAMILIES = {b"inet": socket.AF_INET, b"inet6": socket.AF_INET6}


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter() -> None:
    """Move this process into a new network namespace (and user namespace unless root) and
    bring loopback up.
    Raises OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "unshare"):
        raise OSError(0, "this system has no network namespaces (Linux only)")
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNET | (CLONE_NEWUSER if uid else 0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    if uid:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def serve(control: socket.socket) -> None:
    """Answer socket requests until the control socket closes."""
    while True:
        try:
            request = control.recv(64)
        except InterruptedError:  # pragma: no cover - retried by Python already
            continue
        except OSError:
            return
        if not request:
            return
        family = FAMILIES.get(request)
        if family is None:
            control.send(b"error: unknown request " + request[:32])
            continue
        try:
            made = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            control.send(f"error: {exc.strerror or exc}".encode())
            continue
        try:
            socket.send_fds(control, [b"ok"], [made.fileno()])
        finally:
            made.close()


def main(args: list[str]) -> int:
    if len(args) != 1 or not args[0].isdigit():
        print("usage: netns_holder.py CONTROL_FD", file=sys.stderr)
        return 2
    control = socket.socket(fileno=int(args[0]))
    try:
        enter()
    except OSError as exc:
        control.send(f"error: {exc.strerror or exc}".encode())
        return 1
    control.send(READY)
    serve(control)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
