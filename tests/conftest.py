"""Shared pytest options, the order files are run in, and the deadline every test runs under."""

from __future__ import annotations

import faulthandler
import os
import re
import shutil
from collections.abc import Generator
from pathlib import Path

import pytest

TEST_DEADLINE = float(os.environ.get("TRAINER_TEST_DEADLINE", "420"))
"""Seconds a test may take, its fixtures' setup and teardown included. Past it, every thread's
stack is written to :data:`DEADLINE_DIR` and the test's process ends: the unit and local tier
once hung at 99% for the rest of CI's time in an async fixture's teardown, which no output
named. The slowest test takes about 60 s; a bed's first start under a minute."""
DEADLINE_DIR = Path(__file__).resolve().parents[1] / "build" / "test-deadline"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/cases/*/expected.yaml from the current output; review the diff",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``slow`` first. ``make test`` hands whole files to pytest-xdist workers in
    collection order; a long file handed out last would run alone while the other workers
    idle. The sort is stable, so each file keeps its own order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")  # pytest-xdist's workers have it


def pytest_sessionstart(session: pytest.Session) -> None:
    if _is_controller(session.config):
        shutil.rmtree(DEADLINE_DIR, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    DEADLINE_DIR.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[:200]
    path = DEADLINE_DIR / f"{name}.txt"
    with path.open("w") as out:
        out.write(f"{item.nodeid} ran past {TEST_DEADLINE:.0f} s; every thread's stack:\n")
        out.flush()
        faulthandler.dump_traceback_later(TEST_DEADLINE, exit=True, file=out)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    path.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The stacks of tests that ran past the deadline (their process ended, so pytest-xdist
    reports the test as crashed); nothing when none did."""
    if not _is_controller(terminalreporter.config) or not DEADLINE_DIR.is_dir():
        return
    for path in sorted(DEADLINE_DIR.glob("*.txt")):
        text = path.read_text(errors="replace")
        if "Timeout (" in text:  # faulthandler's header; a file without it: no stacks came
            terminalreporter.write_sep("=", f"past the deadline: {path.stem}")
            terminalreporter.write_line(text.rstrip())
