"""The admission worker process: ``python -m webhooks.worker``, started by :mod:`webhooks.offload`.

It reads requests from stdin and writes answers to stdout, each an 8-byte big-endian length and
a pickle, answer ``(Answer | Needs, log records)`` (see :func:`webhooks.review.run_review`):

* ``("start", body, path, now)``: review ``body``; a :class:`~webhooks.review.Needs` answer
  keeps the parsed review here for the next request,
* ``("finish", view)``: finish the kept review with the cluster view the parent read,
* ``("deny", outcome)``: answer the kept review with ``outcome`` (the view could not be read).

Only its parent talks to it, over its own pipes. ``--nice N`` lowers its CPU priority. It
ignores SIGINT and exits when stdin closes (the parent stopped or died). Anything printed goes
to stderr: stdout carries the protocol only.
"""

from __future__ import annotations

import signal

# Ctrl-C reaches the whole process group: the parent decides when its workers stop (it closes
# their stdin), so a worker neither dies mid-review nor prints a traceback (even while
# importing, hence before the imports).
if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)

import contextlib
import logging
import os
import pickle
import struct
import sys
from typing import BinaryIO

from webhooks.review import Answer, Needs, answer, finish_review, run_review

_LENGTH = struct.Struct(">Q")


class _Collect(logging.Handler):
    """Keeps what admission logs during one review, to be sent back with the answer."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.records.append((record.levelno, text))


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    chunks: list[bytes] = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer requests until ``requests`` ends."""
    collect = _Collect()
    logger = logging.getLogger("webhooks.admission")
    logger.handlers[:] = [collect]
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    kept: tuple[Needs, str, str] | None = None
    while True:
        header = _read_exactly(requests, _LENGTH.size)
        if header is None:
            return
        payload = _read_exactly(requests, _LENGTH.unpack(header)[0])
        if payload is None:
            return
        message = pickle.loads(payload)
        collect.records = []
        result: Answer | Needs
        if message[0] == "start":
            _, body, path, now = message
            result = run_review(body, path, now, keep=True)
            kept = (result, path, now) if isinstance(result, Needs) else None
        else:
            assert kept is not None, "finish without a kept review"
            needs, path, now = kept
            if message[0] == "finish":
                result = finish_review(needs, path, message[1], now)
            else:  # "deny": the view could not be read; the outcome says so
                result = answer(needs.uid, needs.meta, message[1])
            kept = None
        if isinstance(result, Needs):
            result = Needs(result.uid, result.meta, result.keys)  # the parsed review stays here
        out = pickle.dumps((result, collect.records), protocol=pickle.HIGHEST_PROTOCOL)
        answers.write(_LENGTH.pack(len(out)) + out)
        answers.flush()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    nice = int(args[1]) if len(args) == 2 and args[0] == "--nice" else 0
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    # The protocol owns the real stdout; stray prints go to stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    with contextlib.suppress(BrokenPipeError):
        serve(requests, answers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
