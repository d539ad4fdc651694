"""Host ports for the training processes of local JobSets.

Every pod of a local JobSet runs on this host, so a port the template declares (torchrun's
29500, say) must become a host port no other job uses. Asking the kernel for an ephemeral port
and closing it again (the usual trick) races: the kernel hands the same numbers out to every
outgoing connection on the machine, and nothing holds the port until the training process
binds it, seconds later. Ports here are therefore drawn from a range *below* the kernel's
ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), where outgoing connections never
land; a port this executor already gave to a live JobSet is never given again; a candidate is
tried with a bind on 127.0.0.1 so a listener already there is skipped; and candidates are
random, so two executors on one host seldom pick the same one."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 20000
MIN_SPAN = 1000
ATTEMPTS = 200


class NoFreePort(RuntimeError):
    """No port of the range could be bound."""


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        low, high = (int(v) for v in path.read_text().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= 65535 else DEFAULT_EPHEMERAL


def allocation_range(ephemeral: tuple[int, int]) -> tuple[int, int]:
    """Ports to allocate from: ``LOWEST`` up to just below the ephemeral range, or, when that
    leaves fewer than ``MIN_SPAN`` ports, just above it up to 65535, or failing both the
    larger gap."""
    low, high = ephemeral
    below = (LOWEST, low - 1)
    above = (high + 1, 65535)
    for lo, hi in (below, above):
        if hi - lo + 1 >= MIN_SPAN:
            return lo, hi
    return max((below, above), key=lambda r: r[1] - r[0])


def can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortAllocator:
    """Hands out host ports outside the ephemeral range, each to one owner at a time."""

    def __init__(
        self,
        port_range: tuple[int, int] | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.low, self.high = port_range or allocation_range(ephemeral_range())
        if not 0 < self.low <= self.high <= 65535:
            raise ValueError(f"bad port range {self.low}-{self.high}")
        self.rng = rng or random.Random()
        self.taken: dict[int, str] = {}  # port -> owner

    def allocate(self, owner: str) -> int:
        """A port no other owner holds and nothing on 127.0.0.1 listens on."""
        candidates = range(self.low, self.high + 1)
        for port in self.rng.sample(candidates, min(ATTEMPTS, len(candidates))):
            if port in self.taken:
                continue
            if can_bind(port):
                self.taken[port] = owner
                return port
        raise NoFreePort(
            f"no free port in {self.low}-{self.high} (tried {min(ATTEMPTS, len(candidates))})"
        )

    def hold(self, port: int, owner: str) -> None:
        """Record ``port`` as ``owner``'s (one it got before this executor restarted)."""
        self.taken[port] = owner

    def release(self, owner: str) -> None:
        """Give back every port ``owner`` holds."""
        for port in [p for p, o in self.taken.items() if o == owner]:
            del self.taken[port]
