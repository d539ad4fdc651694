"""Structured logs carry no terminal escapes (trainer/observability/logging.py): uvicorn's
records, as our uvicorn-served listeners emit them, lose their ``color_message`` field, and no
escape sequence reaches text or JSON output from a message, a field or a traceback."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys

import pytest
import uvicorn

from trainer.listeners.uvicorn_server import GuardedUvicornServer
from trainer.machinery.sockets import bind_socket
from trainer.observability.logging import FORMATS, Format, formatter, setup_logging


async def _hello(scope: dict[str, object], receive: object, send: object) -> None:
    raise AssertionError("no request is sent")


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def _serve_once(fmt: Format) -> tuple[str, list[logging.LogRecord]]:
    """Start and stop a uvicorn server on a guarded listener (the webhook's, the dashboard's),
    its loggers sent through :func:`setup_logging`; the output and uvicorn's own records."""
    stream = io.StringIO()
    handler = setup_logging("debug", fmt, stream=stream, logger="uvicorn")
    kept = _Keep()
    uvicorn_log = logging.getLogger("uvicorn")
    uvicorn_log.addHandler(kept)
    try:
        config = uvicorn.Config(_hello, http="h11", lifespan="off", log_config=None)
        server = GuardedUvicornServer(config, name="test")
        serving = asyncio.create_task(server.serve(sockets=[bind_socket("127.0.0.1", 0)]))
        await server.ready.wait()
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
    finally:
        uvicorn_log.removeHandler(kept)
        uvicorn_log.removeHandler(handler)
        handler.close()
    return stream.getvalue(), kept.records


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_uvicorn_served_listener_logs_without_color_message(fmt: Format) -> None:
    output, records = await _serve_once(fmt)
    coloured = [r for r in records if "\x1b" in str(getattr(r, "color_message", ""))]
    assert coloured, "uvicorn no longer sends color_message: this test checks nothing"
    assert "Started server process" in output and "Finished server process" in output
    assert "color_message" not in output
    assert "\x1b" not in output and "\\u001b" not in output
    if fmt == "json":
        for line in output.splitlines():
            assert "color_message" not in json.loads(line)


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_escape_reaches_structured_output_from_any_field(fmt: Format) -> None:
    try:
        raise ValueError("\x1b[31mboom\x1b[0m")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "%s", ("\x1b[1mbold",), None)
        record.exc_info = sys.exc_info()
    record.pod = "\x1b]8;;http://example.com\x07link\x1b]8;;\x07"
    record.nested = {"phase": ["\x1b[32mRunning\x1b[0m", "\x9b1mC1"]}
    record.color_message = "\x1b[36mcoloured\x1b[0m"
    line = formatter(fmt).format(record)
    assert "\x1b" not in line and "\\u001b" not in line and "\x9b" not in line
    assert "\\u009b" not in line and "color_message" not in line
    for kept in ("bold", "boom", "link", "Running", "C1"):
        assert kept in line
