"""The network sandbox of the local plane's pods (docs/local-plane.md, "The network sandbox").

On a cluster every pod has a network namespace of its own, so a port a training program opens
(torchrun's rendezvous store, OpenMPI's daemons, XGBoost's tracker) is reachable only through
the pod's IP, inside the cluster network. The local kubelet runs pods as processes of this
host; without a sandbox those ports would be the host's, open to every local user and, when
bound to ``0.0.0.0``, to the network. So the pods of one JobSet (a bare pod alone) share one
private network namespace, a :class:`Sandbox`: only a loopback interface, on which the pods
reach each other (their DNS names are rewritten to 127.0.0.1 and their ports kept apart by
:mod:`~trainer.local.executor.sandbox.ports`, as before). Nothing a pod binds, whatever the address,
is reachable from the host's interfaces or by another user.

The only ways in and out:

- **The plane's services.** For every port in ``plane_ports`` (the status server, the API
  server) the sandbox listens on 127.0.0.1 at the same port and forwards each connection to
  that port on the host's loopback, so URLs the controller put into the pods work unchanged.
  Both services authenticate every request (TLS and a token).
- **The kubelet's probes.** ``tcpSocket`` and ``httpGet`` probes connect with a socket made
  inside the sandbox (:meth:`Sandbox.connect`); ``grpc`` probes through a Unix socket in the
  sandbox's private directory (:meth:`Sandbox.unix_path`); ``exec`` probes join it as the
  container's processes do.
- **Egress** (when Debian's ``passt`` package is installed): ``pasta`` gives the namespace a
  network interface whose outgoing connections it makes from the host (so an initializer can
  download a model), with every inbound forward off (``-t none -u none``), no forwards to the
  host's loopback (``-T none -U none``) and the gateway not mapped to the host
  (``--no-map-gw``). Without it the pods have no route beyond their loopback.

A namespace is made by a holder process (:mod:`~trainer.local.executor.sandbox.netns_holder`), which
also makes the sockets the executor uses inside it; containers join it through
:mod:`~trainer.local.executor.sandbox.uts`, by namespace descriptors this module keeps open.
:func:`available` says once per process whether this host allows any of it (user namespaces
may be disabled, a container's seccomp profile may refuse ``unshare``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from trainer.jobset import contract as jsc
from trainer.local.executor.policy.podfields import LOOPBACK
from trainer.local.executor.sandbox import netns_holder
from trainer.machinery.files import private_dir

log = logging.getLogger(__name__)

HOLDER = os.path.abspath(netns_holder.__file__)
START_TIMEOUT = 10.0
COPY_CHUNK = 64 * 1024
PASTA_ARGS = (
    *("-q", "--config-net", "--no-map-gw"),
    *("-t", "none", "-u", "none", "-T", "none", "-U", "none"),
)


EXPOSED = (
    "pods run without a network sandbox ({why}): every port a training program opens is "
    "this host's and, bound to 0.0.0.0, open to the network: torchrun's TCPStore and elastic "
    "rendezvous, OpenMPI's prterun/prted and TCP ranks, XGBoost's tracker and workers, JAX's "
    'coordinator, the data cache (docs/local-plane.md, "The network sandbox")'
)
"""The one warning line when pods cannot be sandboxed."""
PASTA_MISSING = "pasta (Debian's passt package) is not installed"


def no_egress(why: str) -> str:
    """The one warning line when the pods' sandbox has no way out (``why``: pasta's absence or
    failure), with what to do about it."""
    todo = (
        "install it (`sudo apt-get install passt`, or `make install`) for them to reach the network"
        if why == PASTA_MISSING
        else "fix what pasta reports for them to reach the network"
    )
    return (
        f"pods reach nothing beyond their JobSet and the plane's services: {why}; {todo} "
        '(docs/local-plane.md, "The network sandbox")'
    )


ELASTIC_REFUSED = (
    "this host cannot give pods a network sandbox ({why}), and container {container!r} runs "
    "torchrun's elastic rendezvous (c10d), whose store unpickles whatever anyone who can "
    "reach its port writes into it: any local user, or any host on the network, could run "
    "code as you. Run it where namespaces are allowed, or accept that with "
    "--allow-exposed-ports"
)
RDZV_OPTIONS = ("--rdzv_backend", "--rdzv-backend")


def elastic_rendezvous(argv: list[str], env: dict[str, str]) -> bool:
    """Whether a container runs torchrun with the c10d rendezvous (an elastic TrainJob's
    ``PET_RDZV_BACKEND=c10d``, or the option on its command line)."""
    if env.get("PET_RDZV_BACKEND", "").strip().lower() == "c10d":
        return True
    for i, arg in enumerate(argv):
        for option in RDZV_OPTIONS:
            if arg == f"{option}=c10d" or (
                arg == option and i + 1 < len(argv) and argv[i + 1] == "c10d"
            ):
                return True
    return False


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
ConnectionHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class SandboxError(OSError):
    """A sandbox could not be made or used."""


def group_of(pod: dict[str, Any]) -> str:
    """Which sandbox a pod runs in: its JobSet's (``namespace/jobset``), or its own."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    jobset = (meta.get("labels") or {}).get(jsc.LABEL_JOBSET_NAME)
    if jobset:
        return f"{namespace}/jobset/{jobset}"
    return f"{namespace}/pod/{meta.get('name') or ''}/{meta.get('uid') or ''}"


