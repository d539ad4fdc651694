"""Every runtime and TrainJob of examples/ and of upstream's release, on real Kubernetes: the
admission verdict is the one `trainer validate` (the local plane's rules) gives, and the JobSet
our controller writes (accepted by the real JobSet webhook) and its side objects (runtime
snapshot, MPI Secret and hostfile) hold every field `trainer render` says, apart from fields
the servers set (docs/testbed.md, "What the cluster tier checks").
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import ROOT, kubectl_json, render

SHARED = ROOT.parent / "shared/upstream-release"
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yaml"))
UPSTREAM = (
    sorted((SHARED / "runtimes").glob("*.yaml")) + sorted((SHARED / "examples").glob("*.yaml"))
    if SHARED.is_dir()
    else []
)
# Set by the servers, never by the controller.
SERVER_SET = {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def trainjobs(path: Path) -> list[str]:
    return [d["metadata"]["name"] for d in documents(path) if d.get("kind") == "TrainJob"]


def local_verdict(text: str) -> bool:
    # Without -r: the built-in runtimes, which are manifests/base/runtimes (the bed installs them).
    argv = [sys.executable, "-m", "trainer.cli.main", "validate", "-f", "-"]
    done = subprocess.run(argv, input=text, capture_output=True, text=True, check=False, cwd=ROOT)
    return done.returncode == 0


def as_created(path: Path) -> str:
    """The file's objects as new objects: upstream's ClusterTrainingRuntimes share their names
    with the installed ones, and an apply would be an update (where, on both servers, the
    template's immutable fields refuse upstream's differences); they get an ``upstream-`` name."""
    docs = documents(path)
    if path.is_relative_to(SHARED / "runtimes"):
        for d in docs:
            d["metadata"]["name"] = "upstream-" + d["metadata"]["name"]
    return yaml.safe_dump_all(docs)


def missing(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` lacks or differs from what ``expected`` holds (fields only in ``actual``
    are the servers' defaults and allowed)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected a mapping, got {actual!r}"]
        found: list[str] = []
        for key, value in expected.items():
            if path == ".metadata" and key in SERVER_SET:
                continue
            if key not in actual:
                if value in (None, {}, [], ""):
                    continue  # an empty value the API server drops
                found.append(f"{path}.{key}: missing (expected {value!r})"[:300])
            else:
                found += missing(value, actual[key], f"{path}.{key}")
        return found
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {len(expected)} items, got {actual!r}"[:300]]
        return [
            m
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for m in missing(e, a, f"{path}[{i}]")
        ]
    if expected != actual and str(expected) != str(actual):
        return [f"{path}: expected {expected!r}, got {actual!r}"[:300]]
    return []


def wait_jobset(bed: Any, namespace: str, name: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        done = bed.kubectl("get", "jobset", name, "-n", namespace, "-o", "yaml", check=False)
        if done.returncode == 0:
            found: dict[str, Any] = yaml.safe_load(done.stdout)
            return found
        if time.monotonic() > deadline:
            status = kubectl_json(bed, "get", "trainjob", name, "-n", namespace).get("status")
            pytest.fail(
                f"no JobSet {namespace}/{name} after {timeout} s; TrainJob status: {status}"
            )
        time.sleep(0.2)  # polling the API server for the controller's write


def wait_build_failed(bed: Any, namespace: str, name: str, text: str) -> None:
    done = bed.kubectl(
        "wait", "trainjob", name, "-n", namespace, "--for=condition=BuildFailed", "--timeout=30s",
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    status = kubectl_json(bed, "get", "trainjob", name, "-n", namespace)["status"]
    failed = next(c for c in status["conditions"] if c["type"] == "BuildFailed")
    assert failed["reason"] == "ApplyFailed" and text in failed["message"], failed


@pytest.mark.parametrize(
    "path", EXAMPLES + UPSTREAM, ids=lambda p: str(p.relative_to(p.parents[1]))
)
def test_example_on_real_kubernetes(bed: Any, namespace: str, path: Path) -> None:
    text = as_created(path)
    expected_ok = local_verdict(text)
    applied = bed.kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", input=text, check=False
    )
    verdict = "accepts" if expected_ok else "refuses"
    answer = applied.stderr or applied.stdout
    assert (applied.returncode == 0) == expected_ok, (
        f"trainer validate {verdict}; cluster: {answer}"
    )
    if not expected_ok or not trainjobs(path):
        return
    if "volcano" in path.name:
        # The bed runs no Volcano: the TrainJob waits, saying what is missing.
        for name in trainjobs(path):
            wait_build_failed(bed, namespace, name, "PodGroup is not served by this cluster")
        return
    rendered = render([path], namespace, [])
    for name in trainjobs(path):
        wait_jobset(bed, namespace, name)
    problems: list[str] = []
    for want in rendered:
        kind, name = want["kind"], want["metadata"]["name"]
        got = kubectl_json(bed, "get", kind.lower(), name, "-n", namespace)
        want["metadata"].pop("ownerReferences", None)  # the TrainJob's uid is the server's
        if kind == "ConfigMap" and name.endswith("-runtime-snapshot"):
            # The runtime as the controller read it: on the cluster with the labels the
            # runtimes overlay adds and the fields the server sets, so its spec is compared.
            snapshot = yaml.safe_load(got["data"]["runtime"])
            expected = yaml.safe_load(want.pop("data")["runtime"])
            problems += [f"{name}: {p}" for p in missing(expected["spec"], snapshot["spec"])]
        if kind == "Secret":
            # SSH keys are made afresh for every build: the same keys, other values.
            assert sorted(got.get("data") or {}) == sorted(want.get("data") or {}), name
            want.pop("data", None)
        problems += [f"{kind} {name}: {p}" for p in missing(want, got)]
    assert not problems, "the cluster's objects differ from trainer render:\n" + "\n".join(problems)
