"""A token bucket shared fairly by clients (docs/status-server.md, "One client cannot delay
another").

The status server makes its API calls (TokenReviews, applies) under one budget
(``statusServer.qps``/``burst``), which protects the API server. Served first come first
served, that budget let one client's flood of bad tokens delay everyone's reports: 150
reviews at 5 a second put a real report 30 s back. Here, when calls have to wait, each
client has its own queue and tokens go round-robin over the clients that wait, so a client
waits for at most one call of each other client, however many that client has queued.
Clients whose reviews recently failed (:meth:`FairLimiter.failed`) are served only when no
other client waits, and only from a bucket that keeps :data:`SUSPECT_RESERVE` tokens back
for the others (so a client in good standing finds its review and apply ready even while a
flood is being worked through). A client may have at most ``max_waiting`` calls
waiting, a suspect one :data:`SUSPECT_MAX_WAITING` (beyond that :class:`TooManyWaiting`: the
server answers 429).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable

SUSPECT_AFTER_FAILURES = 3
"""Failed reviews in :data:`FAILURE_WINDOW_SECONDS` that put a client behind the others."""
FAILURE_WINDOW_SECONDS = 60.0
SUSPECT_RESERVE = 4
"""Tokens a suspect client leaves in the bucket: two reports' worth (a review and an apply
each)."""
MAX_WAITING_PER_CLIENT = 16
SUSPECT_MAX_WAITING = 4
MAX_TRACKED_CLIENTS = 4096
"""Failure records kept (the oldest go first): memory stays bounded whoever connects."""


class TooManyWaiting(Exception):
    """The client already has ``max_waiting`` calls waiting."""


class FairLimiter:
    """``qps`` tokens a second, at most ``burst`` saved (``qps <= 0``: no limit), handed out
    round-robin over the clients that wait, clients in good standing first."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        max_waiting: int = MAX_WAITING_PER_CLIENT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.max_waiting = max_waiting
        self.clock = clock
        self.sleep = sleep
        self.tokens = float(self.burst)
        self.stamp = clock()
        self._queues: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()
        self._failures: OrderedDict[Hashable, deque[float]] = OrderedDict()
        self._dispatcher: asyncio.Task[None] | None = None

    # --- standing ------------------------------------------------------------------------
    def failed(self, client: Hashable) -> None:
        """Record a failed review of ``client``'s (a token the API server refused)."""
        times = self._failures.pop(client, None) or deque(maxlen=SUSPECT_AFTER_FAILURES)
        times.append(self.clock())
        self._failures[client] = times
        while len(self._failures) > MAX_TRACKED_CLIENTS:
            self._failures.popitem(last=False)

    def suspect(self, client: Hashable) -> bool:
        """Whether ``client`` had :data:`SUSPECT_AFTER_FAILURES` failed reviews lately."""
        times = self._failures.get(client)
        if times is None or len(times) < SUSPECT_AFTER_FAILURES:
            return False
        return self.clock() - times[0] <= FAILURE_WINDOW_SECONDS

    def waiting(self, client: Hashable) -> int:
        """Calls of ``client`` waiting for a token."""
        return len(self._queues.get(client) or ())

    def _need(self, client: Hashable) -> float:
        """Tokens the bucket must hold for ``client`` to take one."""
        if self.suspect(client):
            return 1.0 + min(SUSPECT_RESERVE, self.burst - 1)
        return 1.0

    # --- tokens --------------------------------------------------------------------------
    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now

    async def acquire(self, client: Hashable, *, limit_waiting: bool = True) -> None:
        """Wait for a token for ``client``; :class:`TooManyWaiting` at once when it already
        has ``max_waiting`` (suspects: :data:`SUSPECT_MAX_WAITING`) calls waiting and
        ``limit_waiting``."""
        if self.qps <= 0:
            return
        self._refill()
        suspect = self.suspect(client)
        ahead = self._queues if suspect else [q for q in self._queues if not self.suspect(q)]
        if not ahead and self.tokens >= self._need(client):
            self.tokens -= 1
            return
        queue = self._queues.get(client)
        cap = min(self.max_waiting, SUSPECT_MAX_WAITING) if suspect else self.max_waiting
        if limit_waiting and queue is not None and len(queue) >= cap:
            raise TooManyWaiting(client)
        if queue is None:
            queue = self._queues[client] = deque()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.create_task(self._dispatch(), name="fair-limiter")
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter in queue:
                queue.remove(waiter)
                if not queue and self._queues.get(client) is queue:
                    del self._queues[client]
            raise

    def _next_client(self) -> Hashable:
        """The first waiting client in round-robin order that is in good standing, else the
        first waiting client."""
        for client in self._queues:
            if not self.suspect(client):
                return client
        return next(iter(self._queues))

    async def _dispatch(self) -> None:
        while self._queues:
            self._refill()
            client = self._next_client()
            need = self._need(client)
            if self.tokens < need:
                # Sleep one token at most, then choose again: a client in good standing that
                # arrives meanwhile goes before the suspects.
                await self.sleep(min(need - self.tokens, 1.0) / self.qps)
                continue
            queue = self._queues.pop(client)
            waiter = queue.popleft()
            if queue:
                self._queues[client] = queue  # to the back of the round
            if waiter.done():  # cancelled while waiting
                continue
            self.tokens -= 1
            waiter.set_result(None)
