"""The pod templates inside runtimes, through the real kubectl, as on a cluster with our CRDs.

The CRDs type every field of a runtime's pod template (trainer/machinery/kubeschema.py), so the API
server does what kube-apiserver does with upstream's CRDs: ``kubectl explain`` walks into the
containers, a misspelt pod-spec field is rejected under kubectl's default strict validation
(naming its path), pruned under ``--validate=warn`` (with a warning) and ``--validate=false``,
and server-side apply merges containers and their env by their list-map keys.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.api import crds as crd_models

from .conftest import KUBECTL, SKIP_REASON, Kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason=SKIP_REASON)

ROOT = Path(__file__).resolve().parents[2]
POD_SPEC = "spec.template.spec.replicatedJobs[0].template.spec.template.spec"
_names = itertools.count(1)


@pytest.fixture(scope="session")
def crds_applied(kubectl: Kubectl) -> None:
    stream = yaml.safe_dump_all([*crd_models.trainer_crds(), crd_models.jobset_crd()])
    kubectl.run("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stream)


def runtime(name: str, **pod_spec: Any) -> dict[str, Any]:
    """A ClusterTrainingRuntime with one replicated job ``node`` and one container ``node``;
    ``pod_spec`` is merged into the pod spec."""
    spec: dict[str, Any] = {
        "containers": [{"name": "node", "image": "python:3.12", "command": ["python"]}],
        **pod_spec,
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": "node", "template": {"spec": {"template": {"spec": spec}}}}
                    ]
                }
            },
        },
    }


def misspelt(name: str) -> str:
    obj = runtime(name, restartPolicyy="Never")
    pod = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    return yaml.safe_dump(obj)


def pod_spec_of(kubectl: Kubectl, name: str) -> dict[str, Any]:
    out = kubectl.run("get", "clustertrainingruntime", name, "-o", "yaml").stdout
    obj = yaml.safe_load(out)
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]
    return spec


@pytest.fixture
def created(kubectl: Kubectl) -> Iterator[list[str]]:
    """Names of the ClusterTrainingRuntimes a test creates, deleted after it: the server is
    shared by the whole session, and other tests list the cluster's runtimes."""
    names: list[str] = []
    yield names
    for name in names:
        kubectl.run("delete", "clustertrainingruntime", name, "--ignore-not-found", check=False)


def test_explain_shows_the_container_fields(kubectl: Kubectl, crds_applied: None) -> None:
    path = (
        "clustertrainingruntime.spec.template.spec.replicatedJobs.template.spec.template.spec"
        ".containers"
    )
    out = kubectl.run("explain", path).stdout
    assert "FIELD: containers <[]Object>" in out
    for field in ("imagePullPolicy\t<string>", "livenessProbe\t<Object>", "ports\t<[]Object>"):
        assert field in out, out
    assert "name\t<string> -required-" in out
    assert "A single application container" in out

    port = kubectl.run("explain", f"{path}.ports.protocol").stdout
    assert "FIELD: protocol <string>" in port
    assert 'Defaults to "TCP"' in port

    v2 = kubectl.run("explain", path, "--output=plaintext-openapiv2").stdout
    assert "imagePullPolicy\t<string>" in v2


def test_misspelt_pod_spec_field_is_rejected_with_its_path(
    kubectl: Kubectl, crds_applied: None
) -> None:
    name = f"typo-{next(_names)}"
    rejected = kubectl.run("apply", "-f", "-", stdin=misspelt(name), check=False)
    assert rejected.returncode == 1
    assert "strict decoding error" in rejected.stderr
    assert f'unknown field "{POD_SPEC}.containers[0].imagePullPolicyy"' in rejected.stderr
    assert f'unknown field "{POD_SPEC}.restartPolicyy"' in rejected.stderr
    missing = kubectl.run("get", "clustertrainingruntime", name, check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_misspelt_pod_spec_field_is_pruned_when_not_strict(
    kubectl: Kubectl, crds_applied: None, created: list[str]
) -> None:
    warned = f"warn-{next(_names)}"
    created.append(warned)
    out = kubectl.run("apply", "--validate=warn", "-f", "-", stdin=misspelt(warned))
    assert f'unknown field "{POD_SPEC}.containers[0].imagePullPolicyy"' in out.stderr
    ignored = f"ignore-{next(_names)}"
    created.append(ignored)
    out = kubectl.run("apply", "--validate=false", "-f", "-", stdin=misspelt(ignored))
    assert "unknown field" not in out.stderr
    for name in (warned, ignored):
        spec = pod_spec_of(kubectl, name)
        assert "restartPolicyy" not in spec
        container = {"name": "node", "image": "python:3.12", "command": ["python"]}
        assert spec["containers"] == [container]


def test_invalid_pod_spec_value_is_rejected(kubectl: Kubectl, crds_applied: None) -> None:
    name = f"bad-{next(_names)}"
    obj = runtime(name)
    container = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["containers"][0]
    container["ports"] = [{"containerPort": "http"}]
    container["resources"] = {"limits": {"cpu": "lots"}}
    rejected = kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert rejected.returncode == 1
    assert f"{POD_SPEC}.containers[0].ports[0].containerPort: Invalid value" in rejected.stderr
    cpu = f"{POD_SPEC}.containers[0].resources.limits.cpu"
    limit = f'{cpu}: Invalid value: "lots": {cpu} in body should match'
    assert limit in rejected.stderr


def test_server_side_apply_merges_containers_and_env_by_key(
    kubectl: Kubectl, crds_applied: None, created: list[str]
) -> None:
    """Two field managers each own one env entry of the same container: both survive, with no
    conflict, because containers and env are list maps keyed by name (with atomic lists the
    second apply would conflict or replace the first one's list)."""
    name = f"ssa-{next(_names)}"
    created.append(name)
    first = runtime(name)
    pod = first["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["containers"][0]["env"] = [{"name": "FROM_A", "value": "a"}]
    kubectl.run(
        "apply", "--server-side", "--field-manager=team-a", "-f", "-", stdin=yaml.safe_dump(first)
    )

    second = copy.deepcopy(first)
    del second["spec"]["mlPolicy"]
    pod = second["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["containers"] = [{"name": "node", "env": [{"name": "FROM_B", "value": "b"}]}]
    applied = kubectl.run(
        "apply", "--server-side", "--field-manager=team-b", "-f", "-", stdin=yaml.safe_dump(second)
    )
    assert "serverside-applied" in applied.stdout

    container = pod_spec_of(kubectl, name)["containers"][0]
    assert container["image"] == "python:3.12"
    assert container["env"] == [
        {"name": "FROM_A", "value": "a"},
        {"name": "FROM_B", "value": "b"},
    ]
    managers = kubectl.run(
        "get",
        "clustertrainingruntime",
        name,
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ).stdout.split()
    assert {"team-a", "team-b"} <= set(managers)


def test_builtin_runtime_applies_under_strict_validation(
    kubectl: Kubectl, crds_applied: None
) -> None:
    """Every field of the built-in runtimes' pod templates is declared by the schema."""
    result = kubectl.run(
        "apply",
        "--dry-run=server",
        "-f",
        str(ROOT / "runtimes"),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "unknown field" not in result.stderr
