"""hack/testbed/procs.py: a program that finds its port taken is started again on another; one
that dies says its name, the step and its last lines (docs/testbed.md)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack/testbed"))

import procs

# Listens on the port it is given and says so.
SERVER = """
import socket, sys, time
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError as e:
    print("listen tcp 127.0.0.1:%s: bind: address already in use" % sys.argv[1], flush=True)
    sys.exit(1)
s.listen()
print("serving on", sys.argv[1], flush=True)
time.sleep(60)
"""


def test_a_taken_port_is_retried_on_another(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    first = taken.getsockname()[1]
    offered = iter([first])

    def build(ports: dict[str, int]) -> tuple[list[str], None]:
        port = next(offered, ports["main"])  # the first attempt gets the taken port
        ports["main"] = port
        return [sys.executable, "-c", SERVER, str(port)], None

    def ready(proc: procs.Proc) -> None:
        said = f"serving on {proc.ports['main']}"
        procs.wait_for("serving", lambda: said in proc.log.read_text(), 10, proc)

    proc = procs.start_with_port("server", build, ("main",), tmp_path / "server.log", ready)
    try:
        assert proc.ports["main"] != first and proc.alive()
        assert "starting server again" in (tmp_path / "server.log").read_text()
    finally:
        proc.stop()
        taken.close()


def test_a_program_that_dies_is_named_with_its_step_and_last_lines(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-c",
        "print('flag provided but not defined: -nope'); raise SystemExit(2)",
    ]
    proc = procs.start("kwok", argv, tmp_path / "kwok.log")
    with pytest.raises(procs.BedError) as caught:
        procs.wait_for("/healthz", lambda: False, 10, proc)
    message = str(caught.value)
    assert message.startswith("kwok: /healthz: exited with code 2; last lines of ")
    assert message.endswith("flag provided but not defined: -nope")
