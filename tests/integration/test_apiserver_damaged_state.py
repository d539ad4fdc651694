"""Damaged-state-file suite: ``trainer apiserver --state-file`` refuses every kind of broken,
foreign or unreachable state file at start with one line on stderr naming the file and what
is wrong (and, for damaged content, how to move it aside), exit status 2 and no traceback;
``--reset-damaged-state`` moves a damaged file aside and starts empty. See
docs/local-plane.md, "State file: durability and recovery".

Counts: 13 refused files (the CLI in this process, or in a subprocess for the file root
cannot read), 1 reset and 1 in-use (real processes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainer.cli.main import app
from trainer.local.apiserver import APIServer

ROOT = Path(__file__).resolve().parents[2]
MARKER = "marker-value-0123456789"
TIMEOUT = 120.0
# Root reads any file: the "unreadable" case runs without the capabilities that allow it.
DROP = "-dac_override,-dac_read_search"
WITHOUT_ROOT_FILE_ACCESS = ["setpriv", f"--inh-caps={DROP}", f"--bounding-set={DROP}"]


@pytest.fixture(autouse=True)
def root_logging() -> Iterator[None]:
    """The commands set up logging on the root logger, to a stream CliRunner closes after
    each run: put the root logger back as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def healthy(path: Path) -> None:
    """A state file as a stopped server leaves it (with a ConfigMap holding MARKER)."""

    async def fill() -> None:
        server = APIServer(state_file=str(path))
        for i in range(20):
            server.storage.create_unadmitted(
                "v1", "ConfigMap", {"metadata": {"name": f"cm-{i}"}, "data": {"k": MARKER}}
            )
        await server.stop()

    asyncio.run(fill())
    assert not Path(f"{path}-wal").exists()  # checkpointed on close


def flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def sql(path: Path, statement: str, params: tuple[object, ...] = ()) -> None:
    db = sqlite3.connect(path)
    db.execute(statement, params)
    db.commit()
    db.close()


def set_body(path: Path, body: str) -> None:
    """Replace one row's body, with a matching checksum (a buggy writer, not a bit flip)."""
    sql(
        path,
        "UPDATE objects SET body = ?, crc = ? WHERE name = 'cm-3'",
        (body, zlib.crc32(body.encode())),
    )


def garbage(path: Path) -> None:
    path.write_bytes(random.Random(15).randbytes(16384))


def truncated_header(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:10])


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flipped_page(path: Path) -> None:
    flip_bit(path, 4096 * 2, 3)  # the b-tree page type of page 3


def flipped_row(path: Path) -> None:
    flip_bit(path, path.read_bytes().index(MARKER.encode()) + 4, 1)


def invalid_json(path: Path) -> None:
    set_body(path, '{"metadata": {"name": "cm-3"')


def wrong_shape(path: Path) -> None:
    set_body(path, json.dumps(["not", "an", "object"]))


def wrong_name(path: Path) -> None:
    set_body(path, json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 5}}))


