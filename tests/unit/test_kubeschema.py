"""The Kubernetes types inside our CRDs: generated from kubernetes-validate's bundle, shaped as
controller-gen shapes them, and what ``trainer validate`` checks pod templates against."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainer.api import crds
from trainer.cli.main import app
from trainer.machinery import kubeschema, kubeschema_gen
from trainer.machinery.kubeschema import QUANTITY_PATTERN, kube_schema
from trainer.runtime.builtin import builtin_runtime_documents

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT.parent / "shared" / "upstream-crds"
POD_SPEC = "spec.template.spec.replicatedJobs[0].template.spec.template.spec"


def node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node at ``a.b[].c`` (``[]`` steps into array items)."""
    for part in path.replace("[]", ".[]").split("."):
        if not part:
            continue
        schema = schema["items"] if part == "[]" else schema["properties"][part]
    return schema


def pod_spec(kind: str = "ClusterTrainingRuntime") -> dict[str, Any]:
    schema = crds.schema_for_kind(kind)
    if kind == "JobSet":
        return node(schema, "spec.replicatedJobs[].template.spec.template.spec")
    return node(schema, "spec.template.spec.replicatedJobs[].template.spec.template.spec")


def bundle() -> dict[str, Any]:
    """kubernetes-validate's bundled definitions, or skip saying why."""
    try:
        return kubeschema_gen.load_bundle()
    except kubeschema_gen.SourceError as exc:
        pytest.skip(str(exc))


def test_committed_kubeschema_is_what_the_bundle_generates() -> None:
    committed = (ROOT / kubeschema_gen.RELATIVE_PATH).read_text()
    fresh = kubeschema_gen.render(bundle())
    assert committed == fresh, "trainer/machinery/kubeschema.json is stale: make crds"


@pytest.mark.parametrize("kind", ["ClusterTrainingRuntime", "TrainingRuntime", "JobSet"])
def test_pod_templates_are_fully_typed(kind: str) -> None:
    spec = pod_spec(kind)
    assert "x-kubernetes-preserve-unknown-fields" not in spec
    assert spec["required"] == ["containers"]
    for field in ("affinity", "tolerations", "topologySpreadConstraints", "resourceClaims"):
        assert field in spec["properties"]
    container = spec["properties"]["containers"]["items"]
    assert container["required"] == ["name"]
    for field in ("imagePullPolicy", "livenessProbe", "lifecycle", "resizePolicy", "stdin"):
        assert field in container["properties"]
    assert "description" in container["properties"]["imagePullPolicy"]


def test_list_map_keys_decide_server_side_apply_merges() -> None:
    spec = pod_spec()
    keys = {
        "containers": ["name"],
        "initContainers": ["name"],
        "volumes": ["name"],
        "containers[].env": ["name"],
        "containers[].ports": ["containerPort", "protocol"],
        "containers[].volumeMounts": ["mountPath"],
    }
    for path, expected in keys.items():
        lst = node(spec, path)
        assert lst["x-kubernetes-list-type"] == "map", path
        assert lst["x-kubernetes-list-map-keys"] == expected, path
    # every key is required or defaulted, as kube-apiserver demands of a map-keyed list
    assert node(spec, "containers[].ports[].protocol")["default"] == "TCP"
    assert node(spec, "containers[].command")["x-kubernetes-list-type"] == "atomic"


def test_special_types_are_shaped_as_controller_gen_shapes_them() -> None:
    spec = pod_spec()
    limit = node(spec, "containers[].resources.limits")["additionalProperties"]
    assert limit == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }
    port = node(spec, "containers[].livenessProbe.httpGet.port")
    assert port["x-kubernetes-int-or-string"] is True and "pattern" not in port
    assert "type" not in port
    template = node(
        crds.schema_for_kind("ClusterTrainingRuntime"),
        "spec.template.spec.replicatedJobs[].template.spec.template",
    )
    assert sorted(template["properties"]["metadata"]["properties"]) == [
        "annotations",
        "finalizers",
        "labels",
        "name",
        "namespace",
    ]
    assert node(spec, "terminationGracePeriodSeconds")["format"] == "int64"
    # LocalObjectReference's atomic struct type and name default reach the types embedding it
    ref = node(spec, "containers[].envFrom[].configMapRef")
    assert ref["x-kubernetes-map-type"] == "atomic"
    assert ref["properties"]["name"]["default"] == ""


def test_runtime_patches_keep_upstreams_restricted_pod_spec() -> None:
    patch = node(
        crds.schema_for_kind("TrainJob"),
        "spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[]"
        ".template.spec.template.spec",
    )
    assert sorted(patch["properties"]) == [
        "affinity",
        "containers",
        "imagePullSecrets",
        "initContainers",
        "nodeSelector",
        "schedulingGates",
        "securityContext",
        "serviceAccountName",
        "terminationGracePeriodSeconds",
        "tolerations",
        "volumes",
    ]
    container = patch["properties"]["containers"]["items"]
    assert sorted(container["properties"]) == ["env", "name", "securityContext", "volumeMounts"]
    assert "runAsUser" in container["properties"]["securityContext"]["properties"]
    assert "fsGroup" in patch["properties"]["securityContext"]["properties"]
    assert patch["properties"]["securityContext"]["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "field is immutable"}
    ]
    assert "nodeAffinity" in patch["properties"]["affinity"]["properties"]


