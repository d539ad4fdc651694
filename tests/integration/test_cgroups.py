"""A container's cgroup on this host (docs/local-plane.md, "Limits"): made with the limit files
set, entered by the entry script before the command runs (or moved into right after a direct
start), refused by the script when it cannot be entered, emptied and removed after the run
(a process that left the container's process group included), swept when an earlier executor
left it empty; and, as another user, found unusable with the reason. Skipped, with the reason,
where this host has no cgroups the plane can make."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.local.executor.sandbox import cgroups, uts

ROOT = Path(__file__).resolve().parents[2]
HOST = cgroups.layout()
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
needs_cgroups = pytest.mark.skipif(
    not all(n in HOST.roots for n in cgroups.CONTROLLERS),
    reason=f"this host cannot hold memory and CPU limits: {HOST.missing}",
)


def own_cgroups(pid: int | str) -> dict[str, str]:
    """``/proc/PID/cgroup`` as controller (v2: "") -> path."""
    out: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            out[name] = path
    return out


def expected_path(container: cgroups.ContainerCgroup) -> str:
    """The path a member of the container's cgroup reads in /proc/PID/cgroup."""
    return "/" + str(container.dirs[0].relative_to(HOST.roots[cgroups.MEMORY]))


def member_path(pid: int | str) -> str:
    paths = own_cgroups(pid)
    return paths[""] if HOST.version == 2 else paths[cgroups.MEMORY]


def dead(pid: int) -> bool:
    """Gone, or a zombie its new parent has not reaped yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


@pytest.fixture
def pod_uid() -> Iterator[str]:
    uid = str(uuid.uuid4())
    yield uid
    for root in dict.fromkeys(HOST.roots.values()):
        assert not (root / cgroups.PARENT / uid).exists(), "a cgroup was left behind"


@needs_cgroups
def test_a_container_runs_in_its_cgroup_from_the_start_and_leaves_nothing(pod_uid: str) -> None:
    limits = cgroups.Limits(memory=256 << 20, cpu_millis=1500)
    made = cgroups.create(HOST, pod_uid, "node", limits)
    try:
        if HOST.version == 2:
            assert (made.dirs[0] / "memory.max").read_text().strip() == str(256 << 20)
            assert (made.dirs[0] / "cpu.max").read_text().strip() == "150000 100000"
        else:
            memory, cpu = made.dirs
            assert (memory / "memory.limit_in_bytes").read_text().strip() == str(256 << 20)
            assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "150000"
            assert (cpu / "cpu.cfs_period_us").read_text().strip() == "100000"
        # Through the entry script: the command itself reads its cgroup.
        exe, argv = uts.command(
            "pod-0",
            sys.executable,
            [sys.executable, "-c", "print(open('/proc/self/cgroup').read())"],
            cgroups=made.procs,
        )
        done = subprocess.run(
            argv, executable=exe, capture_output=True, text=True, timeout=30, check=True
        )
        assert f"/{cgroups.PARENT}/{pod_uid}/node\n" in done.stdout
        assert not made.oom_killed(done.returncode)
    finally:
        assert made.remove()


@needs_cgroups
def test_a_direct_start_is_moved_in_and_an_escaped_process_is_killed(pod_uid: str) -> None:
    made = cgroups.create(HOST, pod_uid, "node", cgroups.Limits(memory=256 << 20))
    # Once moved in (told on stdin), it starts a process that leaves its group (setsid), as a
    # daemon does, and outlives it.
    script = (
        "import subprocess, sys; sys.stdin.readline(); "
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True, "
        "stdout=subprocess.DEVNULL); print(p.pid)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        made.join(proc.pid)
        assert member_path(proc.pid) == expected_path(made)
        out, _ = proc.communicate("moved\n", timeout=30)
        escaped = int(out.strip())
        assert member_path(escaped) == expected_path(made)
    finally:
        proc.kill()
        removed = made.remove()
    assert removed  # the cgroup was empty, so the escaped process had died
    assert dead(escaped)


def test_the_entry_script_refuses_to_run_outside_its_cgroup(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    exe, argv = uts.command(
        "pod-0",
        "/bin/sh",
        ["sh", "-c", f"touch {marker}"],
        cgroups=[str(tmp_path / "no-such-cgroup" / "cgroup.procs")],
    )
    done = subprocess.run(
        argv, executable=exe, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 126
    assert "cannot enter the container's cgroup" in done.stderr
    assert not marker.exists()


@needs_cgroups
def test_the_sweep_removes_only_old_empty_cgroups(pod_uid: str) -> None:
    old = cgroups.create(HOST, pod_uid, "old", cgroups.Limits(memory=64 << 20))
    young = cgroups.create(HOST, pod_uid, "young", cgroups.Limits(memory=64 << 20))
    busy = cgroups.create(HOST, pod_uid, "busy", cgroups.Limits(memory=64 << 20))
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        busy.join(sleeper.pid)
        hours_ago = time.time() - 7200
        for d in (*old.dirs, *busy.dirs):
            os.utime(d, (hours_ago, hours_ago))
        cgroups.remove_stale(HOST)
        assert not any(d.exists() for d in old.dirs)
        assert all(d.exists() for d in (*young.dirs, *busy.dirs))
    finally:
        sleeper.kill()
        sleeper.wait()
        assert busy.remove() and young.remove() and old.remove()


def _python_for_nobody() -> str | None:
    """An interpreter another user may run (this one may live in a private home)."""
    for candidate in (sys.executable, shutil.which("python3", path="/usr/bin:/bin")):
        if (
            candidate
            and subprocess.run(
                [*NOBODY, candidate, "-c", "pass"], capture_output=True, check=False
            ).returncode
            == 0
        ):
            return candidate
    return None


def test_another_user_is_told_why_limits_cannot_hold() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the check as another user")
    python = _python_for_nobody()
    if python is None:
        pytest.skip("no Python interpreter another user may run")
    # The checkout may be private to root (a clone in a 0700 temporary directory): the other
    # user imports a copy of the modules the check needs, in a directory it may read.
    readable = Path(tempfile.mkdtemp(prefix="cgroups-nobody-"))
    readable.chmod(0o755)
    for module in (
        "trainer/__init__.py",
        "trainer/machinery/__init__.py",
        "trainer/machinery/quantity.py",
        "trainer/local/__init__.py",
        "trainer/local/executor/__init__.py",
        "trainer/local/executor/sandbox/cgroups.py",
    ):
        (readable / module).parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        shutil.copy(ROOT / module, readable / module)
        (readable / module).chmod(0o644)
    code = (
        f"import sys; sys.path.insert(0, {str(readable)!r}); "
        "from trainer.local.executor.sandbox import cgroups; "
        "found = cgroups.layout(); print(sorted(found.roots)); "
        "print(found.unenforced(cgroups.Limits(memory=1, cpu_millis=1)))"
    )
    try:
        done = subprocess.run(
            [*NOBODY, python, "-I", "-c", code],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    finally:
        shutil.rmtree(readable, ignore_errors=True)
    roots, warning = done.stdout.splitlines()
    assert roots == "[]"
    assert warning.startswith("memory and CPU limits are not enforced: "), warning
    if HOST.roots:  # root could make cgroups here: the other user is refused them
        assert "Permission denied" in warning and "uid 65534, not root" in warning
