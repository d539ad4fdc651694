"""``trainer controller --zap-log-level``: ``info`` (the manifests' value) logs at info, not
debug, and no level lets kubernetes_asyncio log response bodies (a Secret's keys among them)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainer.cli.main import app

runner = CliRunner()
REST = "kubernetes_asyncio.client.rest"


@pytest.fixture(autouse=True)
def restore_levels() -> Iterator[None]:
    root, rest = logging.getLogger(), logging.getLogger(REST)
    saved = (root.level, rest.level, list(root.handlers))
    yield
    root.setLevel(saved[0])
    rest.setLevel(saved[1])
    root.handlers[:] = saved[2]


@pytest.mark.parametrize(
    ("level", "root_level"),
    [("info", logging.INFO), ("0", logging.INFO), ("debug", logging.DEBUG), ("2", logging.DEBUG)],
)
def test_the_log_level_is_the_one_asked_for(tmp_path: Path, level: str, root_level: int) -> None:
    missing = tmp_path / "no-kubeconfig"
    result = runner.invoke(
        app, ["controller", "--kubeconfig", str(missing), f"--zap-log-level={level}"]
    )
    assert result.exit_code == 2  # stops at the kubeconfig, after logging is set up
    assert logging.getLogger().level == root_level
    assert logging.getLogger(REST).level == logging.INFO


def test_a_bad_level_is_one_line_naming_the_option(tmp_path: Path) -> None:
    result = runner.invoke(app, ["controller", "--zap-log-level=loud"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --zap-log-level: invalid log level 'loud'")
