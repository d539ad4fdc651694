"""Each pod's own hostname: its processes run in a UTS namespace of their own.

On a cluster every pod has a hostname (``<job>-node-0-1`` for an indexed Job's pod with a
subdomain), and ``hostname``, ``socket.gethostname()`` and MPI's node names report it. The
local kubelet runs every pod on this one host, so without help they would all report the
host's name. It therefore starts each container's process through this module run as a
script (``python -I uts.py NAME -- EXE ARGV...``): it unshares a UTS namespace, sets the
hostname to the pod's and ``exec``s the container's command, so the process keeps its pid and
argv (only the executable is resolved beforehand). Everything the process starts (an sshd's
sessions, MPI ranks started through them) inherits the namespace and the hostname.

- As root, a plain ``unshare(CLONE_NEWUTS)``.
- As another user, a user namespace too (``CLONE_NEWUSER``) that maps the user to itself
  (uid and gid unchanged, ``setgroups`` denied, as ``unshare --user --map-current-user``
  does), which gives the right to set the hostname of the new UTS namespace; the process
  loses its capabilities at ``exec`` as usual.

Where the kernel refuses (user namespaces disabled, a seccomp profile), :func:`available`
says so once, the kubelet logs a warning and runs processes as before: they report this
host's hostname, while ``$HOSTNAME`` still names the pod (docs/local-plane.md, "MPI on the
local plane").

Only the standard library is imported: the script runs with ``-I`` before every container.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import subprocess
import sys

CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000
SCRIPT = os.path.abspath(__file__)
CHECK = "--check"
"""Argument for a dry run: unshare and set a hostname, exit 0 on success."""


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(hostname: str) -> None:
    """Move this process into a new UTS namespace (and user namespace unless root) and set
    its hostname. Raises OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUTS if uid == 0 else CLONE_NEWUTS | CLONE_NEWUSER
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    if uid != 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    socket.sethostname(hostname)


def command(hostname: str, executable: str, argv: list[str]) -> tuple[str, list[str]]:
    """The executable and argv that run ``argv`` (whose program is ``executable``) with the
    pod's ``hostname``."""
    return sys.executable, [sys.executable, "-I", SCRIPT, hostname, "--", executable, *argv]


@functools.cache
def available() -> str:
    """``""`` when processes can get a hostname of their own here, else why not (checked once
    per process, by running this script)."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", SCRIPT, "probe-hostname", CHECK],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode == 0:
        return ""
    return done.stderr.strip() or f"exit code {done.returncode}"


def main(args: list[str]) -> int:
    """``uts.py NAME -- EXE ARGV0 ARGS...`` or ``uts.py NAME --check``."""
    if len(args) >= 2 and args[1] == CHECK:
        try:
            enter(args[0])
        except OSError as exc:
            print(f"cannot set a hostname of its own: {exc.strerror or exc}", file=sys.stderr)
            return 1
        return 0 if socket.gethostname() == args[0] else 1
    if len(args) < 4 or args[1] != "--":
        print("usage: uts.py HOSTNAME -- EXECUTABLE ARGV0 [ARGS...]", file=sys.stderr)
        return 2
    hostname, executable, argv = args[0], args[2], args[3:]
    try:
        enter(hostname)
    except OSError as exc:  # the kubelet checked available() first; run anyway
        print(f"[local kubelet] hostname not set: {exc}", file=sys.stderr)
    os.execv(executable, argv)
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
