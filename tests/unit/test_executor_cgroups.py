"""A container's limits as the cgroup files that hold them, the kernel's OOM count, the mounts
that say how a host allows cgroups, and the ``OOMKilled`` state (docs/local-plane.md,
"Limits"). Pure (detection reads a directory standing for a mount): a real cgroup is checked in
tests/integration/test_cgroups.py and tests/e2e/test_limits.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer.local.executor.kubelet.containers import terminated_state
from trainer.local.executor.sandbox.cgroups import (
    CPU,
    MEMORY,
    Layout,
    Limits,
    cpu_quota_us,
    detect,
    limits_of,
    oom_kills,
    parse_mounts,
    v1_files,
    v2_files,
)


def spec(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Any:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "node", "resources": resources}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"memory": "64Mi"}, Limits(memory=64 << 20)),
        ({"memory": "1G", "cpu": "250m"}, Limits(memory=10**9, cpu_millis=250)),
        ({"cpu": "1.5"}, Limits(cpu_millis=1500)),
        ({"cpu": 2}, Limits(cpu_millis=2000)),
        ({"cpu": "0.0001"}, Limits(cpu_millis=1)),  # rounded up, as Quantity.MilliValue
        ({"memory": "1.5"}, Limits(memory=2)),
        ({"nvidia.com/gpu": 1}, Limits()),
        ({"memory": "lots", "cpu": "0"}, Limits()),  # not a quantity, zero: no limit
        ({"memory": {"x": 1}}, Limits()),
    ],
)
def test_limits_come_from_the_limits_only(limits: dict[str, Any], expected: Limits) -> None:
    assert limits_of(spec(limits)) == expected


def test_requests_alone_set_no_limit() -> None:
    limits = limits_of(spec(requests={"memory": "1Gi", "cpu": "4"}))
    assert limits == Limits() and limits.controllers() == ()
    assert limits_of({"name": "c"}) == Limits()


def test_cpu_quota_is_the_kubelets() -> None:
    assert cpu_quota_us(1000) == 100_000
    assert cpu_quota_us(250) == 25_000
    assert cpu_quota_us(2500) == 250_000
    assert cpu_quota_us(5) == 1_000  # at least 1 ms per period


def test_v2_files() -> None:
    both = v2_files(Limits(memory=64 << 20, cpu_millis=500))
    assert both == {"memory.max": "67108864", "memory.swap.max": "0", "cpu.max": "50000 100000"}
    assert v2_files(Limits(cpu_millis=250)) == {"memory.max": "max", "cpu.max": "25000 100000"}
    assert v2_files(Limits(memory=4096)) == {
        "memory.max": "4096",
        "memory.swap.max": "0",
        "cpu.max": "max 100000",
    }


def test_v1_files_only_for_the_controllers_with_a_limit() -> None:
    assert v1_files(Limits(memory=64 << 20)) == {
        MEMORY: {
            "memory.limit_in_bytes": "67108864",
            "memory.memsw.limit_in_bytes": "67108864",
        }
    }
    assert v1_files(Limits(cpu_millis=250)) == {
        CPU: {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "25000"}
    }
    # The memory limit is written before memory+swap, which may not be below it.
    assert list(v1_files(Limits(memory=1, cpu_millis=1))[MEMORY]) == [
        "memory.limit_in_bytes",
        "memory.memsw.limit_in_bytes",
    ]
    assert v1_files(Limits()) == {}


def test_oom_kill_counts() -> None:
    events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n"
    assert oom_kills(events) == 1
    assert oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    assert oom_kills("oom_kill_disable 0\nunder_oom 0\n") is None  # Linux before 4.13
    assert oom_kills("") is None
    assert oom_kills("oom_kill x\n") is None


HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


def test_mounts_of_a_hybrid_and_a_unified_host() -> None:
    unified, v1 = parse_mounts(HYBRID)
    assert unified == "/sys/fs/cgroup/unified"
    assert v1 == {CPU: "/sys/fs/cgroup/cpu,cpuacct", MEMORY: "/sys/fs/cgroup/memory"}
    only_v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\nbad line\n"
    assert parse_mounts(only_v2) == ("/sys/fs/cgroup", {})
    assert parse_mounts("") == (None, {})


def test_one_warning_names_the_limits_a_host_cannot_hold() -> None:
    none = Layout(2, {}, "cannot make a cgroup: /sys/fs/cgroup/trainer-local: Permission denied")
    assert none.unenforced(Limits(memory=1, cpu_millis=1)) == (
        "memory and CPU limits are not enforced: cannot make a cgroup: "
        "/sys/fs/cgroup/trainer-local: Permission denied"
    )
    memory_only = Layout(1, {MEMORY: Path("/m")}, "no cgroup v1 hierarchy of the cpu controller")
    assert memory_only.unenforced(Limits(memory=1)) == ""
    assert memory_only.unenforced(Limits(memory=1, cpu_millis=1)).startswith(
        "CPU limits are not enforced: no cgroup v1"
    )
    assert none.unenforced(Limits()) == ""


def test_an_oom_kill_is_reported_as_oomkilled_with_the_exit_code() -> None:
    def state(returncode: int, oom_killed: bool = False) -> dict[str, Any]:
        return terminated_state(
            returncode, started_at="t0", finished_at="t1", container_id="c", oom_killed=oom_killed
        )

    killed = state(-9, oom_killed=True)
    assert (killed["reason"], killed["exitCode"], killed["signal"]) == ("OOMKilled", 137, 9)
    # A child killed, the main process exiting on its own: the runtime's reason, its code.
    child = state(1, oom_killed=True)
    assert (child["reason"], child["exitCode"]) == ("OOMKilled", 1)
    plain = state(-9)
    assert (plain["reason"], plain["exitCode"]) == ("Error", 137)


def test_which_hierarchy_is_used(tmp_path: Path) -> None:
    """v2 where its root offers memory and cpu; a hybrid host's v1 hierarchies where the
    unified one offers none (the controllers are bound to v1); v2's part where nothing else."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    unified = f"cgroup2 {tmp_path} cgroup2 rw 0 0\n"
    assert detect(unified) == Layout(2, {MEMORY: tmp_path, CPU: tmp_path})

    hybrid = HYBRID.replace("/sys/fs/cgroup/unified", str(tmp_path))
    (tmp_path / "cgroup.controllers").write_text("\n")
    assert detect(hybrid) == Layout(
        1, {CPU: Path("/sys/fs/cgroup/cpu,cpuacct"), MEMORY: Path("/sys/fs/cgroup/memory")}
    )

    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    assert detect(unified) == Layout(
        2, {MEMORY: tmp_path}, f"cgroup v2 at {tmp_path} offers no cpu controller"
    )
    only_memory_v1 = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
    assert detect(only_memory_v1).missing == (
        "no cgroup v1 hierarchy of the cpu controller is mounted"
    )
    assert detect("").roots == {}
