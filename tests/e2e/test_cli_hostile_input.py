"""Hostile input for every ``trainer`` verb that reads files: zero tracebacks, the exit code
README.md documents, one ``error:`` line naming the file, and a bounded time.

The corpus (tests/e2e/hostile.py) holds alias bombs, 50k-deep lists, 3k-deep maps, 5,000-digit
integers, non-UTF-8, UTF-16 and NUL bytes, empty files, bare scalars and lists, ``metadata:
hello``, ``kind: List`` with junk items, a wrong apiVersion, a file over the size bound, a
directory, a missing file, an unreadable file (skipped as root) and a symlink loop. Every case
runs in-process (typer's CliRunner) against every verb; the bombs also run as real processes
under a 20 s timeout, so a hang or a crash of the interpreter (libyaml's recursion) fails.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import typer.main
import typer.testing
import yaml
from typer.testing import CliRunner

from tests.e2e.hostile import CASES, Case, is_root
from trainer.cli.main import app

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TIME_BOUND = 20.0
runner = CliRunner()

GOOD_TRAINJOB = (
    "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: good}\n"
    "spec: {runtimeRef: {name: torch-distributed}}\n"
)


# verb -> (argv for an input path, exit code for unreadable input, for invalid objects).
# The codes are README.md's "Command line" section.
def _verbs(good: str) -> dict[str, tuple[Callable[[str], list[str]], int, int]]:
    return {
        "validate": (lambda p: ["validate", "-f", p], 2, 1),
        "validate --runtime": (lambda p: ["validate", "-f", good, "-r", p], 2, 1),
        "render": (lambda p: ["render", "-f", p], 2, 2),
        "render --runtime": (lambda p: ["render", "-f", good, "-r", p], 2, 2),
        "run": (lambda p: ["run", "-f", p], 2, 1),
        "run --runtime": (lambda p: ["run", "-f", good, "-r", p], 2, 1),
        "convert": (lambda p: ["convert", "-f", p], 1, 1),
        "controller --config": (lambda p: ["controller", "--config", p], 2, 2),
        "controller --kubeconfig": (lambda p: ["controller", "--kubeconfig", p], 2, 2),
        "webhook --kubeconfig": (lambda p: ["webhook", "--kubeconfig", p], 2, 2),
        "dashboard --kubeconfig": (lambda p: ["dashboard", "--kubeconfig", p], 2, 2),
        "manifests --values": (lambda p: ["manifests", "--values", p], 2, 2),
    }


VERB_NAMES = list(_verbs("").keys())
# Inputs a verb rightly accepts: an empty values file means the default values.
ACCEPTED = {"manifests --values": ("empty", "only-comments")}


COMMAND = typer.main.get_command(app)


@pytest.fixture(autouse=True)
def _command_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """typer builds the click command from the app on every invoke (~25 ms); build it once."""
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: COMMAND)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Commands configure logging on CliRunner's streams; undo it so a later command does
    not log to a closed stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def _assert_clean(output: str, stderr: str, code: int, expected: int, name: str) -> None:
    assert "Traceback" not in output, output
    assert "internal error" not in output, output
    assert code == expected, f"exit {code}, expected {expected}:\n{output}"
    assert name in output, f"the error does not name {name}:\n{output}"


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("verb", VERB_NAMES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_in_process(case: Case, verb: str, tmp_path: Path) -> None:
    if case.needs_non_root and is_root():
        pytest.skip(
            "running as root: file permissions do not stop reading in-process; "
            "test_unreadable_file_as_root_without_file_capabilities covers it"
        )
    good = tmp_path / "good.yaml"
    good.write_text(GOOD_TRAINJOB)
    argv, unreadable, invalid = _verbs(str(good))[verb]
    work = tmp_path / "case"
    work.mkdir()
    path = str(case.make(work))
    env = {"KUBECONFIG": str(tmp_path / "no-kubeconfig")}
    started = time.monotonic()
    result = runner.invoke(app, argv(path), env=env)
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    # controller/webhook read a kubeconfig, and every case is an unusable one.
    kubeconfig_verb = verb.endswith("--kubeconfig")
    expected = unreadable if case.kind == "unreadable" or kubeconfig_verb else invalid
    if case.name in ACCEPTED.get(verb, ()):
        assert result.exit_code == 0, output  # e.g. an empty values file: the defaults
        assert "Traceback" not in output
        return
    _assert_clean(output, result.stderr, result.exit_code, expected, path)
    assert elapsed < TIME_BOUND, f"{elapsed:.1f}s"
    assert "starting the local control plane" not in output  # run applied nothing
    if case.kind == "unreadable" or not verb.startswith(("validate", "run", "manifests")):
        lines = _error_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert path in lines[0], lines[0]


STDIN_CASES = [c for c in CASES if c.make.__qualname__.startswith(("_text", "_bytes"))]


@pytest.mark.parametrize("verb", ["validate", "render", "convert"])
@pytest.mark.parametrize("case", STDIN_CASES, ids=[c.name for c in STDIN_CASES])
def test_hostile_input_on_stdin(case: Case, verb: str, tmp_path: Path) -> None:
    data = case.make(tmp_path).read_bytes()
    unreadable, invalid = {"validate": (2, 1), "render": (2, 2), "convert": (1, 1)}[verb]
    started = time.monotonic()
    result = runner.invoke(app, [verb, "-f", "-"], input=data)
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    expected = unreadable if case.kind == "unreadable" else invalid
    _assert_clean(output, result.stderr, result.exit_code, expected, "<stdin>")
    assert elapsed < TIME_BOUND


KUBECONFIGS = {
    "clusters-not-a-list": "clusters: 5\n",
    "context-to-nothing": (
        "current-context: c\ncontexts: [{name: c, context: {cluster: nope, user: nope}}]\n"
    ),
    "wrong-field-types": (
        "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 5}}]\nusers: [{name: u, user: {token: [1]}}]\n"
    ),
    "bad-base64": (
        "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://x', certificate-authority-data: '%'}}]\n"
        "users: [{name: u, user: {}}]\n"
    ),
    "current-context-int": "current-context: 7\n",
    "context-not-a-map": "current-context: c\ncontexts: [{name: c, context: 5}]\n",
}


@pytest.mark.parametrize("verb", ["controller", "webhook"])
@pytest.mark.parametrize("name", list(KUBECONFIGS))
def test_garbage_kubeconfigs(name: str, verb: str, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIGS[name])
    result = runner.invoke(app, [verb, "--kubeconfig", str(path)])
    output = result.stdout + result.stderr
    _assert_clean(output, result.stderr, result.exit_code, 2, str(path))
    assert len(_error_lines(result.stderr)) == 1, result.stderr


def test_kubeconfig_from_the_environment_is_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("[" * 50_000)
    result = runner.invoke(app, ["controller"], env={"KUBECONFIG": str(path)})
    output = result.stdout + result.stderr
    _assert_clean(output, result.stderr, result.exit_code, 2, str(path))


# --- real processes: bombs must neither hang nor crash the interpreter -----------------------

BOMBS = [c for c in CASES if c.name in ("alias-bomb", "deep-list-50k")]
PROCESS_VERBS = ["validate", "render", "run", "convert", "controller --config"]


def _trainer(
    args: list[str], cwd: Path, timeout: float = TIME_BOUND, prefix: Sequence[str] = ()
) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KUBECONFIG": str(cwd / "no-kubeconfig")}
    started = time.monotonic()
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "trainer.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


@pytest.mark.parametrize("verb", PROCESS_VERBS)
@pytest.mark.parametrize("case", BOMBS, ids=[c.name for c in BOMBS])
def test_bombs_in_a_real_process(case: Case, verb: str, tmp_path: Path) -> None:
    argv, unreadable, _ = _verbs(str(tmp_path / "unused.yaml"))[verb]
    path = str(case.make(tmp_path))
    code, output, elapsed = _trainer(argv(path), tmp_path)
    assert code >= 0, f"killed by signal {-code} (stack overflow?)"
    _assert_clean(output, output, code, unreadable, path)
    assert elapsed < TIME_BOUND


# Root reads any file: drop the capabilities that let it (the process keeps uid 0), so the
# permission check is the kernel's, as for any user. One verb per input reader.
WITHOUT_FILE_CAPABILITIES = ["setpriv", "--inh-caps=-dac_override,-dac_read_search"]
WITHOUT_FILE_CAPABILITIES.append("--bounding-set=-dac_override,-dac_read_search")
UNREADABLE = next(c for c in CASES if c.name == "unreadable-file")


@pytest.mark.parametrize(
    "verb", ["validate", "render", "run", "convert", "controller --config", "manifests --values"]
)
def test_unreadable_file_as_root_without_file_capabilities(verb: str, tmp_path: Path) -> None:
    if not is_root():
        pytest.skip("not root: test_hostile_input_in_process runs the unreadable case")
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): no file is unreadable")
    argv, unreadable, _ = _verbs(str(tmp_path / "unused.yaml"))[verb]
    path = str(UNREADABLE.make(tmp_path))
    code, output, elapsed = _trainer(argv(path), tmp_path, prefix=WITHOUT_FILE_CAPABILITIES)
    _assert_clean(output, output, code, unreadable, path)
    assert "ermission denied" in output or "is not readable" in output, output
    assert elapsed < TIME_BOUND


def _state_file_checks_present() -> bool:
    return importlib.util.find_spec("trainer.local.apiserver.statefile") is not None


@pytest.mark.skipif(
    not _state_file_checks_present(),
    reason="the state file's own checks (trainer/local/apiserver/statefile.py) are not here",
)
@pytest.mark.parametrize("verb", ["up", "apiserver"])
def test_garbage_state_file_is_one_line_and_exit_2(verb: str, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    state.write_bytes(b"this is not a SQLite database\x00\xff" * 100)
    argv = [verb, "--state-file", str(state), "--kubeconfig", str(tmp_path / "kc"), "--port", "0"]
    code, output, elapsed = _trainer(argv, tmp_path, timeout=60)
    _assert_clean(output, output, code, 2, str(state))
    assert elapsed < 60


# --- trainer convert: every field of a v1 job replaced by junk ------------------------------

JUNK: list[object] = [None, 5, "x", [1], {"a": 1}, True, -1]


def _paths(value: object, prefix: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def test_convert_survives_junk_in_every_field_of_a_v1_job() -> None:
    source = ROOT / "tests/golden/convert/pytorch-master-3-workers/v1.yaml"
    base = yaml.safe_load(source.read_text())
    runs = 0
    for path in _paths(base):
        for junk in JUNK:
            job = copy.deepcopy(base)
            target = job
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = junk
            argv = ["convert", "--runtime-mode", "own", "-f", "-"]  # no builtin comparison: fast
            result = runner.invoke(app, argv, input=yaml.safe_dump(job))
            runs += 1
            output = result.stdout + result.stderr
            where = f"{'.'.join(map(str, path))} = {junk!r}"
            assert result.exit_code in (0, 1), f"{where}: exit {result.exit_code}\n{output}"
            assert "Traceback" not in output and "internal error" not in output, where
            if result.exit_code == 1:
                assert len(_error_lines(result.stderr)) == 1, f"{where}\n{result.stderr}"
    assert runs > 300, runs
    print(f"{runs} junk v1 jobs converted or refused")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "-f", "/dev/zero"],
        ["convert", "-f", "/dev/zero"],
        ["controller", "--config", "/dev/zero"],
        ["controller", "--kubeconfig", "/dev/zero"],
        ["manifests", "--values", "/dev/zero"],
        ["render", "--feature-gates", "TrainJobStatus=true", "--status-server-ca", "/dev/zero"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_endless_files_are_read_only_up_to_the_bound(argv: list[str], tmp_path: Path) -> None:
    if argv[0] == "render":
        good = tmp_path / "good.yaml"
        good.write_text(GOOD_TRAINJOB)
        argv = [*argv, "-f", str(good)]
    started = time.monotonic()
    result = runner.invoke(app, argv, env={"KUBECONFIG": str(tmp_path / "none")})
    output = result.stdout + result.stderr
    expected = 1 if argv[0] == "convert" else 2
    _assert_clean(output, result.stderr, result.exit_code, expected, "/dev/zero")
    assert "limit" in output
    assert time.monotonic() - started < TIME_BOUND
