"""A container's memory and CPU limits, held by a cgroup of its own where this host allows one
(docs/local-plane.md, "Limits").

A kubelet puts every container into a cgroup whose ``memory.max`` and ``cpu.max`` come from
the container's ``resources.limits``; the kernel then kills a process that goes over its
memory limit (the container ends ``OOMKilled``, exit code 137) and throttles one over its CPU
limit. The local kubelet does the same for each container that has a limit:

- **cgroup v2** (the unified hierarchy with the ``memory`` and ``cpu`` controllers): one cgroup
  ``trainer-local/<pod uid>/<container>`` under the hierarchy's root, with ``+memory +cpu``
  enabled in the ``cgroup.subtree_control`` of the parents, and ``memory.max``,
  ``memory.swap.max`` 0 (where swap is accounted: a cluster's node does not swap) and
  ``cpu.max``. Its OOM kills are counted in ``memory.events`` (``oom_kill``).
- **cgroup v1** (the ``memory`` and ``cpu`` hierarchies mounted apart): the same path under each
  hierarchy whose limit is set, with ``memory.limit_in_bytes`` (and
  ``memory.memsw.limit_in_bytes``, likewise no swap), ``cpu.cfs_period_us`` and
  ``cpu.cfs_quota_us``. Its OOM kills are ``memory.oom_control``'s ``oom_kill`` (older kernels
  lack that line: then a SIGKILL while ``memory.failcnt`` is non-zero counts as one).

Only a container with a limit gets a cgroup: the others stay in the executor's, as before.
How this host allows cgroups is found once per process (:func:`layout`): the plane must be able
to create ``trainer-local`` at a hierarchy's root, which takes root. Where it cannot (another
user, no cgroup filesystem, not Linux), :func:`layout` says why and the kubelet warns once that
limits are not enforced.

The values written are pure functions of the limits (:func:`v2_files`, :func:`v1_files`), and
so is reading the OOM count (:func:`oom_kills`); the rest is the small I/O around them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.machinery.quantity import Quantity, QuantityError

PARENT = "trainer-local"
"""The cgroup under each hierarchy's root that holds the containers' (the kubelet's
``kubepods``)."""
MEMORY = "memory"
CPU = "cpu"
CONTROLLERS = (MEMORY, CPU)
CFS_PERIOD_US = 100_000
"""The CFS period, as the kubelet sets it (100 ms)."""
MIN_QUOTA_US = 1_000
"""The smallest CFS quota the kubelet sets (1 ms per period)."""
MOUNTS = "/proc/self/mounts"
REMOVE_TIMEOUT = 2.0
"""How long the processes of an ended container have to leave its cgroup before it is left
for the next start's sweep (:func:`remove_stale`)."""
STALE_AGE = 60.0
"""A container's cgroup this old and empty is left from an earlier run: a new one is entered
by its process within milliseconds of being made."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_layout_lock = threading.Lock()
_lock = threading.Lock()
"""Serialises making and removing the pod-level directories within this process; across
processes (two planes on one host) a lost race is retried (:func:`_make_dirs`)."""


# --- pure -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """A container's limits: memory in bytes, CPU in millicores; None when not limited."""

    memory: int | None = None
    cpu_millis: int | None = None

    def controllers(self) -> tuple[str, ...]:
        """The controllers that hold these limits."""
        return tuple(
            name
            for name, value in ((MEMORY, self.memory), (CPU, self.cpu_millis))
            if value is not None
        )


def limits_of(container: dict[str, Any]) -> Limits:
    """``resources.limits.memory`` (bytes, rounded up) and ``.cpu`` (millicores, rounded up) of
    a container spec. Requests alone set nothing (a cluster's node does not cap them either);
    a value that is not a positive quantity is ignored (admission refuses it before)."""
    limits = (container.get("resources") or {}).get("limits") or {}

    def parse(key: str, scale: int) -> int | None:
        raw = limits.get(key)
        if raw is None:
            return None
        try:
            value = Quantity.parse(raw) * scale
        except (QuantityError, TypeError):
            return None
        return value.ceil() if value.value > 0 else None

    return Limits(memory=parse(MEMORY, 1), cpu_millis=parse(CPU, 1000))


