"""A closed output pipe ends a ``trainer`` command quietly, as it ends Unix tools.

``trainer run --help | head -3``: once ``head`` exits, the next write to the pipe fails. A C
program would be killed by SIGPIPE; Python ignores SIGPIPE and raises ``BrokenPipeError``
instead, which, unhandled, became an "internal error" line, or, when it came from the flush at
interpreter shutdown, an "Exception ignored" message and exit status 120. Here the command ends
with nothing on stderr and exit status :data:`CLOSED_PIPE_EXIT`, 141, what a shell reports for
a process killed by SIGPIPE (128 + 13), so ``set -o pipefail`` scripts see what they would see
of ``cat`` or ``yes``; it is not 1, which ``trainer`` uses for failed TrainJobs and invalid
objects (README.md, "Command line"). SIGPIPE itself stays ignored: with its default action a
server command would also die when a client socket closes.

The closed stream is pointed at ``/dev/null`` before exiting, so the flush at shutdown has
somewhere to write what was still buffered: the recipe of Python's docs, "Note on SIGPIPE"
(https://docs.python.org/3/library/signal.html#note-on-sigpipe). A ``BrokenPipeError`` while
stdout and stderr are both still open (a socket of a server, say) is not this case and is
reported as any other error.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

CLOSED_PIPE_EXIT = 141
"""128 + SIGPIPE: the status a shell reports for a process killed by SIGPIPE."""

_GONE = select.POLLERR | select.POLLHUP


def _reader_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe (or socket) whose reading end is closed: poll(2) reports
    POLLERR (Linux) or POLLHUP (BSD, macOS) for it. A terminal or a file never does."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & _GONE for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def closed_outputs() -> list[int]:
    """The standard output and error descriptors (1, 2) whose reader is gone."""
    return [fd for fd in (1, 2) if _reader_gone(fd)]


def end_quietly(closed: list[int]) -> NoReturn:
    """Point the ``closed`` descriptors at /dev/null and exit with :data:`CLOSED_PIPE_EXIT`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in closed:
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    raise SystemExit(CLOSED_PIPE_EXIT)


def on_broken_pipe() -> None:
    """Called where a ``BrokenPipeError`` was caught: end quietly when it is stdout's or
    stderr's reader that is gone; return otherwise (the caller reports the error)."""
    closed = closed_outputs()
    if closed:
        end_quietly(closed)


def _flush_outputs() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()


@contextmanager
def closed_pipe_ends_quietly() -> Iterator[None]:
    """Around a whole command: a ``BrokenPipeError`` from a closed stdout or stderr, raised by
    the command or by the final flush of what it wrote, exits quietly with status 141."""
    try:
        yield
    except BrokenPipeError:
        on_broken_pipe()
        raise
    finally:
        # Flushed here, not at interpreter shutdown, where a failure cannot be handled. The
        # exit status in flight (SystemExit) is kept unless this flush finds the pipe closed.
        try:
            _flush_outputs()
        except BrokenPipeError:
            on_broken_pipe()
            raise
