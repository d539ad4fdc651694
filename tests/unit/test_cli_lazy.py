"""``trainer`` imports a command's module only when that command runs (trainer/cli/lazy.py)."""

from __future__ import annotations

import subprocess
import sys

import typer
from typer.testing import CliRunner

from trainer.cli.main import COMMANDS, app

PROBE = """
import sys
from typer.testing import CliRunner
from trainer.cli.main import app
result = CliRunner().invoke(app, sys.argv[1:])
heavy = sorted(
    m for m in ("trainer.local.apiserver", "trainer.controller.manager", "kubernetes_asyncio",
                "webhooks.app", "pyarrow")
    if m in sys.modules
)
print(result.exit_code, ",".join(heavy))
"""


def _run(*argv: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_version_and_a_data_cache_help_import_no_server_or_client() -> None:
    assert _run("version") == "0"
    assert _run("data-cache", "serve", "--help") == "0"


def test_running_the_apiserver_help_imports_what_it_needs() -> None:
    code, heavy = _run("apiserver", "--help").split(" ")
    assert code == "0"
    assert "trainer.local.apiserver" in heavy.split(",")


def test_help_lists_every_command_and_each_one_loads() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    group = typer.main.get_command(app)
    for name in COMMANDS:
        assert name in result.stdout
        assert group.commands[name].name == name  # type: ignore[attr-defined]


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.output
