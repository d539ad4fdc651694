"""Client-side rate limiting of API requests (client-go's ``QPS`` / ``Burst``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class RateLimiter:
    """A token bucket: ``qps`` tokens a second, at most ``burst`` saved (``qps <= 0``: no
    limit). :meth:`acquire` waits for a token, first come first served."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.clock = clock
        self.sleep = sleep
        self.tokens = float(self.burst)
        self.stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        async with self._lock:
            self._refill()
            if self.tokens < 1:
                await self.sleep((1 - self.tokens) / self.qps)
                self._refill()
            self.tokens -= 1
