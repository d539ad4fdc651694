"""A container's log sink, driven through what it is given: every line goes to ``on_log`` at
once and to ``pods/log`` in order, in batches; a failed append is dropped, never raised."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trainer.kube.rest import APIError
from trainer.local.executor.kubelet.logsink import (
    LOG_FLUSH_BYTES,
    TERMINATION_LOG_BYTES,
    LogSink,
    append_file,
    log_file,
    read_lines,
)


class PodLog:
    """A stand-in for ``pods/log``: records every append, optionally failing."""

    def __init__(self, *, fail: bool = False) -> None:
        self.appends: list[tuple[str, str, str, str]] = []
        self.fail = fail
        self.appended = asyncio.Event()

    async def append(self, namespace: str, pod: str, container: str, text: str) -> None:
        self.appends.append((namespace, pod, container, text))
        self.appended.set()
        if self.fail:
            raise APIError(503, "ServiceUnavailable", "unavailable")


def sink_for(log: PodLog, seen: list[tuple[str, str, str]] | None = None) -> LogSink:
    return LogSink(
        namespace="ns",
        pod="p",
        container="node",
        append=log.append,
        on_log=None if seen is None else lambda *args: seen.append(args),
    )


async def test_lines_are_batched_in_order_and_flushed_on_close() -> None:
    log = PodLog()
    seen: list[tuple[str, str, str]] = []
    sink = sink_for(log, seen)
    for text in ("one", "two\r", "three"):
        await sink.line(text)
    assert seen == [("p", "node", "one"), ("p", "node", "two"), ("p", "node", "three")]
    await sink.close()
    assert log.appends == [("ns", "p", "node", "one\ntwo\nthree\n")]


async def test_a_batch_goes_out_after_the_flush_delay_without_close() -> None:
    log = PodLog()
    sink = sink_for(log)
    await sink.line("hello")
    await asyncio.wait_for(log.appended.wait(), 5)
    assert log.appends == [("ns", "p", "node", "hello\n")]
    await sink.close()
    assert len(log.appends) == 1


async def test_a_full_batch_goes_out_at_once() -> None:
    log = PodLog()
    sink = sink_for(log)
    await sink.line("x" * LOG_FLUSH_BYTES)
    assert len(log.appends) == 1
    await sink.close()


async def test_a_failed_append_is_dropped_and_a_closed_sink_writes_nothing() -> None:
    failing = PodLog(fail=True)
    sink = sink_for(failing)
    await sink.line("lost")
    await sink.close()  # no exception
    assert [a[3] for a in failing.appends] == ["lost\n"]
    log = PodLog()
    closed = sink_for(log)
    closed.closed = True  # the pod was deleted
    await closed.line("late")
    await closed.close()
    assert log.appends == []


async def test_termination_message_is_the_tail_of_the_log() -> None:
    sink = sink_for(PodLog())
    for i in range(200):
        await sink.line(f"line {i:03d} " + "." * 20)
    message = sink.termination_message()
    assert len(message) == TERMINATION_LOG_BYTES
    assert message.endswith("line 199 " + "." * 20 + "\n")
    await sink.close()


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"a\nb\n"], ["a", "b"]),
        ([b"par", b"tial\nlast"], ["partial", "last"]),
        ([b"\xff\n"], ["\ufffd"]),
    ],
)
async def test_read_lines_splits_a_stream(chunks: list[bytes], lines: list[str]) -> None:
    stream = asyncio.StreamReader()
    for chunk in chunks:
        stream.feed_data(chunk)
    stream.feed_eof()
    seen: list[tuple[str, str, str]] = []
    sink = sink_for(PodLog(), seen)
    await read_lines(stream, sink)
    assert [text for _, _, text in seen] == lines
    await sink.close()


async def test_a_run_s_log_file_follows_the_kubelet_s_layout(tmp_path: Path) -> None:
    path = log_file(tmp_path, "team", "train-0", "uid-1", "main", 2)
    assert path == tmp_path / "team_train-0_uid-1" / "main" / "2.log"
    await append_file(path, "one\n")
    await append_file(path, "two\n")
    assert path.read_text() == "one\ntwo\n"
