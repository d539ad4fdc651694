"""`trainer up --without ROLE`: the executor's roles left to the real programs
(docs/local-plane.md, "Running the real programs against the plane")."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trainer.cli.main import app
from trainer.local.executor.roles import ROLES, RoleError, parse_roles


def test_roles_repeated_or_comma_separated() -> None:
    assert parse_roles(["kubelet", "scheduler,job-controller", " jobset-controller "]) == set(ROLES)
    assert parse_roles([]) == frozenset()


def test_an_unknown_role_names_those_there_are() -> None:
    with pytest.raises(RoleError) as err:
        parse_roles(["scheduler,kube-proxy"])
    assert str(err.value) == (
        "unknown role 'kube-proxy': the executor's roles are "
        "jobset-controller, job-controller, scheduler, kubelet"
    )


def test_up_refuses_an_unknown_role_before_starting_anything() -> None:
    result = CliRunner().invoke(app, ["up", "--without", "jobset", "--no-dashboard"])
    assert result.exit_code == 2
    assert "error: --without: unknown role 'jobset'" in result.output


def test_up_help_lists_the_roles() -> None:
    result = CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "200"})
    assert "--without" in result.output
    assert "jobset-controller, job-controller, scheduler, kubelet" in result.output