def _holder_command(fd: int) -> list[str]:
    return [sys.executable, "-I", HOLDER, str(fd)]


@functools.cache
def available() -> str:
    """``""`` when pods can run in network sandboxes here, else why not (checked once per
    process, by starting a holder)."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = subprocess.Popen(
            _holder_command(child.fileno()),
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        return str(exc)
    finally:
        child.close()
    try:
        parent.settimeout(START_TIMEOUT)
        try:
            answer = parent.recv(256)
        except OSError as exc:
            return f"no answer from the namespace holder: {exc}"
        if answer != netns_holder.READY:
            return answer.decode(errors="replace").removeprefix("error: ") or "holder exited"
        return ""
    finally:
        parent.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(START_TIMEOUT)
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


MS_BIND = 0x1000
MNT_DETACH = 0x2


def bind_netns(pid: int, path: Path) -> Path:
    """Bind-mount process ``pid``'s network namespace on ``path`` (root only)."""
    private_dir(path.parent)
    path.touch(mode=0o600)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(f"/proc/{pid}/ns/net".encode(), str(path).encode(), None, MS_BIND, None):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return path


def unbind_netns(path: Path) -> None:
    """Undo :func:`bind_netns` (best effort)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(str(path).encode(), MNT_DETACH)
    with contextlib.suppress(OSError):
        path.unlink()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(COPY_CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _splice(a: Streams, b: Streams) -> None:
    """Copy both ways until both sides are done, then close both."""
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        for _, writer in (a, b):
            writer.close()
            with contextlib.suppress(OSError, RuntimeError):
                await writer.wait_closed()


class Sandbox:
    """One private network namespace, its holder process and the forwarders into it. Made
    with :meth:`start`, ended with :meth:`close`."""

    def __init__(self, key: str, directory: Path) -> None:
        self.key = key
        self.directory = directory
        self._control: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = threading.Lock()
        self._servers: list[asyncio.Server] = []
        self._unix: dict[int, str] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.userns_fd = -1
        self.netns_fd = -1
        self._netns_file: Path | None = None
        self.egress = ""
        """Empty when pods can reach beyond their loopback (pasta runs), else why not."""

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def fds(self) -> tuple[int, int]:
        """The namespace descriptors a container joins (see :func:`uts.join`)."""
        return self.userns_fd, self.netns_fd

    async def start(self, plane_ports: Iterable[int] = ()) -> None:
        """Make the namespace, open its descriptors and forward ``plane_ports`` into it."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *_holder_command(child.fileno()),
                pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            child.close()
        self._control = parent
        answer = await asyncio.to_thread(self._recv_ready)
        if answer != netns_holder.READY:
            await self.close()
            raise SandboxError(answer.decode(errors="replace").removeprefix("error: "))
        try:
            if os.getuid() != 0:
                self.userns_fd = os.open(f"/proc/{self.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
            self.netns_fd = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            for port in plane_ports:
                await self.forward_in(port, port)
        except OSError as exc:
            await self.close()
            raise SandboxError(f"sandbox {self.key}: {exc}") from exc
        self.egress = await self._start_pasta()

    def _recv_ready(self) -> bytes:
        assert self._control is not None
        self._control.settimeout(START_TIMEOUT)
        try:
            return self._control.recv(256) or b"error: the namespace holder exited"
        except OSError as exc:
            return f"error: no answer from the namespace holder: {exc}".encode()

    async def _start_pasta(self) -> str:
        """Give the namespace egress through pasta; why not, or ``""``."""
        pasta = shutil.which("pasta")
        if pasta is None:
            return PASTA_MISSING
        args = [pasta, *PASTA_ARGS]
        if os.getuid() == 0:
            # As root pasta drops to nobody unless told, and cannot open a root process's
            # namespace by pid once it has dropped its capabilities: it joins a bind mount of
            # the namespace instead, as `ip netns add` makes them.
            try:
                self._netns_file = bind_netns(self.pid, self.directory / "netns")
            except OSError as exc:
                return f"the namespace could not be bound for pasta: {exc}"
            args += ["--runas", "0", "--netns", str(self._netns_file)]
        else:
            args.append(str(self.pid))
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await asyncio.wait_for(proc.communicate(), START_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            return f"pasta failed: {exc}"
        if proc.returncode != 0:
            lines = [ln for ln in err.decode(errors="replace").splitlines() if "syslog" not in ln]
            return f"pasta failed: {lines[-1] if lines else f'exit code {proc.returncode}'}"
        return ""

    def _make_socket_sync(self, family: int) -> socket.socket:
        with self._lock:
            if self._control is None:
                raise SandboxError(f"sandbox {self.key} is closed")
            self._control.settimeout(START_TIMEOUT)
            name = b"inet6" if family == socket.AF_INET6 else b"inet"
            self._control.send(name)
            msg, fds, _, _ = socket.recv_fds(self._control, 256, 1)
        if not fds:
            raise SandboxError(
                f"sandbox {self.key}: {msg.decode(errors='replace') or 'the holder exited'}"
            )
        made = socket.socket(fileno=fds[0])
        made.setblocking(False)
        return made

    async def socket(self, family: int = socket.AF_INET) -> socket.socket:
        """A new TCP socket inside the namespace (non-blocking)."""
        try:
            return await asyncio.to_thread(self._make_socket_sync, family)
        except OSError as exc:
            if isinstance(exc, SandboxError):
                raise
            raise SandboxError(f"sandbox {self.key}: {exc}") from exc

    async def connect(self, port: int, host: str = LOOPBACK) -> Streams:
        """Open a connection to ``host:port`` inside the namespace."""
        sock = await self.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)

    async def forward_in(self, inner_port: int, host_port: int) -> None:
        """Listen on 127.0.0.1:``inner_port`` inside the namespace and forward every
        connection to 127.0.0.1:``host_port`` of the host."""
        sock = await self.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, inner_port))
        sock.listen(128)

        handle = self._forwarder(lambda: asyncio.open_connection(LOOPBACK, host_port))
        self._servers.append(await asyncio.start_server(handle, sock=sock))

    async def publish(self, address: str, port: int) -> asyncio.Server:
        """Listen on ``address:port`` of the host and carry every connection to port ``port``
        inside the namespace (a pod's address: :mod:`~trainer.local.executor.sandbox.podaddress`).
        The caller closes the server when the pod ends; the sandbox's end closes it too."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        server = await asyncio.start_server(self._forwarder(lambda: self.connect(port)), sock=sock)
        self._servers.append(server)
        return server

    async def unix_path(self, port: int) -> str:
        """A Unix socket in the sandbox's private directory whose connections reach
        127.0.0.1:``port`` inside the namespace (for clients that take an address, not a
        socket: gRPC's ``unix:`` targets)."""
        if port in self._unix:
            return self._unix[port]
        private_dir(self.directory)
        path = str(self.directory / f"port-{port}.sock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

        handle = self._forwarder(lambda: self.connect(port))
        self._servers.append(await asyncio.start_unix_server(handle, path=path))
        os.chmod(path, 0o600)
        self._unix[port] = path
        return path

    def _forwarder(self, open_other: Callable[[], Awaitable[Streams]]) -> ConnectionHandler:
        """A connection handler that opens the other side with ``open_other`` and copies both
        ways (a connection it cannot open is closed)."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._track(writer)
            try:
                other = await open_other()
            except OSError:
                writer.close()
                return
            self._track(other[1])
            await _splice((reader, writer), other)

        return handle

    def _track(self, writer: asyncio.StreamWriter) -> None:
        """Remember a forwarded connection's transport, to close it with the sandbox."""
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _done: self._writers.discard(writer))

    async def close(self) -> None:
        """Stop forwarding, close the descriptors and end the holder (the namespace goes once
        the last process in it has exited)."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        for writer in self._writers:  # the copies see the end and the handlers return
            writer.close()
        self._writers.clear()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=START_TIMEOUT)
        for fd in (self.userns_fd, self.netns_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.userns_fd = self.netns_fd = -1
        if self._control is not None:
            with self._lock:
                self._control.close()
                self._control = None
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        if self._netns_file is not None:
            unbind_netns(self._netns_file)  # pasta quits when the file goes
            self._netns_file = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.directory)


class Sandboxes:
    """The sandboxes of one kubelet, by :func:`group_of` key, each kept while a pod uses it."""

    def __init__(self, directory: Path, plane_ports: Iterable[int] = ()) -> None:
        self.directory = directory
        self.plane_ports = tuple(plane_ports)
        self._boxes: dict[str, Sandbox] = {}
        self._users: dict[str, int] = {}
        self._starting: dict[str, asyncio.Task[Sandbox]] = {}
        self._made = 0

    async def acquire(self, pod: dict[str, Any]) -> Sandbox:
        """The pod's sandbox, made if it is the first pod of its group to run."""
        key = group_of(pod)
        self._users[key] = self._users.get(key, 0) + 1
        try:
            box = self._boxes.get(key)
            if box is not None:
                return box
            task = self._starting.get(key)
            if task is None:
                task = asyncio.get_running_loop().create_task(self._make(key))
                self._starting[key] = task
            return await asyncio.shield(task)
        except BaseException:
            await self.release(pod)
            raise

    async def _make(self, key: str) -> Sandbox:
        self._made += 1
        try:
            box = Sandbox(key, self.directory / f"box-{self._made}")
            await box.start(self.plane_ports)
            self._boxes[key] = box
            return box
        finally:
            self._starting.pop(key, None)

    async def release(self, pod: dict[str, Any]) -> None:
        """The pod no longer runs: close its sandbox when it was the last of its group."""
        key = group_of(pod)
        left = self._users.get(key, 0) - 1
        if left > 0:
            self._users[key] = left
            return
        self._users.pop(key, None)
        box = self._boxes.pop(key, None)
        if box is not None:
            await box.close()

    async def close(self) -> None:
        boxes = list(self._boxes.values())
        self._boxes.clear()
        self._users.clear()
        for box in boxes:
            await box.close()
