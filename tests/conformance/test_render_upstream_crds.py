"""``trainer render`` output is accepted by ``kubectl apply --server-side --dry-run=server``
against an API server loaded with the upstream CRDs (Kubeflow Trainer v2.3.0, JobSet v0.12.0).

One local API server, with nothing installed but the upstream CRD files read from
``../shared/upstream-crds/`` (the repository root's parent; skipped, with the reason, where
that folder is absent). Every example under ``examples/`` and a TrainJob on every built-in
runtime are rendered in process, then applied in one kubectl call as one stream. The built-in
runtimes' TrainJobs carry strings a YAML 1.1 reader would retype (``y``, ``no``, ``1e3``, ...)
in command, args and env: the objects the server answers with (``-o json``) must hold them as
the same strings. The inputs of the golden render cases (Flux, MPI, TensorFlow, PaddlePaddle,
runtimePatches, initializers, ...) are applied the same way, less their PodGroups: the
scheduler plugins' and Volcano's CRDs are not among the upstream files. The same server then
enforces JobSet's rule on volume-claim template namespaces (a CEL rule reading
``t.metadata.namespace``, a reserved word).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainer.cli.main import app
from trainer.runtime.builtin import builtin_runtimes

from .conftest import KUBECTL, SKIP_REASON, Kubectl, kubectl_server

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_CRDS = ROOT.parent / "shared" / "upstream-crds"
NAMESPACE = "render-check"
RETYPED = ["y", "N", "no", "on", "1e3", "0o17", "0X1F", "1_000", ".5e3", "1.2.3", "~", "=", "<<"]
EXAMPLES = sorted(p for p in (ROOT / "examples").rglob("*.yaml"))
GOLDEN_INPUTS = sorted((ROOT / "tests" / "golden" / "cases").glob("*/input.yaml"))
INSTALLED_GROUPS = ("v1", "jobset.x-k8s.io/")

pytestmark = pytest.mark.skipif(KUBECTL is None, reason=SKIP_REASON)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Kubectl]:
    """A server with exactly the upstream Trainer and JobSet CRDs, and the namespace."""
    if not UPSTREAM_CRDS.is_dir():
        pytest.skip(f"the upstream CRDs are not at {UPSTREAM_CRDS} (../shared/upstream-crds)")
    files = sorted(UPSTREAM_CRDS.glob("*.yaml"))
    assert len(files) == 4, files
    with kubectl_server("render-upstream-") as kubectl:
        stream = "---\n".join(f.read_text() for f in files)
        applied = kubectl.run("apply", "--server-side", "-f", "-", stdin=stream, timeout=60)
        assert applied.stdout.count("serverside-applied") == 4, applied.stdout
        namespaces = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            for name in (NAMESPACE, "analytics", "hpc", "team-a", "ml", "research")
        ]
        kubectl.run(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": namespaces}),
        )
        yield kubectl


def render(*args: str, stdin: str | None = None) -> str:
    result = CliRunner().invoke(app, ["render", "-n", NAMESPACE, *args], input=stdin)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def builtin_trainjob(runtime: str) -> dict[str, Any]:
    """A TrainJob on a built-in runtime whose command, args and env are strings a YAML 1.1
    reader would take for booleans, numbers or null."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "rt-" + re.sub(r"[^a-z0-9-]", "-", runtime)},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {
                "command": ["sh", "-c", "echo", *RETYPED],
                "args": RETYPED,
                "env": [{"name": f"VALUE_{i}", "value": v} for i, v in enumerate(RETYPED)],
            },
        },
    }


def rendered_stream() -> tuple[str, int]:
    """Every example's and built-in runtime's render, as one stream, and how many objects."""
    parts = [render("-f", str(path)) for path in EXAMPLES]
    jobs = [builtin_trainjob(name) for name in sorted(builtin_runtimes())]
    parts += [render("-f", "-", stdin=yaml.safe_dump(job)) for job in jobs]
    stream = "---\n".join(p for p in parts if p)
    return stream, sum(1 for d in yaml.safe_load_all(stream) if d)


def test_every_render_is_accepted_by_kubectl_against_the_upstream_crds(
    upstream: Kubectl,
) -> None:
    assert len(EXAMPLES) >= 8
    stream, count = rendered_stream()
    assert count >= 2 * (len(EXAMPLES) + len(builtin_runtimes()))
    applied = upstream.run(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-n",
        NAMESPACE,
        "-o",
        "json",
        "-f",
        "-",
        stdin=stream,
        timeout=120,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr == ""
    answered = json.loads(applied.stdout)
    items = answered["items"] if answered.get("kind") == "List" else [answered]
    assert len(items) == count
    jobsets = {o["metadata"]["name"]: o for o in items if o["kind"] == "JobSet"}
    for name in builtin_runtimes():
        jobset = jobsets["rt-" + re.sub(r"[^a-z0-9-]", "-", name)]
        containers = [
            c
            for rjob in jobset["spec"]["replicatedJobs"]
            for c in rjob["template"]["spec"]["template"]["spec"]["containers"]
            if any(e["name"] == "VALUE_0" for e in c.get("env") or [])
        ]
        assert containers, f"{name}: no container got the TrainJob's env"
        for container in containers:
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert [env[f"VALUE_{i}"] for i in range(len(RETYPED))] == RETYPED, name
        assert any(c.get("args") == RETYPED for c in containers), name
        assert any(c["command"][3:] == RETYPED for c in containers), name


def test_the_golden_cases_render_objects_kubectl_accepts(upstream: Kubectl) -> None:
    assert len(GOLDEN_INPUTS) >= 20
    objects = [
        doc
        for path in GOLDEN_INPUTS
        for doc in yaml.safe_load_all(render("-f", str(path)))
        if doc and doc["apiVersion"].startswith(INSTALLED_GROUPS)
    ]
    kinds = {o["kind"] for o in objects}
    assert kinds == {"ConfigMap", "Secret", "JobSet"}, kinds
    applied = upstream.run(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        timeout=120,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("serverside-applied (server dry run)") == len(objects)


def test_jobset_refuses_a_volume_claim_template_namespace(upstream: Kubectl) -> None:
    jobset = next(
        d
        for d in yaml.safe_load_all(render("-f", str(ROOT / "examples/multi-node.yaml")))
        if d and d["kind"] == "JobSet"
    )
    template = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    claims: dict[str, Any] = {"templates": [template], "retentionPolicy": {"whenDeleted": "Delete"}}
    jobset["spec"]["volumeClaimPolicies"] = [claims]
    for job in jobset["spec"]["replicatedJobs"]:  # JobSet wants every claim mounted
        for container in job["template"]["spec"]["template"]["spec"]["containers"]:
            container.setdefault("volumeMounts", []).append({"name": "data", "mountPath": "/d"})
    accepted = upstream.run(
        "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=json.dumps(jobset)
    )
    assert "serverside-applied (server dry run)" in accepted.stdout
    placed = copy.deepcopy(jobset)
    placed["spec"]["volumeClaimPolicies"][0]["templates"][0]["metadata"]["namespace"] = "other"
    refused = upstream.run(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        stdin=json.dumps(placed),
        check=False,
    )
    assert refused.returncode == 1
    assert "namespace cannot be set for VolumeClaimPolicies templates" in refused.stderr
    assert 'The JobSet "multi-node" is invalid' in refused.stderr
