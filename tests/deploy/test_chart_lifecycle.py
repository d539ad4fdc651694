"""The Helm chart's lifecycle on a cluster without the Trainer CRDs: the local plane started
with ``trainer up --without-controller`` (docs/local-plane.md, "Without the built-in
controller"), which runs Jobs and their pods as a cluster does. One ``helm install --set
runtimes.defaultEnabled=true`` creates the CRDs and the controller, and its post-install hook
Job (``trainer runtimes install`` in the controller's image, with its ServiceAccount's token
and RBAC) applies every built-in runtime; an upgrade that switches all but one off deletes
the others; ``helm uninstall``'s pre-delete hook deletes the last, and nothing of ours is left
but the CRDs. The cluster tier does the same on kube-apiserver (tests/cluster/test_helm.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.chart import CHART, NOT_BUILT, ROOT, helm_binary, run_helm

pytestmark = pytest.mark.slow

READY = "no controller or webhook of its own"
INSTALLER = "trainer.kubeflow.org/managed-by=runtimes-installer"
# The hooks are the subject here: the plane stores the release's Deployment and runs no
# Deployment controller (docs/local-plane.md, "What the local plane is for"), and a node
# selector no node matches keeps its pods off this host all the same. The running Deployment
# is the cluster tier's (tests/cluster/test_helm.py, tests/cluster/test_node_agent.py).
PENDING = ["--set-string", "manager.nodeSelector.testbed\\.kubeflow\\.org/nowhere=true"]


@pytest.fixture(scope="module")
def helm() -> Path:
    found = helm_binary()
    if found is None:
        pytest.skip(NOT_BUILT)
    return found


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Path]:
    """``trainer up --without-controller``: its kubeconfig once it serves."""
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.cli.main", "up", "--without-controller",
         "--no-dashboard", "--kubeconfig", str(kubeconfig)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if READY in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(60) and proc.poll() is None, "".join(lines)
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(10)
        print("".join(lines[-40:]))


def kubectl(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def installed(kubeconfig: Path) -> set[str]:
    """The ClusterTrainingRuntimes the installer labelled."""
    out = kubectl(kubeconfig, "get", "clustertrainingruntimes", "-l", INSTALLER, "-o", "json")
    return {o["metadata"]["name"] for o in json.loads(out)["items"]}


def test_install_upgrade_uninstall_on_a_cluster_without_the_crds(helm: Path, plane: Path) -> None:
    def helm_ok(*args: str) -> str:
        done = run_helm(helm, *args, "-n", "kubeflow-system", kubeconfig=plane, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    chart = str(CHART)
    out = helm_ok("install", "kubeflow-trainer", chart, "--create-namespace",
                  "--set", "runtimes.defaultEnabled=true", *PENDING)  # fmt: skip
    assert "STATUS: deployed" in out and "WARNING" not in out
    every = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in ROOT.glob("runtimes/*")}
    assert "Built-in ClusterTrainingRuntimes, applied by the hook Job" in out
    assert installed(plane) == every
    # Helm holds no runtime as an object of the release, and the succeeded hook Job is gone.
    manifest = helm_ok("get", "manifest", "kubeflow-trainer")
    kinds = {o["kind"] for o in yaml.safe_load_all(manifest) if o}
    assert "ClusterTrainingRuntime" not in kinds and "CustomResourceDefinition" in kinds
    assert "runtimes-installer" not in kubectl(plane, "get", "jobs", "-n", "kubeflow-system")

    out = helm_ok("upgrade", "kubeflow-trainer", chart, "--reuse-values",
                  "--set", "runtimes.defaultEnabled=false",
                  "--set", "runtimes.torchDistributed.enabled=true")  # fmt: skip
    assert "REVISION: 2" in out
    assert installed(plane) == {"torch-distributed"}

    out = helm_ok("uninstall", "kubeflow-trainer")
    assert "kept due to the resource policy" in out
    assert run_helm(helm, "list", "-A", "-q", kubeconfig=plane).stdout.strip() == ""
    left = kubectl(
        plane, "get", "-o", "name",
        "clustertrainingruntimes,crd,clusterroles,clusterrolebindings,"
        "mutatingwebhookconfigurations,validatingwebhookconfigurations",
    ).split()  # fmt: skip
    assert sorted(n for n in left if "trainer" in n) == [
        "customresourcedefinition.apiextensions.k8s.io/" + crd
        for crd in (
            "clustertrainingruntimes.trainer.kubeflow.org",
            "trainingruntimes.trainer.kubeflow.org",
            "trainjobs.trainer.kubeflow.org",
        )
    ]
    namespaced = kubectl(
        plane, "get", "-n", "kubeflow-system", "-o", "name",
        "deploy,svc,cm,sa,secret,role,rolebinding,pdb,jobs",
    ).split()  # fmt: skip
    assert [n for n in namespaced if "trainer" in n] == []
