"""The ``trainer`` command never ends in a traceback: an unexpected exception is one line and
exit 1, with the traceback only on request (trainer/cli/guard.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainer.cli import validate as validate_cmd
from trainer.cli.main import app

runner = CliRunner()
JOB = (
    "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: j}\n"
    "spec: {runtimeRef: {name: torch-distributed}}\n"
)


@pytest.fixture
def broken_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(validate_cmd, "check_documents", boom)


@pytest.mark.usefixtures("broken_validate")
def test_an_unexpected_exception_is_one_line_and_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "j.yaml"
    path.write_text(JOB)
    result = runner.invoke(app, ["validate", "-f", str(path)], env={"TRAINER_DEBUG": ""})
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.stderr.splitlines() == [
        "error: internal error: RuntimeError: boom; this is a bug, please report it "
        "(TRAINER_DEBUG=1 or -v prints the traceback)"
    ]


@pytest.mark.usefixtures("broken_validate")
def test_the_traceback_is_printed_on_request(tmp_path: Path) -> None:
    path = tmp_path / "j.yaml"
    path.write_text(JOB)
    result = runner.invoke(app, ["validate", "-f", str(path)], env={"TRAINER_DEBUG": "1"})
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith("error: internal error:")


def test_recursion_errors_say_what_was_too_deep(monkeypatch: pytest.MonkeyPatch) -> None:
    def deep(*_args: object, **_kwargs: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(validate_cmd, "read_or_exit", deep)
    result = runner.invoke(app, ["validate", "-f", "x"])
    assert result.exit_code == 1
    assert "too deeply nested or too large" in result.stderr
    assert "Traceback" not in result.output


def test_expected_exits_pass_through(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "-f", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "internal error" not in result.output
    usage = runner.invoke(app, ["validate", "--output", "xml", "-f", "x"])
    assert usage.exit_code == 2 and "internal error" not in usage.output


@pytest.mark.usefixtures("broken_validate")
def test_verbose_flag_prints_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.cli import guard  # noqa: PLC0415

    ctx_args = ["-f", "x", "-v"]
    assert guard._verbose(type("Ctx", (), {"args": ctx_args})())
    monkeypatch.delenv("TRAINER_DEBUG", raising=False)
    assert not guard._verbose(type("Ctx", (), {"args": ["-f", "x"]})())
