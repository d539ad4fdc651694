"""Large admission reviews run in a small pool of worker processes, off the event loop.

Why processes and not threads: the webhook shares its event loop with the controller (and,
under ``trainer up``, with the local API server). Admission is CPU-bound Python, and the
heaviest parts (``json.loads``, pydantic-core's validation of a big object) run in C/Rust
holding the GIL for 50-250 ms at a time, without the 5 ms switch interval a pure-Python thread
would give back. Measured with hack/bench/webhook_large.py (four concurrent 2.3 MB mutations
and a stream of small reviews, then one 80,000-env validation; figures in docs/local-plane.md,
"Admission webhook limits"): the webhook's loop stalled up to 0.7-1.7 s with everything inline,
0.3-1.1 s with the work in threads, and 14-31 ms with worker processes. A review is bytes in,
bytes out, so a process costs one copy of the body through a pipe: about a millisecond for 3 MB.

The workers are ``python -m webhooks.worker`` processes started and owned here (not
``multiprocessing``: no fork of a process with threads, no re-import of the caller's main
module), speaking length-prefixed pickles over their stdin/stdout (:mod:`webhooks.worker`).
They start with the first large review (about a second: they import the admission code), run
at nice 10 (the loop wins the CPU when both want it; the price is that large reviews wait for
CPU the rest of the machine leaves them), and exit when their stdin closes.

Routing: a review whose body is at most :data:`INLINE_MAX_BYTES` (32 KiB; a typical TrainJob
review is 2-5 KB and takes about a millisecond) is decided inline, as before; a larger one goes
to a worker. The TrainJob validator needs the cluster (runtime, JobSet, PriorityClasses): the
worker answers :class:`~webhooks.review.Needs`, the loop reads the view through its lookup, and
the same worker, which kept the parsed review, finishes it. The JobSet is sent without its
spec: admission reads only its status (which replicated jobs are active).

Bounds, so a flood of huge reviews cannot exhaust memory or queue without end: at most
``workers`` reviews run at once (default: 2, or 1 on a one-CPU machine) and ``queue`` more
wait (default 8), each holding at most its body; beyond that a review is answered at once with
a denial of code 429 (TooManyRequests), which the API server passes on to its client. A review
running longer than :data:`REVIEW_TIMEOUT` (kube-apiserver never waits more than 30 s for a
webhook), or a worker that dies, fails that review only (a denial with code 500); the worker
is replaced for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from trainer.admission.types import ClusterView
from trainer.machinery.pyexec import module_command, module_env
from webhooks.review import Answer, Needs, Outcome

log = logging.getLogger("webhooks.admission")

#: Reviews up to this size are decided on the event loop (module docstring).
INLINE_MAX_BYTES = 32 * 1024
DEFAULT_QUEUE = 8
#: kube-apiserver's longest webhook timeout (timeoutSeconds is at most 30).
REVIEW_TIMEOUT = 30.0
#: A worker that does not start within this long is a failure (it imports the admission code).
START_TIMEOUT = 60.0
#: The workers' CPU priority (nice): module docstring.
WORKER_NICE = 10
_LENGTH = struct.Struct(">Q")


def _slim(view: ClusterView) -> ClusterView:
    """``view`` without the JobSet's spec: admission reads only its status."""
    if view.jobset is None:
        return view
    jobset = view.jobset.model_copy(update={"spec": None})
    return ClusterView(view.runtime, view.runtime_error, jobset, view.priority_classes)


def default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(2, cpus))


class WorkerFailed(Exception):
    """A worker died, timed out or could not start."""


class _Worker:
    """One worker process and its pipes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, nice: int) -> _Worker:
        # Not from the working directory (trainer/machinery/pyexec.py): the worker is our own code.
        proc = await asyncio.create_subprocess_exec(
            *module_command("webhooks.worker", "--nice", str(nice)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=module_env(os.environ),
        )
        return cls(proc)

    async def call(self, payload: bytes) -> bytes:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(_LENGTH.pack(len(payload)) + payload)
            await stdin.drain()
            header = await stdout.readexactly(_LENGTH.size)
            return await stdout.readexactly(_LENGTH.unpack(header)[0])
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise WorkerFailed(f"the worker process exited ({self.proc.returncode})") from exc

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        if self.proc.stdin is not None:
            self.proc.stdin.close()

    async def stop(self) -> None:
        """Close stdin (the worker exits), and kill it if it does not."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            self.kill()
            await self.proc.wait()


class Offload:
    """The worker pool and its admission gate (module docstring)."""

    def __init__(
        self,
        workers: int | None = None,
        queue: int = DEFAULT_QUEUE,
        inline_max_bytes: int = INLINE_MAX_BYTES,
        review_timeout: float = REVIEW_TIMEOUT,
        nice: int = WORKER_NICE,
    ) -> None:
        self.workers = workers if workers is not None else default_workers()
        self.queue = queue
        self.inline_max_bytes = inline_max_bytes
        self.review_timeout = review_timeout
        self.nice = nice
        self.admitted = 0
        self._running = asyncio.Semaphore(self.workers)
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()

    @property
    def capacity(self) -> int:
        """How many large reviews may be running or waiting at once."""
        return self.workers + self.queue

    @property
    def processes(self) -> list[int]:
        """The worker processes' ids (for tests and logs)."""
        return [w.proc.pid for w in self._all]

    def try_enter(self) -> bool:
        """Take a place for one large review; False when all are taken (answer 429)."""
        if self.admitted >= self.capacity:
            return False
        self.admitted += 1
        return True

    def leave(self) -> None:
        self.admitted -= 1

    async def review(
        self,
        body: bytes,
        path: str,
        now: str,
        read_view: Callable[[Needs], Awaitable[ClusterView | Outcome]],
    ) -> Answer:
        """The review in one worker process (the caller holds a place from
        :meth:`try_enter`): wait for a running slot, start the review, read the cluster view it
        needs on this loop (``read_view``; an Outcome instead is the answer), finish it in the
        same worker. Raises :class:`WorkerFailed`."""
        async with self._running:
            worker = self._idle.pop() if self._idle else await self._start()
            try:
                result = await self._call(worker, ("start", body, path, now))
                if isinstance(result, Needs):
                    view = await read_view(result)
                    if isinstance(view, Outcome):  # also frees the review the worker kept
                        result = await self._call(worker, ("deny", view))
                    else:
                        result = await self._call(worker, ("finish", _slim(view)))
            except BaseException:
                self._discard(worker)  # dead, late, or cancelled mid-exchange: not reusable
                raise
            self._idle.append(worker)
        assert isinstance(result, Answer)
        return result

    async def _call(self, worker: _Worker, message: tuple[Any, ...]) -> Answer | Needs:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            raw = await asyncio.wait_for(worker.call(payload), self.review_timeout)
        except TimeoutError:
            raise WorkerFailed(f"the review took longer than {self.review_timeout:.0f} s") from None
        result, records = pickle.loads(raw)
        for level, text in records:
            log.log(level, "%s", text)
        assert isinstance(result, Answer | Needs)
        return result

    async def _start(self) -> _Worker:
        try:
            worker = await asyncio.wait_for(_Worker.start(self.nice), START_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise WorkerFailed(f"the worker process could not start: {exc}") from exc
        self._all.add(worker)
        return worker

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        self._all.discard(worker)
        with contextlib.suppress(ValueError):
            self._idle.remove(worker)

    async def close(self) -> None:
        """Stop the workers (a review still running in one fails)."""
        workers = list(self._all)
        self._all.clear()
        self._idle.clear()
        await asyncio.gather(*(w.stop() for w in workers))
