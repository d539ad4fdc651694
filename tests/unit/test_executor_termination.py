"""The kubelet's termination message rules, as pure functions: which text wins, the log tail's
limits and the pod-wide 12 KiB share."""

from __future__ import annotations

import asyncio
from typing import Any

from trainer.local.executor.kubelet.logsink import LogSink
from trainer.local.executor.kubelet.policy.termination import limit_pod_messages, message


async def _noop(*_args: object) -> None:
    return None


def test_the_log_tail_is_the_last_80_lines_within_2048_bytes() -> None:
    async def run() -> LogSink:
        sink = LogSink(namespace="ns", pod="p", container="c", append=_noop, on_log=None)
        for i in range(100):
            await sink.line(f"{i:02d}" + "é" * 20)  # 43 bytes a line with its newline
        await sink.close()
        return sink

    sink = asyncio.run(run())
    text = sink.termination_message()
    assert len(text.encode()) <= 2048
    assert text.endswith("99" + "é" * 20 + "\n")
    assert "\ufffd" not in text[1:]  # only the first character may be cut in two
    sink.new_run()
    assert sink.termination_message() == ""


def test_which_text_is_the_message() -> None:
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    assert message(fallback, exit_code=1, file_text="why", log_tail="logs") == "why"
    assert message(fallback, exit_code=1, file_text="", log_tail="logs") == "logs"
    assert message(fallback, exit_code=0, file_text="", log_tail="logs") == ""
    assert message({}, exit_code=1, file_text="", log_tail="logs") == ""
    assert message({}, exit_code=0, file_text="done", log_tail="") == "done"


def test_a_pods_messages_share_12_kib() -> None:
    statuses: list[dict[str, Any]] = [
        {"name": f"c{i}", "state": {"terminated": {"exitCode": 1, "message": "m" * 4096}}}
        for i in range(4)
    ]
    statuses[0]["lastState"] = {"terminated": {"exitCode": 1, "message": "l" * 4000}}
    limit_pod_messages(statuses)
    assert [len(s["state"]["terminated"]["message"]) for s in statuses] == [3072] * 4
    assert len(statuses[0]["lastState"]["terminated"]["message"]) == 3072
    three = [{"state": {"terminated": {"message": "m" * 4096}}} for _ in range(3)]
    limit_pod_messages(three)
    assert all(len(s["state"]["terminated"]["message"]) == 4096 for s in three)
