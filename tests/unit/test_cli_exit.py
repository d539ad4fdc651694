"""The ``trainer`` process's exit: once a command is over, CPython's teardown does not walk
every object of the loaded modules again (docs/local-plane.md, "Stopping"), and atexit
handlers still run."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count(), flush=True))
sys.argv = ["trainer", *sys.argv[1:]]
from trainer.cli.main import main
main()
"""


def _exit_of(*args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_objects_of_a_finished_command_are_left_to_the_exit() -> None:
    code, out = _exit_of("version")
    assert code == 0, out
    assert "trainer " in out
    frozen = int(out.split("frozen at exit:")[1].split()[0])
    assert frozen > 10_000, out  # what the command loaded: typer, click, trainer


def test_a_failing_command_exits_the_same_way_with_its_code() -> None:
    code, out = _exit_of("no-such-command")
    assert code == 2, out
    assert "No such command" in out
    assert int(out.split("frozen at exit:")[1].split()[0]) > 10_000, out