def refused_labels(path: Path) -> None:
    """Stored by an older version that did not validate metadata (``labels: "x"``)."""
    meta = {"name": "cm-3", "namespace": "default", "uid": "u-3", "labels": "x"}
    set_body(path, json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def unreadable(path: Path) -> None:
    path.chmod(0)


def newer_schema(path: Path) -> None:
    sql(path, "PRAGMA user_version = 99")


def foreign(path: Path) -> None:
    path.unlink()
    sql(path, "CREATE TABLE songs (title TEXT)")


@dataclass(frozen=True)
class Case:
    damage: Callable[[Path], None]
    says: str
    damaged: bool  # content damage: the line tells how to move it aside


CASES = {
    "garbage bytes": Case(garbage, "is not a SQLite database", True),
    "truncated inside the header": Case(truncated_header, "is truncated", True),
    "truncated to half": Case(truncated, "is damaged (", True),
    "bit-flipped page": Case(flipped_page, "is damaged", True),
    "bit-flipped row": Case(flipped_row, "does not match its checksum", True),
    "row with invalid JSON": Case(invalid_json, "its body is not valid JSON", True),
    "row of the wrong shape": Case(wrong_shape, "not an object with metadata", True),
    "row with a wrong name": Case(wrong_name, "metadata.name is 5", True),
    "row the server would refuse to store": Case(
        refused_labels, "ObjectMeta.metadata.labels of type map[string]string", True
    ),
    "a directory in its place": Case(directory, "is a directory", False),
    "unreadable": Case(unreadable, "cannot be read: Permission denied", False),
    "from a newer schema": Case(newer_schema, "newer trainer (schema version 99", False),
    "another program's database": Case(foreign, "not a trainer state file", False),
}


def command(state: Path, kubeconfig: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trainer.cli.main",
        "apiserver",
        "--port",
        "0",
        "--kubeconfig",
        str(kubeconfig),
        "--state-file",
        str(state),
        *extra,
    ]


def env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def refused(case: Case, state: Path) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``trainer apiserver`` on ``state``: in this process
    (bounded by an alarm should the file be accepted and the server start), except a file
    unreadable to root, which takes a process without root's file access."""
    args = ["apiserver", "--port", "0", "--kubeconfig", str(state.parent / "kubeconfig")]
    args += ["--state-file", str(state)]
    if case.damage is unreadable and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: no file is unreadable")
        proc = subprocess.run(
            [*WITHOUT_ROOT_FILE_ACCESS, sys.executable, "-m", "trainer.cli.main", *args],
            capture_output=True,
            text=True,
            env=env(),
            timeout=TIMEOUT,
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def started(_signum: int, _frame: object) -> None:
        raise TimeoutError("the state file was accepted and the server started")

    previous = signal.signal(signal.SIGALRM, started)
    signal.alarm(int(TIMEOUT))
    try:
        result = CliRunner().invoke(app, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "state.db"
    healthy(path)
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_state_file_is_refused_in_one_line(name: str, template: Path, tmp_path: Path) -> None:
    case = CASES[name]
    state = tmp_path / "state.db"
    shutil.copy(template, state)
    case.damage(state)
    code, out, err = refused(case, state)
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"error: state file {state}: ")
    assert case.says in line
    assert ("--reset-damaged-state" in line) == case.damaged
    assert (f"mv {state} {state}.damaged" in line) == case.damaged
    assert not state.with_name("kubeconfig").exists()


def test_reset_damaged_state_moves_the_file_aside_and_starts_empty(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    healthy(state)
    garbage(state)
    damaged_bytes = state.read_bytes()
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        command(state, kubeconfig, "--reset-damaged-state"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert proc.stdout is not None
        for _line in proc.stdout:  # the kubeconfig is written before the first line
            if kubeconfig.exists():
                break
        assert kubeconfig.exists()
        moved = list(tmp_path.glob("state.db.damaged-*"))
        assert [p.read_bytes() for p in moved] == [damaged_bytes]
        # A second server on the same file is refused while this one runs, naming its pid.
        second = subprocess.run(
            command(state, tmp_path / "kubeconfig-2"),
            capture_output=True,
            text=True,
            env=env(),
            timeout=TIMEOUT,
            check=False,
        )
        assert second.returncode == 2
        assert second.stderr.splitlines() == [
            f"error: state file {state}: is in use by process {proc.pid} (lock {state}.lock); "
            "stop it or use another state file"
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0
    assert "Traceback" not in err
    assert f"moved to {moved[0]}, starting empty" in err
    assert state.exists()


def test_trainer_up_refuses_a_damaged_state_file_the_same_way(
    template: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.db"
    shutil.copy(template, state)
    flipped_row(state)
    result = CliRunner().invoke(
        app, ["up", "--kubeconfig", str(tmp_path / "kubeconfig"), "--state-file", str(state)]
    )
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: state file {state}: is damaged (row ")
    assert line.endswith("or start with --reset-damaged-state")


@pytest.mark.parametrize("damage", [flipped_row, refused_labels, flipped_page])
def test_reset_damaged_state_also_moves_a_file_with_a_bad_row_aside(
    damage: Callable[[Path], None], template: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.db"
    shutil.copy(template, state)
    damage(state)
    damaged_bytes = state.read_bytes()
    server = APIServer(state_file=str(state), reset_damaged_state=True)
    try:
        assert server.storage.objects("v1", "configmaps", "default") == []
    finally:
        asyncio.run(server.stop())
    # (its -wal and -shm files, when SQLite left them, are moved beside it)
    [moved] = [
        p for p in tmp_path.glob("state.db.damaged-*") if not p.name.endswith(("-wal", "-shm"))
    ]
    assert moved.read_bytes() == damaged_bytes
    again = APIServer(state_file=str(state))  # the fresh file is healthy
    try:
        assert again.storage.objects("v1", "configmaps", "default") == []
    finally:
        asyncio.run(again.stop())
