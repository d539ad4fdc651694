"""Large admission reviews run in a small pool of worker processes, off the event loop.

Why processes and not threads: the webhook shares its event loop with the controller (and,
under ``trainer up``, with the local API server). Admission is CPU-bound Python, and the
heaviest parts (``json.loads``, pydantic-core's validation of a big object) run in C/Rust
holding the GIL for 50-250 ms at a time without the 5 ms switch a pure-Python thread would
give back: measured with four concurrent 2.3 MB mutations, a worker *thread* still let the loop
stall up to 200 ms (p99 160 ms), while worker *processes* kept it under 5 ms and finished the
large reviews sooner (two cores instead of one GIL). A review is bytes in, bytes out, so the
cost of a process is one copy of the body through a pipe: about a millisecond for 3 MB.

Routing: a review whose body is at most :data:`INLINE_MAX_BYTES` (32 KiB; a typical TrainJob
review is 2-5 KB and takes about a millisecond) is decided inline, as before; a larger one goes
to the pool. The TrainJob validator needs the cluster (runtime, JobSet, PriorityClasses): the
worker answers :class:`~webhooks.review.Needs`, the loop reads the view through its lookup, and
the worker is called again with it (parsing the body a second time, off the loop). The JobSet
is sent without its spec: admission reads only its status (which replicated jobs are active).

Bounds, so a flood of huge reviews cannot exhaust memory or queue forever: at most ``workers``
reviews run at once (default: 2, or 1 on a one-CPU machine) and ``queue`` more wait (default
8); beyond that the review is answered at once with a denial of code 429 (TooManyRequests),
which the API server passes to its client, who can retry. Workers run at a lower CPU priority
(nice 10), so the loop wins the CPU when both want it. Logging done in a worker is sent back
with the answer and re-emitted here. A worker that dies (killed, out of memory) fails only its
review (a denial with code 500) and the pool is rebuilt for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from trainer.admission.types import ClusterView
from webhooks.review import Answer, Needs, run_review

log = logging.getLogger("webhooks.admission")

#: Reviews up to this size are decided on the event loop (module docstring).
INLINE_MAX_BYTES = 32 * 1024
DEFAULT_QUEUE = 8
WORKER_NICE = 10


def default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(2, cpus))


class Offload:
    """The worker pool and its admission gate (module docstring). The pool starts on the
    first large review; :meth:`close` stops it."""

    def __init__(
        self,
        workers: int | None = None,
        queue: int = DEFAULT_QUEUE,
        inline_max_bytes: int = INLINE_MAX_BYTES,
    ) -> None:
        self.workers = workers if workers is not None else default_workers()
        self.queue = queue
        self.inline_max_bytes = inline_max_bytes
        self.admitted = 0
        self._running = asyncio.Semaphore(self.workers)
        self._pool: ProcessPoolExecutor | None = None
        self._starting: asyncio.Task[ProcessPoolExecutor] | None = None

    @property
    def capacity(self) -> int:
        """How many large reviews may be running or waiting at once."""
        return self.workers + self.queue

    def try_enter(self) -> bool:
        """Take a place for one large review; False when all are taken (answer 429)."""
        if self.admitted >= self.capacity:
            return False
        self.admitted += 1
        return True

    def leave(self) -> None:
        self.admitted -= 1

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Wait for a running slot (the caller holds a place from :meth:`try_enter`)."""
        async with self._running:
            yield

    async def run(
        self, body: bytes, path: str, now: str, view: ClusterView | None = None
    ) -> Answer | Needs:
        """:func:`~webhooks.review.run_review` in a worker process."""
        pool = await self._get_pool()
        if view is not None and view.jobset is not None:
            view = ClusterView(
                view.runtime,
                view.runtime_error,
                view.jobset.model_copy(update={"spec": None}),
                view.priority_classes,
            )
        loop = asyncio.get_running_loop()
        try:
            result, records = await loop.run_in_executor(pool, work, body, path, now, view)
        except BrokenProcessPool:
            self._discard(pool)
            raise
        for level, text in records:
            log.log(level, "%s", text)
        return result

    async def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is not None:
            return self._pool
        if self._starting is None:
            # Starting the processes blocks (the fork server imports the admission code):
            # done in a thread, once, whoever asks first.
            self._starting = asyncio.create_task(asyncio.to_thread(self._start))
        starting = self._starting
        try:
            pool = await asyncio.shield(starting)
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None
        self._pool = pool
        return pool

    def _start(self) -> ProcessPoolExecutor:
        methods = multiprocessing.get_all_start_methods()
        # forkserver: forking the serving process itself is unsafe (it has threads);
        # the fork server preloads the admission code once, so workers start fast.
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if ctx.get_start_method() == "forkserver":
            ctx.set_forkserver_preload(["webhooks.review"])
        pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker)
        try:
            for future in [pool.submit(_ready) for _ in range(self.workers)]:
                future.result(timeout=120)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return pool

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is pool:
            self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the workers (running reviews are abandoned)."""
        if self._pool is not None:
            self._discard(self._pool)


# ---------------------------------------------------------------------------------------------
# In the worker process


class _Collect(logging.Handler):
    """Keeps what admission logs during one review, to be sent back with the answer."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.records.append((record.levelno, text))


_COLLECT = _Collect()


def _init_worker() -> None:
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    logger = logging.getLogger("webhooks.admission")
    logger.handlers[:] = [_COLLECT]
    logger.setLevel(logging.WARNING)
    logger.propagate = False


def _ready() -> int:
    return os.getpid()


def work(
    body: bytes, path: str, now: str, view: ClusterView | None
) -> tuple[Answer | Needs, list[tuple[int, str]]]:
    """One step of a review in the worker, with what it logged."""
    _COLLECT.records = []
    result = run_review(body, path, now, view)
    return result, _COLLECT.records