def test_kube_schema_returns_a_fresh_copy() -> None:
    first = kube_schema("io.k8s.api.core.v1.Container")
    first["properties"].clear()
    assert "image" in kube_schema("io.k8s.api.core.v1.Container")["properties"]
    with pytest.raises(kubeschema.UnknownKubeType, match=r"io\.k8s\.api\.core\.v1\.Nope"):
        kube_schema("io.k8s.api.core.v1.Nope")


def test_generation_fails_loudly_on_what_it_cannot_translate() -> None:
    defs = bundle()
    odd = copy.deepcopy(defs)
    odd["io.k8s.api.core.v1.Container"]["properties"]["image"]["x-new-keyword"] = 1
    with pytest.raises(kubeschema_gen.SourceError, match=r"Container\.image.*x-new-keyword"):
        kubeschema_gen.generate(odd)
    renamed = copy.deepcopy(defs)
    del renamed["io.k8s.api.core.v1.ContainerPort"]["properties"]["protocol"]
    with pytest.raises(kubeschema_gen.SourceError, match=r"ContainerPort\.protocol"):
        kubeschema_gen.generate(renamed)


# --- against upstream's released CRDs -------------------------------------------------------

STRUCTURAL = (
    "type",
    "format",
    "enum",
    "default",
    "pattern",
    "required",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "minimum",
    "maximum",
    "maxLength",
    "minLength",
    "maxItems",
)


def flatten(schema: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    out = {path: {k: schema[k] for k in STRUCTURAL if k in schema}}
    if "required" in out[path]:
        out[path]["required"] = sorted(out[path]["required"])
    for name, child in (schema.get("properties") or {}).items():
        out |= flatten(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        out |= flatten(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out |= flatten(schema["additionalProperties"], f"{path}{{}}")
    return out


def upstream_schema(file: str) -> dict[str, Any]:
    if not UPSTREAM.is_dir():
        pytest.skip(f"{UPSTREAM} (upstream's released CRDs) is absent")
    return _load_upstream(file)


@functools.cache
def _load_upstream(file: str) -> dict[str, Any]:
    crd = yaml.safe_load((UPSTREAM / file).read_text())
    return crds.crd_schema(crd)


# (upstream file, kind, subtree): the Kubernetes-typed subtrees, each compared field for field
SUBTREES = [
    (
        "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        "ClusterTrainingRuntime",
        "spec.template.spec.replicatedJobs[].template",
    ),
    (
        "trainer.kubeflow.org_trainingruntimes.yaml",
        "TrainingRuntime",
        "spec.template.spec.replicatedJobs[].template.spec",
    ),
    ("jobset.x-k8s.io_jobsets.yaml", "JobSet", "spec.replicatedJobs[].template"),
    ("jobset.x-k8s.io_jobsets.yaml", "JobSet", "spec.volumeClaimPolicies[].templates[]"),
    ("trainer.kubeflow.org_trainjobs.yaml", "TrainJob", "spec.trainer.env"),
    ("trainer.kubeflow.org_trainjobs.yaml", "TrainJob", "spec.trainer.resourcesPerNode"),
    ("trainer.kubeflow.org_trainjobs.yaml", "TrainJob", "spec.initializer.dataset.secretRef"),
] + [
    (
        "trainer.kubeflow.org_trainjobs.yaml",
        "TrainJob",
        "spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[]"
        f".template.spec.template.spec.{field}",
    )
    for field in (
        "affinity",
        "tolerations",
        "volumes",
        "securityContext",
        "imagePullSecrets",
        "schedulingGates",
        "nodeSelector",
        "containers[].env",
        "containers[].volumeMounts",
        "containers[].securityContext",
        "initContainers[].env",
    )
]


@pytest.mark.parametrize(("file", "kind", "subtree"), SUBTREES, ids=[s[2] for s in SUBTREES])
def test_kubernetes_subtrees_match_upstream_field_for_field(
    file: str, kind: str, subtree: str
) -> None:
    theirs = flatten(node(upstream_schema(file), subtree))
    ours = flatten(node(crds.schema_for_kind(kind), subtree))
    assert sorted(set(theirs) - set(ours)) == [], "fields upstream types and we do not"
    assert sorted(set(ours) - set(theirs)) == [], "fields we type and upstream does not"
    different = {p: (theirs[p], ours[p]) for p in theirs if theirs[p] != ours[p]}
    assert different == {}


# --- trainer validate -----------------------------------------------------------------------


def test_validate_rejects_a_misspelt_pod_spec_field_with_its_path(tmp_path: Path) -> None:
    runtime: Any = next(iter(builtin_runtime_documents()))
    runtime = copy.deepcopy(runtime)
    spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    spec["template"]["spec"]["restartPolicyy"] = "Never"
    spec["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    path = tmp_path / "runtime.yaml"
    path.write_text(yaml.safe_dump(runtime))

    result = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1, result.output
    for field in (f"{POD_SPEC}.restartPolicyy", f"{POD_SPEC}.containers[0].imagePullPolicyy"):
        assert f'{field}: Unknown field: unknown field "{field}"' in result.output

    lenient = CliRunner().invoke(app, ["validate", "--no-strict-fields", "-f", str(path)])
    assert lenient.exit_code == 0, lenient.output


def test_make_crds_without_the_bundle_fails_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kubeschema_gen, "BUNDLE", "v0.1.0-local/_definitions.json")
    assert crds.main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: kubernetes-validate has no v0.1.0-local/_definitions.json: "
        "install kubernetes-validate>=1.36\n"
    )
    assert not (tmp_path / "manifests").exists()
