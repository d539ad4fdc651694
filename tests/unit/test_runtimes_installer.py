"""The Helm chart's runtimes installer, as data (trainer/deploy/installer.py) and as the
``trainer runtimes`` command's answers to a bad file (trainer/cli/runtimes.py). Applying to an
API server: tests/deploy/test_chart_lifecycle.py and tests/cluster/test_helm.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trainer.cli import runtimes as runtimes_cli
from trainer.cli.main import app
from trainer.deploy.installer import (
    INSTALLER,
    MANAGED_BY,
    RuntimesFileError,
    plan,
    runtimes_to_apply,
)
from trainer.deploy.render import runtime_objects
from trainer.machinery.requests import APIError


def runtime(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {},
    }


def test_every_built_in_runtime_is_labelled_and_left_unchanged_otherwise() -> None:
    builtin = runtime_objects()
    applied = runtimes_to_apply([None, *builtin], "runtimes.yaml")
    assert [r["metadata"]["name"] for r in applied] == [r["metadata"]["name"] for r in builtin]
    for before, after in zip(builtin, applied, strict=True):
        assert after["metadata"]["labels"] == {
            **before["metadata"]["labels"],
            MANAGED_BY: INSTALLER,
        }
        assert after["spec"] == before["spec"]
        assert MANAGED_BY not in before["metadata"]["labels"]  # a copy, not the input


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("text", "document 1: expected a mapping, found str"),
        ({**runtime("a"), "kind": "TrainingRuntime"}, "document 1: apiVersion/kind:"),
        ({**runtime("a"), "metadata": {}}, "document 1: metadata.name: required"),
        ({**runtime("a"), "metadata": None}, "document 1: metadata: required"),
        (
            {**runtime("a"), "metadata": {"name": "a", "namespace": "x"}},
            "document 1: metadata.namespace: a ClusterTrainingRuntime has none",
        ),
    ],
)
def test_a_document_that_is_not_a_cluster_runtime_is_refused_by_number(
    doc: Any, message: str
) -> None:
    with pytest.raises(RuntimesFileError, match=r"^f\.yaml: ") as err:
        runtimes_to_apply([doc], "f.yaml")
    assert message in str(err.value)


def test_a_name_given_twice_is_refused_naming_both_documents() -> None:
    with pytest.raises(
        RuntimesFileError, match=r"document 3: metadata\.name: 'a' is also document 1"
    ):
        runtimes_to_apply([runtime("a"), runtime("b"), runtime("a")], "f.yaml")


def test_prune_deletes_only_what_the_installer_labelled_and_the_file_no_longer_holds() -> None:
    wanted = runtimes_to_apply([runtime("kept")], "f.yaml")
    owned = [
        runtime("kept", **{MANAGED_BY: INSTALLER}),
        runtime("switched-off", **{MANAGED_BY: INSTALLER}),
        runtime("someone-elses", **{MANAGED_BY: "platform-team"}),
    ]
    assert plan(wanted, owned, prune=True).prune == ["switched-off"]
    assert plan(wanted, owned, prune=False).prune == []
    assert plan([], owned, prune=True).prune == ["kept", "switched-off"]


def test_the_command_refuses_a_bad_file_before_sending_anything(tmp_path: Path) -> None:
    bad = tmp_path / "runtimes.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    # No kubeconfig anywhere: had the command tried to reach a cluster it would say so instead.
    env = {"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    done = CliRunner().invoke(app, ["runtimes", "install", "--file", str(bad)], env=env)
    assert done.exit_code == 2
    assert f"error: {bad}: document 1: apiVersion/kind: 'v1'/'ConfigMap'" in done.output
    missing = CliRunner().invoke(app, ["runtimes", "install", "-f", str(tmp_path / "no")], env=env)
    assert missing.exit_code == 2 and "error:" in missing.output


def test_without_a_cluster_the_command_says_so_in_one_line(tmp_path: Path) -> None:
    good = tmp_path / "runtimes.yaml"
    good.write_text("")
    env = {"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    done = CliRunner().invoke(app, ["runtimes", "uninstall"], env=env)
    assert done.exit_code == 1
    assert done.output.startswith("error: ") and done.output.count("\n") == 1, done.output


class _Unserved:
    """A Kube whose ClusterTrainingRuntime list answers as kube-apiserver does while the CRD
    is not established: a plain 404, then a 404 Status (another CRD of the group is), a 429
    while its storage initialises, then the list."""

    def __init__(self) -> None:
        self.answers: list[Any] = [
            APIError(404, "Not Found", "404 page not found", "404 page not found"),
            APIError(404, "NotFound", "the server could not find the requested resource", {}),
            # A CRD deleted and created again: its storage answers 429 for a moment.
            APIError(429, "TooManyRequests", "storage is (re)initializing", {}),
            ([runtime("a")], "7"),
        ]

    async def list(self, *_: Any, **__: Any) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_installer_waits_until_the_runtimes_api_is_served_and_ready(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runtimes_cli, "POLL", 0.0)
    kube = _Unserved()
    owned = asyncio.run(runtimes_cli._owned(kube))  # type: ignore[arg-type]
    assert [o["metadata"]["name"] for o in owned] == ["a"] and kube.answers == []
    assert capsys.readouterr().out.splitlines() == [
        "waiting for the API server to serve clustertrainingruntimes",
        "waiting for the API server to take requests "
        "(429 TooManyRequests: storage is (re)initializing)",
    ]


def test_a_refusal_is_waited_out_briefly_then_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runtimes_cli, "POLL", 0.0)
    refused = APIError(403, "Forbidden", "cannot list resource clustertrainingruntimes", {})
    kube = _Unserved()
    kube.answers = [refused, ([], "1")]
    assert asyncio.run(runtimes_cli._owned(kube)) == []  # type: ignore[arg-type]
    assert "waiting for the ServiceAccount's permissions" in capsys.readouterr().out
    # A binding that never comes: the refusal is the command's answer once the wait is over.
    monkeypatch.setattr(runtimes_cli, "PERMITTED_WITHIN", 0.0)
    kube.answers = [refused]
    with pytest.raises(APIError, match="403 Forbidden"):
        asyncio.run(runtimes_cli._owned(kube))  # type: ignore[arg-type]


def test_an_unreachable_server_is_said_to_be_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No answer for the whole wait: one line saying the server cannot be reached, exit 1."""
    monkeypatch.setattr(runtimes_cli, "POLL", 0.0)
    monkeypatch.setattr(runtimes_cli, "SERVED_WITHIN", 0.0)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    done = CliRunner().invoke(app, ["runtimes", "uninstall", "--kubeconfig", str(kubeconfig)])
    assert done.exit_code == 1, done.output
    assert done.output.startswith("error: cannot reach the API server"), done.output
    assert done.output.count("\n") == 1, done.output
