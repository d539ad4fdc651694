"""Host ports for local JobSets: outside the kernel's ephemeral range, never given twice while
held, never one that something already listens on."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from trainer.local.executor.sandbox.ports import (
    DEFAULT_EPHEMERAL,
    NoFreePort,
    PortAllocator,
    allocation_range,
    ephemeral_range,
)


def test_ephemeral_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_range(f) == (40000, 50000)
    f.write_text("garbage")
    assert ephemeral_range(f) == DEFAULT_EPHEMERAL
    assert ephemeral_range(tmp_path / "absent") == DEFAULT_EPHEMERAL


@pytest.mark.parametrize(
    ("ephemeral", "expected"),
    [
        ((32768, 60999), (20000, 32767)),  # Linux's default: below it
        ((20500, 60999), (61000, 65535)),  # too little room below: above it
        ((20600, 65000), (20000, 20599)),  # neither has 1,000 ports: the larger gap
    ],
)
def test_ports_come_from_outside_the_ephemeral_range(
    ephemeral: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert allocation_range(ephemeral) == expected


def test_machine_range_excludes_what_the_kernel_hands_out() -> None:
    low, high = ephemeral_range()
    allocator = PortAllocator()
    for _ in range(20):
        port = allocator.allocate("job")
        assert not low <= port <= high
        assert allocator.low <= port <= allocator.high


def test_a_held_port_is_not_given_again_until_released() -> None:
    allocator = PortAllocator((20000, 20009), rng=random.Random(1))
    ports = {allocator.allocate(f"job-{i}") for i in range(10)}
    assert ports == set(range(20000, 20010))
    with pytest.raises(NoFreePort, match="no free port in 20000-20009"):
        allocator.allocate("one-too-many")
    allocator.release("job-3")
    assert allocator.allocate("again") in ports


def test_a_port_something_listens_on_is_skipped() -> None:
    # The port after the listening one must be free for the check; another process on this
    # machine may hold it, so a few pairs are tried (bounded) instead of assuming it.
    for _ in range(20):
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            busy = listener.getsockname()[1]
            allocator = PortAllocator((busy, busy + 1), rng=random.Random(0))
            try:
                got = allocator.allocate("a")
            except NoFreePort:
                continue  # busy + 1 is in use by someone else: try another pair
            assert got == busy + 1
            with pytest.raises(NoFreePort):
                allocator.allocate("b")
            return
    pytest.fail("no free port next to a listening one in 20 tries")


def test_ports_recorded_after_a_restart_stay_held() -> None:
    allocator = PortAllocator((20000, 20001), rng=random.Random(2))
    allocator.hold(20000, "old-job")
    assert allocator.allocate("new-job") == 20001
