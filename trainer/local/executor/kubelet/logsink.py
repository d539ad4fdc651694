"""One container's log as the local kubelet streams it: to a callback line by line, and to the
API server's ``pods/log`` in batches; read from a pipe of the kubelet's own
(:class:`OutputPipe`).

Held apart from the pod it belongs to because batching has its own timing rules (a batch goes
out 0.2 s after its first line or once it holds 64 KiB, in order, never two at once) and its
own failure rule (an append that fails is logged and dropped: a pod must not stop because its
log could not be written). The sink keeps the current run's last lines for
``terminationMessagePolicy: FallbackToLogsOnError`` (:meth:`LogSink.termination_message`).

What it writes to and whom it tells are passed in (``append`` and ``on_log``), so the sink
knows nothing of the kubelet or the client. Against a real kube-apiserver, which takes no log
appends (the local API server's extension), the node agent keeps each run's log in a file
instead (:func:`log_file`, :func:`append_file`; docs/local-plane.md, "A node of a real
cluster").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from trainer.local.executor.api import API_TIMEOUT, TRANSIENT

log = logging.getLogger(__name__)

LOG_FLUSH_SECONDS = 0.2
LOG_FLUSH_BYTES = 64 * 1024
TERMINATION_LOG_LINES = 80
"""How many of the log's last lines ``FallbackToLogsOnError`` reads, and at most how many bytes
of them it keeps (the kubelet's ``MaxContainerTerminationMessageLogLines`` and
``...LogLength``; docs/local-plane.md, "Termination messages")."""
TERMINATION_LOG_BYTES = 2048

LogCallback = Callable[[str, str, str], None]
"""``on_log(pod, container, line)``: receives every log line as it is read."""

AppendLog = Callable[[str, str, str, str], Awaitable[object]]
"""``append(namespace, pod, container, text)``: add text to ``pods/log``."""


def log_file(log_dir: Path, namespace: str, pod: str, uid: str, container: str, run: int) -> Path:
    """Where one run of a container keeps its log when the API server takes no appends: the
    kubelet's layout under ``/var/log/pods``
    (``<namespace>_<pod>_<uid>/<container>/<restartCount>.log``)."""
    return log_dir / f"{namespace}_{pod}_{uid}" / container / f"{run}.log"


async def append_file(path: Path, text: str) -> None:
    """Add ``text`` to the log file ``path`` (its folders made as needed), off the loop."""

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(text)

    await asyncio.to_thread(write)


class LogSink:
    """One container's log: lines go to ``on_log`` at once and to ``pods/log`` in batches
    (flushed 0.2 s after the first unflushed line, or at 64 KiB), in order."""

    def __init__(
        self,
        *,
        namespace: str,
        pod: str,
        container: str,
        append: AppendLog,
        on_log: LogCallback | None,
    ) -> None:
        self.namespace, self.pod, self.container = namespace, pod, container
        self.append = append
        self.on_log = on_log
        self.parts: list[str] = []
        self.size = 0
        self.tail: collections.deque[str] = collections.deque(maxlen=TERMINATION_LOG_LINES)
        self.lock = asyncio.Lock()
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    async def line(self, text: str) -> None:
        text = text.rstrip("\r")
        if self.on_log is not None:
            try:
                self.on_log(self.pod, self.container, text)
            except Exception:
                log.exception("on_log failed for %s/%s", self.pod, self.container)
        self.tail.append(text)
        self.parts.append(text + "\n")
        self.size += len(text) + 1
        if self.size >= LOG_FLUSH_BYTES:
            await self.flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(LOG_FLUSH_SECONDS, self._fire)

    def _fire(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self.lock:
            if not self.parts:
                return
            text = "".join(self.parts)
            self.parts, self.size = [], 0
            if self.closed:
                return
            try:
                await asyncio.wait_for(
                    self.append(self.namespace, self.pod, self.container, text), API_TIMEOUT
                )
            except TRANSIENT as exc:
                log.debug("appending to the log of %s/%s failed: %s", self.pod, self.container, exc)

    async def close(self) -> None:
        await self.flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    def new_run(self) -> None:
        """A new run of the container starts: its termination message reads only its own
        output, as the kubelet reads the log of the container that exited."""
        self.tail.clear()

    def termination_message(self) -> str:
        """The run's last 80 lines, each with its newline as the log holds it, cut to their
        last 2048 bytes (``terminationMessagePolicy: FallbackToLogsOnError``); a character
        cut in two is replaced."""
        data = "".join(f"{line}\n" for line in self.tail).encode()
        return data[-TERMINATION_LOG_BYTES:].decode(errors="replace")


async def read_lines(stream: asyncio.StreamReader, sink: LogSink) -> None:
    """Feed a process's output to ``sink`` line by line until EOF (a line longer than
    64 KiB goes out in pieces; undecodable bytes are replaced)."""
    pending = b""
    while True:
        chunk = await stream.read(LOG_FLUSH_BYTES)
        if not chunk:
            break
        pending += chunk
        if b"\n" in pending:
            *lines, pending = pending.split(b"\n")
            for line in lines:
                await sink.line(line.decode(errors="replace"))
        if len(pending) >= LOG_FLUSH_BYTES:  # a very long line goes out in pieces
            await sink.line(pending.decode(errors="replace"))
            pending = b""
    if pending:
        await sink.line(pending.decode(errors="replace"))


class OutputPipe:
    """A container's stdout and stderr: a pipe the kubelet makes itself, rather than asyncio's
    ``PIPE``. With ``PIPE``, ``Process.wait()`` (Python 3.11) returns only once every process
    holding the pipe has closed it: a child left running (``cmd &``, a helper a training
    process started) kept the container running after its main process had exited, kept the
    kubelet from killing what was left of its group, and made a stop spend the pod's whole
    grace period on a main process already gone. With a pipe of its own the kubelet sees the
    exit at once and reads the output apart from it (docs/local-plane.md, "Stopping").

    The process gets :attr:`write_fd` as its stdout; then :meth:`started` closes the
    kubelet's copy (EOF comes when the last process holding the pipe is gone), and
    :meth:`read_into` feeds the output to a sink until EOF and closes the pipe."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()  # both close-on-exec: only the process gets one

    def started(self) -> None:
        """The process has its copy of the write end: close the kubelet's."""
        if self.write_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.write_fd)
            self.write_fd = -1

    async def read_into(self, sink: LogSink) -> None:
        """:func:`read_lines` of the pipe until EOF (or cancellation), then close it."""
        loop = asyncio.get_running_loop()
        transport: asyncio.BaseTransport | None = None
        try:
            stream = asyncio.StreamReader(loop=loop)
            pipe = os.fdopen(self.read_fd, "rb", buffering=0)
            self.read_fd = -1  # the file (then the transport) owns it now
            try:
                transport, _ = await loop.connect_read_pipe(
                    lambda: asyncio.StreamReaderProtocol(stream, loop=loop), pipe
                )
            except BaseException:
                pipe.close()
                raise
            await read_lines(stream, sink)
        finally:
            if transport is not None:
                transport.close()
            self.close()

    def close(self) -> None:
        """Close what is left of the pipe here (safe to call more than once)."""
        self.started()
        if self.read_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
            self.read_fd = -1