def cpu_quota_us(millis: int) -> int:
    """The CFS quota per :data:`CFS_PERIOD_US` for a limit of ``millis`` millicores, as the
    kubelet computes it (at least :data:`MIN_QUOTA_US`)."""
    return max(millis * CFS_PERIOD_US // 1000, MIN_QUOTA_US)


def v2_files(limits: Limits) -> dict[str, str]:
    """The cgroup v2 interface files of a container's cgroup and what is written to them."""
    cpu = "max" if limits.cpu_millis is None else str(cpu_quota_us(limits.cpu_millis))
    files = {
        "memory.max": "max" if limits.memory is None else str(limits.memory),
        "cpu.max": f"{cpu} {CFS_PERIOD_US}",
    }
    if limits.memory is not None:
        files["memory.swap.max"] = "0"
    return files


def v1_files(limits: Limits) -> dict[str, dict[str, str]]:
    """Per cgroup v1 controller that holds a limit, its files and values, in the order they
    are written (the memory+swap limit may not be below the memory limit)."""
    files: dict[str, dict[str, str]] = {}
    if limits.memory is not None:
        files[MEMORY] = {
            "memory.limit_in_bytes": str(limits.memory),
            "memory.memsw.limit_in_bytes": str(limits.memory),
        }
    if limits.cpu_millis is not None:
        files[CPU] = {
            "cpu.cfs_period_us": str(CFS_PERIOD_US),
            "cpu.cfs_quota_us": str(cpu_quota_us(limits.cpu_millis)),
        }
    return files


OPTIONAL_FILES = frozenset({"memory.swap.max", "memory.memsw.limit_in_bytes"})
"""Files that exist only where swap is accounted: skipped where absent."""


def oom_kills(text: str) -> int | None:
    """The ``oom_kill`` count of a v2 ``memory.events`` or v1 ``memory.oom_control``; None when
    the kernel does not report it."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def parse_mounts(text: str) -> tuple[str | None, dict[str, str]]:
    """From ``/proc/self/mounts``: the cgroup v2 mount point (None without one) and each v1
    controller's mount point."""
    unified: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point, fstype, options = fields[1], fields[2], fields[3].split(",")
        if fstype == "cgroup2" and unified is None:
            unified = point
        elif fstype == "cgroup":
            for name in CONTROLLERS:
                if name in options:
                    v1.setdefault(name, point)
    return unified, v1


# --- the host ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Where this host's containers' cgroups go: ``version`` 2 or 1, and per usable controller
    the directory that holds :data:`PARENT` (v2: the same for both). ``missing`` says why the
    controllers not in ``roots`` cannot be used ("" when none is missing)."""

    version: int
    roots: dict[str, Path]
    missing: str = ""

    def unenforced(self, limits: Limits) -> str:
        """The warning for ``limits`` that this host cannot hold, or ""."""
        lost = [n for n in limits.controllers() if n not in self.roots]
        if not lost:
            return ""
        what = " and ".join("CPU" if n == CPU else n for n in lost)
        return f"{what} limits are not enforced: {self.missing}"


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _reason(exc: OSError) -> str:
    return f"{exc.filename}: {exc.strerror or exc}" if exc.filename else str(exc)


def _enable_v2(layout: Layout, parent: Path) -> None:
    """Enable the layout's controllers (memory, cpu) for ``parent``'s children."""
    _write(parent / "cgroup.subtree_control", " ".join(f"+{n}" for n in layout.roots))


def _probe(layout: Layout) -> str:
    """Make :data:`PARENT` and a trial child in each root, write what a limit writes, remove
    the child: "" when that all works, else why not."""
    trial = f"probe-{os.getpid()}"
    try:
        for name in dict.fromkeys(layout.roots.values()):
            made = _make_dirs(layout, name, trial)
            try:
                if layout.version == 2:
                    unlimited = v2_files(Limits())
                    for file in (f"{n}.max" for n in layout.roots):
                        _write(made / file, unlimited[file])
                elif (made / "memory.limit_in_bytes").exists():
                    _write(made / "memory.limit_in_bytes", "-1")
                else:
                    _write(made / "cpu.cfs_quota_us", "-1")
            finally:
                _rmdir(made)
                _rmdir(made.parent)
    except OSError as exc:
        return f"cannot make a cgroup: {_reason(exc)}"
    return ""


def detect(mounts: str) -> Layout:
    """The hierarchies ``mounts`` (``/proc/self/mounts``) offers: v2 where its root has the
    memory and cpu controllers, else v1's, else v2's part of them; not yet tried."""
    if not sys.platform.startswith("linux"):
        return Layout(1, {}, f"this host has no cgroups ({sys.platform}, not Linux)")
    unified, v1 = parse_mounts(mounts)
    if unified is not None:
        try:
            available = Path(unified, "cgroup.controllers").read_text().split()
        except OSError:
            available = []
        usable = [n for n in CONTROLLERS if n in available]
        if len(usable) == len(CONTROLLERS) or (usable and not v1):
            lost = [n for n in CONTROLLERS if n not in usable]
            why = f"cgroup v2 at {unified} offers no {' or '.join(lost)} controller" if lost else ""
            return Layout(2, dict.fromkeys(usable, Path(unified)), why)
    if v1:
        unmounted = [n for n in CONTROLLERS if n not in v1]
        why = f"no cgroup v1 hierarchy of the {' or '.join(unmounted)} controller is mounted"
        return Layout(1, {n: Path(p) for n, p in v1.items()}, why if unmounted else "")
    return Layout(1, {}, "no cgroup hierarchy with the memory and cpu controllers is mounted")


def layout() -> Layout:
    """How this host allows per-container cgroups (found once per process, by making one; the
    first containers ask at the same time)."""
    with _layout_lock:
        return _layout()


@functools.cache
def _layout() -> Layout:
    try:
        mounts = Path(MOUNTS).read_text()
    except OSError:
        mounts = ""
    found = detect(mounts)
    if not found.roots:
        return found
    why = _probe(found)
    if why:
        uid = os.getuid()
        who = f" (the plane runs as uid {uid}, not root)" if uid != 0 else ""
        return Layout(found.version, {}, why + who)
    return found


def _rmdir(path: Path) -> bool:
    """Remove an empty cgroup; False while it holds processes or children."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def _make_dirs(layout: Layout, root: Path, *names: str) -> Path:
    """Make ``root/PARENT/names...`` (controllers enabled on the way in v2); a parent removed
    by a concurrent sweep is made again."""
    for attempt in range(3):
        path = root / PARENT
        try:
            with _lock:
                if layout.version == 2:
                    _enable_v2(layout, root)
                for name in names:
                    path.mkdir(exist_ok=True)
                    if layout.version == 2:
                        _enable_v2(layout, path)
                    path = path / name
                path.mkdir(exist_ok=True)
            return path
        except FileNotFoundError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


# --- one container's cgroup -------------------------------------------------------------------
@dataclass(frozen=True)
class ContainerCgroup:
    """The cgroup directories of one container's run (one per v1 hierarchy, one in v2) and the
    OOM kill count they had before its process entered."""

    version: int
    dirs: tuple[Path, ...]
    memory_dir: Path | None
    oom_before: int

    @property
    def procs(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` files the container's process writes its pid into."""
        return tuple(str(d / "cgroup.procs") for d in self.dirs)

    def join(self, pid: int) -> None:
        """Move process ``pid`` in (for a process started without the entry script)."""
        for procs in self.procs:
            _write(Path(procs), str(pid))

    def oom_count(self) -> int | None:
        """How many processes the kernel killed here for going over the memory limit; None
        where the kernel does not count them (or the cgroup holds no memory limit)."""
        if self.memory_dir is None:
            return None
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            return oom_kills((self.memory_dir / name).read_text())
        except OSError:
            return None

    def oom_killed(self, returncode: int) -> bool:
        """Whether the run that exited with ``returncode`` had a process OOM-killed. Without
        an ``oom_kill`` count (v1 before Linux 4.13): a SIGKILL after usage reached the limit
        (``memory.failcnt``)."""
        if self.memory_dir is None:
            return False
        count = self.oom_count()
        if count is not None:
            return count > self.oom_before
        if returncode != -signal.SIGKILL or self.version == 2:
            return False
        try:
            return int((self.memory_dir / "memory.failcnt").read_text().strip() or 0) > 0
        except (OSError, ValueError):
            return False

    def remove(self, timeout: float = REMOVE_TIMEOUT) -> bool:
        """Kill what is left in the cgroup and remove it, and its pod's and :data:`PARENT` when
        empty. False (logged by the caller) when a process would not leave within ``timeout``."""
        deadline = time.monotonic() + timeout
        for d in self.dirs:
            while True:
                if _rmdir(d):
                    break
                _kill_members(d)
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.01)
            with _lock:
                if _rmdir(d.parent):
                    _rmdir(d.parent.parent)
        return True


def _kill_members(directory: Path) -> None:
    """SIGKILL every process still in a container's cgroup (escaped from its process group);
    v2's ``cgroup.kill`` does it at once."""
    kill = directory / "cgroup.kill"
    if kill.exists():
        with contextlib.suppress(OSError):
            _write(kill, "1")
        return
    with contextlib.suppress(OSError):
        for line in (directory / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(line), signal.SIGKILL)


def create(found: Layout, pod_uid: str, container: str, limits: Limits) -> ContainerCgroup:
    """Make the container's cgroup(s) with ``limits`` under ``found``'s roots (only the
    controllers that hold a limit, in v1). Raises OSError (ValueError for a name that is not
    a plain path component)."""
    for name in (pod_uid, container):
        if not _NAME.match(name) or name in (".", ".."):
            raise ValueError(f"not a cgroup name: {name!r}")
    if found.version == 2:
        root = next(iter(found.roots.values()))
        made = _make_dirs(found, root, pod_uid, container)
        plan = {made: {k: v for k, v in v2_files(limits).items() if k.split(".")[0] in found.roots}}
        memory_dir: Path | None = made if MEMORY in found.roots else None
    else:
        plan = {}
        memory_dir = None
        for controller, files in v1_files(limits).items():
            if controller not in found.roots:
                continue
            made = _make_dirs(found, found.roots[controller], pod_uid, container)
            plan[made] = files
            if controller == MEMORY:
                memory_dir = made
    cgroup = ContainerCgroup(found.version, tuple(plan), memory_dir, 0)
    try:
        for directory, files in plan.items():
            for name, value in files.items():
                if name in OPTIONAL_FILES and not (directory / name).exists():
                    continue
                _write(directory / name, value)
    except OSError:
        with contextlib.suppress(OSError):
            cgroup.remove(timeout=0)
        raise
    return ContainerCgroup(found.version, tuple(plan), memory_dir, cgroup.oom_count() or 0)


def remove_stale(found: Layout, *, min_age: float = STALE_AGE) -> int:
    """Remove containers' cgroups left empty by an earlier executor (older than ``min_age``
    seconds: another plane's new cgroup is never taken), then their empty pod cgroups. Returns
    how many containers' cgroups were removed."""
    removed = 0
    cutoff = time.time() - min_age
    for root in dict.fromkeys(found.roots.values()):
        parent = root / PARENT
        with contextlib.suppress(OSError):
            for pod in parent.iterdir():
                if not pod.is_dir():
                    continue
                for child in pod.iterdir():
                    with contextlib.suppress(OSError):
                        if child.is_dir() and child.stat().st_mtime < cutoff and _rmdir(child):
                            removed += 1
                with _lock, contextlib.suppress(OSError):
                    _rmdir(pod)
            with _lock, contextlib.suppress(OSError):
                _rmdir(parent)
    return removed


def sweep() -> int:
    """At a kubelet's start: :func:`remove_stale` where this host allows cgroups."""
    found = layout()
    return remove_stale(found) if found.roots else 0
