"""Each pod's own hostname: its processes run in a UTS namespace of their own, and resolve
that hostname as a pod does.

On a cluster every pod has a hostname (``<job>-node-0-1`` for an indexed Job's pod with a
subdomain), and ``hostname``, ``socket.gethostname()`` and MPI's node names report it; the
kubelet also writes the pod's ``/etc/hosts`` so that the pod resolves its own names. The local
kubelet runs every pod on this one host, so without help they would all report the host's
name. It therefore starts each container's process through this module run as a script
(``python -I uts.py NAME [--hosts FILE] -- EXE ARGV...``): it unshares a UTS namespace, sets
the hostname to the pod's and ``exec``s the container's command, so the process keeps its pid
and argv (only the executable is resolved beforehand). With ``--hosts`` it also unshares a
mount namespace and bind-mounts FILE (this host's ``/etc/hosts`` plus a line mapping the pod's
own names to 127.0.0.1, :func:`write_hosts`) over ``/etc/hosts``, so that
``gethostbyname(gethostname())`` works as in a pod. Everything the process starts (an sshd's
sessions, MPI ranks started through them) inherits both. With ``--sandbox USERNS,NETNS`` it
first joins a pod sandbox's namespaces by those inherited descriptors (:func:`join`;
:mod:`~trainer.local.executor.sandbox.sandbox`), and refuses to run the command if it cannot. With
``--cgroup FILE[,FILE]`` it first writes its pid into each ``cgroup.procs`` FILE, so that the
command runs from its first instruction in the container's cgroups and under their memory and
CPU limits (:mod:`~trainer.local.executor.sandbox.cgroups`), and likewise refuses to run it outside.
With ``--bind SOURCE TARGET`` (repeated) it bind-mounts SOURCE read-only on TARGET in its mount
namespace: the pod's service-account directory at the standard path
(:mod:`~trainer.local.executor.kubelet.policy.incluster`), its mount point made without writing to
the host (:func:`make_mount_point`).

- As root, plain ``unshare(CLONE_NEWUTS | CLONE_NEWNS)``.
- As another user, a user namespace too (``CLONE_NEWUSER``) that maps the user to itself
  (uid and gid unchanged, ``setgroups`` denied, as ``unshare --user --map-current-user``
  does), which gives the right to set the hostname and mount in the new namespaces; the
  process loses its capabilities at ``exec`` as usual.

Where the kernel refuses (user namespaces disabled, a seccomp profile), :func:`available`
says so once, the kubelet logs a warning and runs processes as before: they report this
host's hostname, while ``$HOSTNAME`` still names the pod (docs/local-plane.md, "MPI on the
local plane"). A hosts file that cannot be mounted is skipped with one line on stderr.

Only the standard library is imported: the script runs with ``-I`` before every container.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import socket
import subprocess
import sys
from collections.abc import Iterable

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWUSER = 0x10000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
ETC_HOSTS = "/etc/hosts"
V4_MAPPED_LOOPBACK = "::ffff:127.0.0.1"
"""127.0.0.1 as a dual-stack (IPv6) socket reports a peer there: torch's TCPStore server
accepts on one, and looks the peer's name up (getnameinfo). glibc's hosts file lookup does not
map such an address to its IPv4 lines, so without a line of its own the lookup goes to DNS,
which a sandbox without egress cannot reach (``EAI_AGAIN``: torch's ``[c10d] The hostname of
the client socket cannot be retrieved. err=-3``); docs/local-plane.md, "The network sandbox"."""
SCRIPT = os.path.abspath(__file__)
CHECK = "--check"
"""Argument for a dry run: unshare, set a hostname and bind-mount /etc/hosts onto itself."""
HOSTS = "--hosts"
SANDBOX = "--sandbox"
CGROUP = "--cgroup"
BIND = "--bind"
MS_REMOUNT = 0x20
MS_RDONLY = 0x1


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _errno_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def join(fds: tuple[int, int]) -> None:
    """Join a sandbox's namespaces (docs/local-plane.md, "The network sandbox"): ``fds`` are
    its user namespace (-1 when the plane runs as root, which keeps the host's) and its
    network namespace, both closed afterwards. Raises OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    userns, netns = fds
    try:
        if userns >= 0 and libc.setns(userns, CLONE_NEWUSER) != 0:
            raise _errno_error("joining the sandbox's user namespace")
        if libc.setns(netns, CLONE_NEWNET) != 0:
            raise _errno_error("joining the sandbox's network namespace")
    finally:
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def enter(
    hostname: str,
    hosts: str | None = None,
    sandbox: tuple[int, int] | None = None,
    binds: tuple[tuple[str, str], ...] = (),
) -> str:
    """Move this process into a new UTS namespace (and mount namespace with ``hosts`` or
    ``binds``, and user namespace unless root or already in a sandbox's) and set its
    hostname; with ``sandbox`` (see :func:`join`) into a sandbox's network namespace first;
    ``binds`` (source, target) are bind-mounted read-only. Raises OSError when the kernel
    refuses the namespaces; returns why a mount could not be made, or ``""``."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    own_userns = uid != 0 and sandbox is None
    if sandbox is not None:
        join(sandbox)
    mounts = bool(hosts or binds)
    flags = CLONE_NEWUTS | (CLONE_NEWNS if mounts else 0) | (CLONE_NEWUSER if own_userns else 0)
    if libc.unshare(flags) != 0:
        raise _errno_error("unshare")
    if own_userns:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    socket.sethostname(hostname)
    if not mounts:
        return ""
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return str(_errno_error("making mounts private"))
    problems = []
    if hosts and libc.mount(hosts.encode(), ETC_HOSTS.encode(), None, MS_BIND, None) != 0:
        problems.append(str(_errno_error(f"bind-mounting {hosts} on {ETC_HOSTS}")))
    for source, target in binds:
        if not os.path.isdir(target):
            try:
                make_mount_point(libc, target)
            except OSError as exc:
                problems.append(f"cannot make the mount point {target}: {exc}")
                continue
        if libc.mount(source.encode(), target.encode(), None, MS_BIND, None) != 0:
            problems.append(str(_errno_error(f"bind-mounting {source} on {target}")))
        elif libc.mount(None, target.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0:
            problems.append(str(_errno_error(f"making {target} read-only")))
    return "; ".join(problems)


def make_mount_point(libc: ctypes.CDLL, target: str) -> None:
    """Make the directory ``target`` in this (private) mount namespace without writing to the
    host's filesystem, which every other program shares (a Kubeflow SDK run on the host takes
    a ``/var/run/secrets/kubernetes.io`` directory as proof that it runs in a pod): the
    nearest existing ancestor is covered with a tmpfs that holds the same entries, each the
    original bind-mounted back (sockets, files and directories with what is mounted under
    them), and the missing directories are made in the tmpfs. OSError when it cannot."""
    real = os.path.realpath(target)
    base = os.path.dirname(real)
    while not os.path.isdir(base):
        base = os.path.dirname(base)
    if base == "/":
        raise OSError(errno.EPERM, "refusing to cover / with a tmpfs")
    # The covered directory stays reachable through a descriptor opened before the tmpfs.
    keep = os.open(base, os.O_PATH | os.O_DIRECTORY)
    entries = os.listdir(base)
    saved = f"/proc/self/fd/{keep}"
    if libc.mount(b"tmpfs", base.encode(), b"tmpfs", 0, b"mode=0755") != 0:
        raise _errno_error(f"mounting a tmpfs on {base}")
    for name in entries:
        source, dest = os.path.join(saved, name), os.path.join(base, name)
        if os.path.islink(source):
            os.symlink(os.readlink(source), dest)
            continue
        if os.path.isdir(source):
            os.mkdir(dest)
        else:
            os.close(os.open(dest, os.O_CREAT | os.O_WRONLY, 0o644))
        if libc.mount(source.encode(), dest.encode(), None, MS_BIND | MS_REC, None) != 0:
            raise _errno_error(f"bind-mounting {name} back into {base}")
    os.close(keep)
    os.makedirs(real, 0o755, exist_ok=True)


def join_cgroups(procs: Iterable[str]) -> None:
    """Move this process into the cgroups whose ``cgroup.procs`` files ``procs`` names (before
    any namespace is entered: the files are checked against the host's credentials). Raises
    OSError when one refuses."""
    for path in procs:
        _write(path, str(os.getpid()))


def write_hosts(
    path: str,
    names: Iterable[str],
    base: str = ETC_HOSTS,
    extra: Iterable[tuple[str, Iterable[str]]] = (),
    reverse: str = "",
) -> None:
    """Write the pod's hosts file: this host's (``base``) plus its own names at 127.0.0.1,
    ``extra`` (address, names) lines (the Services it can reach) and, with ``reverse``, that
    name for 127.0.0.1 as an IPv6 socket sees it (:data:`V4_MAPPED_LOOPBACK`)."""
    try:
        with open(base, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        text = "127.0.0.1\tlocalhost\n"
    if text and not text.endswith("\n"):
        text += "\n"
    text += "# the pod's own names (trainer's local kubelet)\n127.0.0.1\t" + " ".join(names) + "\n"
    lines = [f"{address}\t{' '.join(aliases)}\n" for address, aliases in extra]
    if lines:
        text += "# peers and Services (trainer's local kubelet)\n" + "".join(lines)
    if reverse:
        text += (
            "# the pods' address as a dual-stack socket reports a peer (trainer's local kubelet)\n"
            f"{V4_MAPPED_LOOPBACK}\t{reverse}\n"
        )
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def command(
    hostname: str,
    executable: str,
    argv: list[str],
    hosts: str | None = None,
    sandbox: tuple[int, int] | None = None,
    cgroups: Iterable[str] = (),
    binds: Iterable[tuple[str, str]] = (),
) -> tuple[str, list[str]]:
    """The executable and argv that run ``argv`` (whose program is ``executable``) with the
    pod's ``hostname`` (and ``/etc/hosts`` from the file ``hosts``), in the sandbox whose
    namespace descriptors ``sandbox`` names (they must be passed to the child: ``pass_fds``),
    in the cgroups whose ``cgroup.procs`` files ``cgroups`` names."""
    extra = [HOSTS, hosts] if hosts else []
    if sandbox is not None:
        extra += [SANDBOX, f"{sandbox[0]},{sandbox[1]}"]
    procs = list(cgroups)
    if procs:
        extra += [CGROUP, ",".join(procs)]
    for source, target in binds:
        extra += [BIND, source, target]
    return sys.executable, [sys.executable, "-I", SCRIPT, hostname, *extra, "--", executable, *argv]


@functools.cache
def available() -> str:
    """``""`` when processes can get a hostname (and hosts file) of their own here, else why
    not (checked once per process, by running this script)."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", SCRIPT, "probe-hostname", HOSTS, ETC_HOSTS, CHECK],
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
    """``uts.py NAME [--hosts FILE] [--sandbox USERNS_FD,NETNS_FD] [--cgroup FILE[,FILE]] --
    EXE ARGV0 ARGS...`` or ``uts.py NAME [--hosts FILE] --check``."""
    hostname, rest = (args[0], args[1:]) if args else ("", [])
    hosts = None
    sandbox: tuple[int, int] | None = None
    if len(rest) >= 2 and rest[0] == HOSTS:
        hosts, rest = rest[1], rest[2:]
    if len(rest) >= 2 and rest[0] == SANDBOX:
        try:
            userns, netns = (int(v) for v in rest[1].split(","))
        except ValueError:
            print(f"uts.py: bad {SANDBOX} value {rest[1]!r}", file=sys.stderr)
            return 2
        sandbox, rest = (userns, netns), rest[2:]
    procs: list[str] = []
    if len(rest) >= 2 and rest[0] == CGROUP:
        procs, rest = rest[1].split(","), rest[2:]
    binds: list[tuple[str, str]] = []
    while len(rest) >= 3 and rest[0] == BIND:
        binds.append((rest[1], rest[2]))
        rest = rest[3:]
    if hostname and rest == [CHECK]:
        try:
            problem = enter(hostname, hosts)
        except OSError as exc:
            print(f"cannot set a hostname of its own: {exc.strerror or exc}", file=sys.stderr)
            return 1
        if problem:
            print(f"cannot give a hosts file of its own: {problem}", file=sys.stderr)
            return 1
        return 0 if socket.gethostname() == hostname else 1
    if not hostname or len(rest) < 3 or rest[0] != "--":
        print(
            "usage: uts.py HOSTNAME [--hosts FILE] [--sandbox USERNS_FD,NETNS_FD] "
            "[--cgroup FILE[,FILE]] [--bind SOURCE TARGET]... -- EXECUTABLE ARGV0 [ARGS...]",
            file=sys.stderr,
        )
        return 2
    executable, argv = rest[1], rest[2:]
    try:
        join_cgroups(procs)
    except OSError as exc:  # never run a container outside the limits it was given
        print(f"[local kubelet] cannot enter the container's cgroup: {exc}", file=sys.stderr)
        return 126
    try:
        problem = enter(hostname, hosts, sandbox, tuple(binds))
    except OSError as exc:
        if sandbox is not None:  # never run a pod outside the sandbox it was given
            print(f"[local kubelet] cannot enter the pod's sandbox: {exc}", file=sys.stderr)
            return 126
        problem = f"hostname not set: {exc}"  # the kubelet checked available() first
    if problem:
        print(f"[local kubelet] {problem}", file=sys.stderr)
    os.execv(executable, argv)
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
