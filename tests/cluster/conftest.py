"""The cluster tier: our product on real Kubernetes programs (docs/testbed.md).

``make cluster-test`` runs this folder in the bed's own network namespace; one bed (etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, KWOK, JobSet v0.12.0 and our install)
serves the whole session, and a second cluster of etcd and kube-apiserver alone with our CRDs
(``crd_apiserver``) the tests of what the API server decides. Without Go the tier is skipped
with that reason; with Go, a bed that fails to build or start fails the tier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack/testbed"))

import bed as beds  # noqa: E402
import bins  # noqa: E402
import netns  # noqa: E402
from install import install_parts  # noqa: E402

from tests.cluster.nodeagent import Agent, running_agent  # noqa: E402


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_helm.py last (after test_side_by_side.py): it moves the bed's install to a Helm
    release and uninstalls it, and puts the kustomize install back (about 7 s) only for a later
    test that uses the bed. The sort is stable: every other test keeps its place."""
    items.sort(key=lambda item: item.path.name == "test_helm.py")


def _skip_reason() -> str | None:
    if bins.go_binary() is None:
        return "Go is not installed: the cluster tier builds kube-apiserver and the rest with it"
    if not netns.inside():
        return "not in the bed's network namespace: run it with `make cluster-test`"
    return None


@pytest.fixture(scope="session")
def bed() -> Iterator[beds.Bed]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    keep = bool(os.environ.get("TRAINER_TESTBED_KEEP"))
    running = beds.start_bed(nodes=4, gpus_per_node=8, say=lambda line: print(f"testbed: {line}"))
    try:
        install_parts(running, ("jobset", "trainer"), lambda line: print(f"testbed: {line}"))
        yield running
        forbidden = forbidden_lines(running.root / "logs")
        assert not forbidden, "the controller was refused by the manifests' RBAC:\n" + "\n".join(
            forbidden
        )
    finally:
        running.stop(keep=keep)


def forbidden_lines(logs: Path) -> list[str]:
    """Every RBAC refusal our controller's replicas were answered (their ServiceAccount has
    exactly the manifests' RBAC: any such 403 is a missing rule). RBAC's message says who
    cannot do what; other 403s (NamespaceLifecycle's, in a namespace being deleted) are not
    about permissions."""
    found: list[str] = []
    for log in sorted(logs.glob("trainer*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "403" in line and "orbidden" in line and " cannot " in line:
                found.append(f"{log.name}: {line[:400]}")
    return found


@pytest.fixture(scope="session")
def crd_apiserver() -> Iterator[beds.Bed]:
    """etcd and kube-apiserver alone, with our CRDs applied as docs/install.md says: what
    kube-apiserver itself decides about our objects, without the webhook or controller of
    ``bed`` (a second, small cluster beside it)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    running = beds.start_api_only(say=lambda line: print(f"testbed: {line}"))
    try:
        crds = sorted((ROOT / "manifests/base/crds").glob("trainer.kubeflow.org_*.yaml"))
        files = [arg for path in crds for arg in ("-f", str(path))]
        running.kubectl("apply", "--server-side", *files)
        running.wait_crds_established()
        yield running
    finally:
        running.stop(keep=bool(os.environ.get("TRAINER_TESTBED_KEEP")))


@pytest.fixture(scope="session")
def agent(bed: beds.Bed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """Our node agent as Node agent-0 (tests/cluster/nodeagent.py), from the first test that
    asks for it to the session's end."""
    with running_agent(bed, tmp_path_factory.mktemp("node-agent")) as running:
        yield running


@pytest.fixture
def namespace(bed: beds.Bed) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    bed.kubectl("create", "namespace", name)
    yield name
    bed.kubectl("delete", "namespace", name, "--wait=false", check=False)


def kubectl_json(bed: beds.Bed, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(bed.kubectl(*args, "-o", "json").stdout)
    return data


def render(files: list[Path], namespace: str, runtimes: list[Path]) -> list[dict[str, Any]]:
    """What `trainer render` says the controller applies for these files."""
    argv = [sys.executable, "-m", "trainer.cli.main", "render", "-n", namespace]
    for f in files:
        argv += ["-f", str(f)]
    for r in runtimes:
        argv += ["-r", str(r)]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]
