"""The controller's work queue: client-go's rate-limited delaying queue, on asyncio.

Semantics (those of ``k8s.io/client-go/util/workqueue``):

- **Deduplication.** A key that is already waiting is not queued twice.
- **One key never runs twice at once.** A key added while a worker holds it is marked *dirty*
  and queued again only when the worker calls :meth:`WorkQueue.done`.
- **Delays.** :meth:`WorkQueue.add_after` queues a key once ``seconds`` have passed (a
  reconcile's RequeueAfter); while a key waits, a later request for an *earlier* time wins and a
  later one is ignored. A delay does not block an immediate :meth:`WorkQueue.add` of the same key.
- **Per-key exponential backoff.** :meth:`WorkQueue.add_rate_limited` delays the key by
  ``base_delay * 2**failures`` (5 ms, 10 ms, 20 ms, ...) capped at ``max_delay``;
  :meth:`WorkQueue.forget` resets the count. client-go's controller default caps at 1000 s and
  adds an overall 10 qps token bucket; this project caps at **60 s** (a failed TrainJob is
  retried at least once a minute) and has no overall bucket: the API client's own qps/burst
  throttles the calls.
- **Shutdown.** After :meth:`WorkQueue.shutdown`, adds are ignored and :meth:`WorkQueue.get`
  raises :class:`QueueShutdown` (it does not drain the remaining keys: a controller stops when it
  loses leadership, and the next leader lists everything again).

Time is injectable: ``clock`` (monotonic seconds) and ``sleep`` (an awaitable sleeper), so tests
drive delays with a fake clock instead of sleeping. Delayed keys are moved to the queue lazily,
whenever the queue is looked at (``get``, ``len``) and by the waiting getters, which sleep
exactly until the earliest delayed key is due.

:func:`run_workers` runs N workers over a queue and applies a handler's :class:`Result` the way
controller-runtime does: an error is retried with backoff, RequeueAfter forgets the failures and
re-adds after the delay, success forgets.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("trainer.machinery.workqueue")

Clock = Callable[[], float]
"""Monotonic seconds (``time.monotonic`` by default)."""
Sleeper = Callable[[float], Awaitable[None]]
"""Wait ``seconds`` (``asyncio.sleep`` by default)."""

DEFAULT_BASE_DELAY = 0.005
DEFAULT_MAX_DELAY = 60.0
_EPSILON = 1e-9  # a delayed key is due when it is within this of now (float rounding)


class QueueShutdown(Exception):
    """The queue was shut down: a worker should return."""


class QueueMetrics(Protocol):
    """Hooks the queue reports to (``trainer.observability.metrics.WorkQueueMetrics``)."""

    def set_depth(self, depth: int) -> None: ...
    def inc_adds(self) -> None: ...
    def observe_queue_duration(self, seconds: float) -> None: ...
    def observe_work_duration(self, seconds: float) -> None: ...
    def inc_retries(self) -> None: ...


class ReconcileMetrics(Protocol):
    """The hook :func:`run_workers` reports each handled key to
    (``trainer.observability.metrics.ReconcileMetrics``)."""

    def observe_reconcile(self, result: str, seconds: float) -> None: ...


class _NoMetrics:
    def set_depth(self, depth: int) -> None:
        pass

    def inc_adds(self) -> None:
        pass

    def observe_queue_duration(self, seconds: float) -> None:
        pass

    def observe_work_duration(self, seconds: float) -> None:
        pass

    def inc_retries(self) -> None:
        pass


class WorkQueue:
    """A deduplicating, delaying, rate-limited queue of string keys (``namespace/name``)."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock = time.monotonic,
        sleep: Sleeper = asyncio.sleep,
        base_delay: float = DEFAULT_BASE_DELAY,
        max_delay: float = DEFAULT_MAX_DELAY,
        metrics: QueueMetrics | None = None,
    ) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("backoff needs 0 < base_delay <= max_delay")
        self.name = name
        self.clock = clock
        self._sleep = sleep
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._metrics: QueueMetrics = metrics if metrics is not None else _NoMetrics()
        self._queue: deque[str] = deque()  # ready, in order
        self._dirty: set[str] = set()  # needs processing (queued, or re-added while processing)
        self._processing: set[str] = set()
        self._waiting: dict[str, float] = {}  # delayed key -> due time
        self._heap: list[tuple[float, int, str]] = []  # (due, seq, key); stale entries skipped
        self._seq = 0
        self._failures: dict[str, int] = {}
        self._added_at: dict[str, float] = {}
        self._started_at: dict[str, float] = {}
        self._shutdown = False
        self._changed = asyncio.Event()

    # --- state ------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Keys waiting to be processed (ready now, or re-added while a worker holds them);
        delayed keys count once they are due."""
        self._promote()
        return len(self._dirty)

    @property
    def depth(self) -> int:
        return len(self)

    @property
    def waiting(self) -> int:
        """Delayed keys not yet due."""
        self._promote()
        return len(self._waiting)

    @property
    def processing(self) -> frozenset[str]:
        """Keys a worker holds right now."""
        return frozenset(self._processing)

    @property
    def shutting_down(self) -> bool:
        return self._shutdown

    def num_requeues(self, key: str) -> int:
        """Rate-limited re-adds of ``key`` since it was last forgotten."""
        return self._failures.get(key, 0)

    # --- adding -----------------------------------------------------------------------------
    def add(self, key: str) -> None:
        """Queue ``key`` now, unless it is already waiting; if a worker holds it, mark it dirty
        so it is queued again on :meth:`done`."""
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        self._added_at.setdefault(key, self.clock())
        self._metrics.inc_adds()
        self._metrics.set_depth(len(self._dirty))
        if key in self._processing:
            return
        self._queue.append(key)
        self._notify()

    def add_after(self, key: str, seconds: float) -> None:
        """Queue ``key`` after ``seconds`` (now if ``seconds <= 0``). If the key is already
        delayed, the earlier due time wins."""
        if self._shutdown:
            return
        if seconds <= 0:
            self.add(key)
            return
        due = self.clock() + seconds
        current = self._waiting.get(key)
        if current is not None and current <= due:
            return
        self._waiting[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))
        self._notify()

    def when(self, key: str) -> float:
        """The next backoff of ``key`` (and count the failure): ``base_delay * 2**n`` for the
        key's n-th failure, capped at ``max_delay``."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures >= 64:  # 2**64 * any sane base is far past any cap
            return self.max_delay
        return float(min(self.base_delay * (2**failures), self.max_delay))

    def add_rate_limited(self, key: str) -> None:
        """Re-queue ``key`` after its next exponential backoff (a retry after an error)."""
        if self._shutdown:
            return
        self._metrics.inc_retries()
        self.add_after(key, self.when(key))

    def forget(self, key: str) -> None:
        """Reset ``key``'s backoff (it succeeded, or is no longer retried)."""
        self._failures.pop(key, None)

    # --- processing -------------------------------------------------------------------------
    async def get(self) -> str:
        """The next ready key, waiting for one as long as needed. The caller must call
        :meth:`done` with it. Raises :class:`QueueShutdown` once the queue is shut down."""
        while True:
            if self._shutdown:
                raise QueueShutdown(self.name)
            self._promote()
            if self._queue:
                return self._take()
            changed = self._changed
            delay = self._next_delay()
            if delay is None:
                await changed.wait()
            else:
                await self._wait_for(changed, delay)

    def done(self, key: str) -> None:
        """The worker finished ``key``: if it was added meanwhile, queue it again."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        started = self._started_at.pop(key, None)
        if started is not None:
            self._metrics.observe_work_duration(self.clock() - started)
        if key in self._dirty and not self._shutdown:
            self._queue.append(key)
            self._notify()

    def shutdown(self) -> None:
        """Stop the queue: adds are ignored from now on and every :meth:`get` raises
        :class:`QueueShutdown`."""
        self._shutdown = True
        self._notify()

    # --- internals --------------------------------------------------------------------------
    def _take(self) -> str:
        key = self._queue.popleft()
        now = self.clock()
        self._processing.add(key)
        self._dirty.discard(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            self._metrics.observe_queue_duration(now - added)
        self._started_at[key] = now
        self._metrics.set_depth(len(self._dirty))
        return key

    def _notify(self) -> None:
        """Wake every waiting getter so it looks at the queue again."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _promote(self) -> None:
        """Move delayed keys that are due into the queue."""
        if not self._heap:
            return
        now = self.clock() + _EPSILON
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._waiting.get(key) != due:
                continue  # superseded by an earlier due time, or already promoted
            del self._waiting[key]
            self.add(key)

    def _next_delay(self) -> float | None:
        while self._heap:
            due, _, key = self._heap[0]
            if self._waiting.get(key) == due:
                return max(due - self.clock(), 0.0)
            heapq.heappop(self._heap)
        return None

    async def _wait_for(self, changed: asyncio.Event, delay: float) -> None:
        """Wait until the queue changes or ``delay`` has passed, whichever is first."""
        waiter = asyncio.ensure_future(changed.wait())
        sleeper = asyncio.ensure_future(self._sleep(delay))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            sleeper.cancel()


