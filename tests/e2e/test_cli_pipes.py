"""A closed output pipe ends any ``trainer`` command quietly, with exit status 141 (128 +
SIGPIPE), as ``trainer ... | head`` users expect (trainer/cli/pipes.py, README.md "Command
line"). Real processes and real pipes: the reader closes before the command writes, or after
reading a line while the command is still writing, or while what the command wrote is still
in its buffer waiting for the flush at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer._click.core import Command

from trainer.cli.main import app
from trainer.cli.pipes import CLOSED_PIPE_EXIT

pytestmark = pytest.mark.slow  # about 10 processes of 1 to 5 s each

ROOT = Path(__file__).resolve().parents[2]
TRIES = 4  # the race showed in 19 of 20 runs before the handling (each try is 2 to 5 s)
# Without PYTHONUNBUFFERED (set in some CI and container images, not in a user's shell):
# Python then buffers stdout when it is a pipe, as it does for `trainer ... | head`.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
ENV["PYTHONPATH"] = str(ROOT)


def _commands(command: Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        out += _commands(sub, (*path, name))
    return out


COMMAND_PATHS = _commands(typer.main.get_command(app))
# One handler serves every command (the guard and the entry points); the help of the group,
# a command, a nested group's command and the last command stand for all of them, which keeps
# this file's processes few (each costs 1 to 3 s of the suite's budget).
SAMPLED_PATHS = [COMMAND_PATHS[0], ("run",), ("data-cache", "serve"), COMMAND_PATHS[-1]]
# Each prints far more than a pipe holds (64 KiB), so the reader is gone before it is done.
LONG_OUTPUT = [["crds"], ["manifests"]]


def _trainer(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainer.cli.main", *args]


def _into_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with stdout a pipe whose reader is already closed."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            argv, stdout=write, stderr=subprocess.PIPE, env=ENV, cwd=ROOT, timeout=60, check=False
        )
    finally:
        os.close(write)


def _like_head(argv: list[str], lines: int = 1) -> tuple[int, bytes, bytes]:
    """Run ``argv`` into a reader that reads ``lines`` lines and closes the pipe (``| head``)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    read = b"".join(proc.stdout.readline() for _ in range(lines))
    proc.stdout.close()
    stderr = proc.stderr.read()
    return proc.wait(timeout=60), read, stderr


@pytest.mark.parametrize("path", SAMPLED_PATHS, ids=lambda p: " ".join(p) or "trainer")
def test_help_into_a_closed_pipe_is_quiet(path: tuple[str, ...]) -> None:
    done = _into_closed_pipe(_trainer(*path, "--help"))
    assert (done.returncode, done.stderr) == (CLOSED_PIPE_EXIT, b"")


def test_head_of_long_output_and_of_help_is_quiet_every_time() -> None:
    results = []
    for attempt in range(TRIES):
        if attempt % 2 == 0:
            args = LONG_OUTPUT[attempt // 2 % len(LONG_OUTPUT)]
            code, first, stderr = _like_head(_trainer(*args))
            assert first.startswith((b"apiVersion: ", b"---"))
        else:
            # `trainer run --help | head -3`; help fits in a pipe, so it may be written whole
            # before the reader closes (exit 0) or not (141).
            args = ["run", "--help"]
            code, first, stderr = _like_head(_trainer(*args), lines=3)
            assert first.startswith(b"Usage: ")
        results.append((args, code, stderr))
    noisy = [r for r in results if r[2]]
    assert noisy == [], f"{len(noisy)} of {len(results)} runs wrote to stderr: {noisy[0]}"
    for args, code, _ in results:
        expected = {CLOSED_PIPE_EXIT} if args in LONG_OUTPUT else {0, CLOSED_PIPE_EXIT}
        assert code in expected, (args, code)


# What the command wrote sits in Python's buffer when the reader closes; it is flushed at exit.
BUFFERED = """
import os, sys
from trainer.cli.pipes import closed_pipe_ends_quietly
with closed_pipe_ends_quietly():
    sys.stdout.write("a line the reader never reads\\n")
    os.read(int(sys.argv[1]), 1)  # the test closes the reader, then says go
"""


def test_a_pipe_closed_before_the_flush_at_exit_is_quiet() -> None:
    go_read, go_write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", BUFFERED, str(go_read)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        pass_fds=(go_read,),
    )
    os.close(go_read)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    os.write(go_write, b"x")
    os.close(go_write)
    assert (proc.wait(timeout=60), proc.stderr.read()) == (CLOSED_PIPE_EXIT, b"")


def test_without_the_handling_the_flush_at_exit_is_noisy() -> None:
    # The failure the handling prevents, so the test above tests something.
    code = "import os, sys\nsys.stdout.write('x\\n')\nos.read(int(sys.argv[1]), 1)\n"
    go_read, go_write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(go_read)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        pass_fds=(go_read,),
    )
    os.close(go_read)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    os.write(go_write, b"x")
    os.close(go_write)
    assert proc.wait(timeout=60) == 120
    assert b"BrokenPipeError" in proc.stderr.read()


def test_a_broken_pipe_that_is_not_the_output_is_still_reported() -> None:
    # A BrokenPipeError while stdout and stderr are open (a socket, say) is an error, not the
    # end of the reader: the guard reports it as any unexpected exception.
    code = (
        "import typer\n"
        "from trainer.cli.guard import GuardedGroup\n"
        "from trainer.cli.pipes import closed_pipe_ends_quietly\n"
        "app = typer.Typer(cls=GuardedGroup, add_completion=False)\n"
        "@app.command()\n"
        "def boom() -> None:\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "@app.command()\n"
        "def other() -> None: ...\n"
        "with closed_pipe_ends_quietly():\n"
        "    app(['boom'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "error: internal error: BrokenPipeError" in done.stderr
