"""Repeated warnings and errors are rate-limited (trainer/observability/logging.py,
RepeatFilter; docs/local-plane.md "Listeners under abuse"): a failure logged thousands of
times becomes one line per interval carrying the count of the identical lines left out, and
nothing else is held back."""

from __future__ import annotations

import io
import logging

from trainer.observability.logging import REPEAT_INTERVAL_SECONDS, RepeatFilter, setup_logging


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_of_one_error_is_one_line_per_interval_with_the_count() -> None:
    stream = io.StringIO()
    handler = setup_logging("info", "text", stream=stream, logger="trainer.test.repeats")
    clock = Clock()
    handler.filters[:] = [RepeatFilter(interval=60, clock=clock)]
    log = logging.getLogger("trainer.test.repeats")
    log.propagate = False  # only our handler: pytest's would keep every record
    try:
        for second in range(150):  # 150 s of 100 identical errors a second
            clock.now = float(second)
            for _ in range(100):
                try:
                    raise OSError(24, "Too many open files")
                except OSError:
                    log.exception("socket.accept() out of system resource")
        log.error("something else")  # another message is not held back
        for i in range(3):
            log.info("Reconciled")  # nor is info, however often
            log.warning("port %d busy", i)  # nor a message that differs
    finally:
        log.removeHandler(handler)
        log.propagate = True
    lines = stream.getvalue().splitlines()
    accept = [line for line in lines if "out of system resource" in line]
    assert len(accept) == 3  # at 0 s, 60 s and 120 s
    assert "suppressed" not in accept[0]
    assert all(" suppressed=5999 " in line for line in accept[1:])
    assert sum("something else" in line for line in lines) == 1
    assert sum("Reconciled" in line for line in lines) == 3
    assert sum("busy" in line for line in lines) == 3


def test_setup_logging_installs_the_filter_with_a_minute_interval() -> None:
    handler = setup_logging("info", "text", stream=io.StringIO(), logger="trainer.test.r2")
    try:
        (found,) = [f for f in handler.filters if isinstance(f, RepeatFilter)]
        assert found.interval == REPEAT_INTERVAL_SECONDS == 60.0
    finally:
        logging.getLogger("trainer.test.r2").removeHandler(handler)