@dataclass(frozen=True)
class Result:
    """What a handler asks for: ``error`` (retry with backoff) or ``requeue_after`` seconds
    (come back later); neither means done. An error wins over ``requeue_after``."""

    requeue_after: float | None = None
    error: Exception | None = None


Handler = Callable[[str], Awaitable[Result | None]]


def _outcome(result: Result) -> str:
    if result.error is not None:
        return "error"
    if result.requeue_after is not None:
        return "requeue"
    return "success"


async def _handle_one(
    queue: WorkQueue,
    handler: Handler,
    key: str,
    metrics: ReconcileMetrics | None,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> None:
    started = queue.clock()
    try:
        try:
            result = await handler(key) or Result()
        except Exception as exc:
            result = Result(error=exc)
        outcome = _outcome(result)
        if metrics is not None:
            metrics.observe_reconcile(outcome, queue.clock() - started)
        if result.error is not None:
            queue.add_rate_limited(key)
            logger.error(
                "Reconciler error",
                exc_info=result.error,
                extra={"key": key, "queue": queue.name, "retries": queue.num_requeues(key)},
            )
        elif result.requeue_after is not None:
            queue.forget(key)
            queue.add_after(key, result.requeue_after)
        else:
            queue.forget(key)
    finally:
        queue.done(key)


async def run_workers(
    queue: WorkQueue,
    handler: Handler,
    concurrency: int,
    *,
    metrics: ReconcileMetrics | None = None,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
) -> None:
    """Run ``concurrency`` workers that take keys from ``queue`` and ``await handler(key)``.

    A handler returns a :class:`Result` (or None for success) or raises (treated as
    ``Result(error=exc)``):

    - error -> ``add_rate_limited`` (exponential backoff), counted as ``error``, logged;
    - ``requeue_after`` -> ``forget`` then ``add_after``, counted as ``requeue``;
    - otherwise -> ``forget``, counted as ``success``.

    Returns once the queue is shut down and every worker has finished its current key.
    Cancelling it cancels the workers (each still marks its key done).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be greater than 0, got {concurrency}")
    out = logger if logger is not None else log

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutdown:
                return
            await _handle_one(queue, handler, key, metrics, out)

    tasks = [
        asyncio.create_task(worker(), name=f"{queue.name}-worker-{i}") for i in range(concurrency)
    ]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
