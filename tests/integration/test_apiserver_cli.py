"""``trainer apiserver`` as a user runs it: foreground process, kubeconfig, clean stop on
SIGTERM, and a state file that keeps objects across restarts."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

KUBECTL = shutil.which("kubectl")


def start(tmp_path: Path, state: Path) -> tuple[subprocess.Popen[str], Path]:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer.cli.main",
            "apiserver",
            "--kubeconfig",
            str(kubeconfig),
            "--state-file",
            str(state),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    # The command prints its address, then the kubeconfig line, once it is serving.
    for line in proc.stdout:
        if line.startswith("kubeconfig written"):
            break
    else:
        raise AssertionError("apiserver exited before serving")
    return proc, kubeconfig


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=10)


def kubectl(kubeconfig: Path, *args: str) -> str:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_state_survives_a_restart_and_sigterm_stops_cleanly(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    proc, kubeconfig = start(tmp_path, state)
    try:
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
        kubectl(kubeconfig, "create", "configmap", "kept", "--from-literal=k=v")
        before = kubectl(kubeconfig, "get", "configmap", "kept", "-o", "yaml")
    finally:
        assert stop(proc) == 0
    proc, kubeconfig = start(tmp_path, state)
    try:
        after = yaml.safe_load(kubectl(kubeconfig, "get", "configmap", "kept", "-o", "yaml"))
        assert after["data"] == {"k": "v"}
        assert after["metadata"]["uid"] == yaml.safe_load(before)["metadata"]["uid"]
        crds = kubectl(kubeconfig, "get", "crd", "-o", "name")
        assert (
            "customresourcedefinition.apiextensions.k8s.io/trainjobs.trainer.kubeflow.org" in crds
        )
        kubectl(kubeconfig, "create", "configmap", "second")
        rvs = [
            int(
                yaml.safe_load(kubectl(kubeconfig, "get", "cm", n, "-o", "yaml"))["metadata"][
                    "resourceVersion"
                ]
            )
            for n in ("kept", "second")
        ]
        assert rvs[1] > rvs[0]  # the resourceVersion clock resumed after the stored versions
    finally:
        assert stop(proc) == 0
