"""The committed CRDs are exactly what the models generate, and they are structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.api import crds

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def files() -> dict[str, str]:
    """Rendered once per process (crds caches it), when a test first asks, not at collection."""
    return dict(crds.rendered_files())


@pytest.mark.parametrize("rel", crds.generated_paths())
def test_committed_file_matches_the_models(rel: str) -> None:
    content = files()[rel]
    path = ROOT / rel
    assert path.exists(), f"{rel} is missing: run `make crds`"
    assert path.read_text() == content, f"{rel} is stale: run `make crds`"


def test_check_mode_reports_stale_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crds.main(["--root", str(tmp_path), "--check"]) == 1
    assert crds.main(["--root", str(tmp_path)]) == 0
    assert crds.main(["--root", str(tmp_path), "--check"]) == 0
    stale = tmp_path / "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"
    stale.write_text(stale.read_text().replace("maxItems: 16", "maxItems: 17"))
    capsys.readouterr()
    assert crds.main(["--root", str(tmp_path), "--check"]) == 1
    assert "maxItems: 17" in capsys.readouterr().out


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, child in (node.get("properties") or {}).items():
        out += walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


ALL_CRDS = [*crds.trainer_crds(), crds.jobset_crd()]


@pytest.mark.parametrize("crd", ALL_CRDS, ids=lambda c: c["metadata"]["name"])
def test_schema_is_structural(crd: dict[str, Any]) -> None:
    schema = crds.crd_schema(crd)
    for path, node in walk(schema):
        if "properties" in node or "additionalProperties" in node:
            assert node.get("type") == "object", path
        if "items" in node:
            assert node.get("type") == "array", path
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
        elif not node.get("x-kubernetes-preserve-unknown-fields"):
            assert "type" in node, f"{path} has no type"
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                has_default = "default" in item["properties"][key]
                assert key in item.get("required", []) or has_default, f"{path}: {key}"


def test_trainjob_printer_columns_show_the_active_state() -> None:
    columns = {
        c["name"]: c for c in crds.trainjob_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    }
    assert list(columns) == ["State", "Runtime", "Nodes", "Age"]
    # The controller's state, not the last condition of any status (upstream #3666).
    assert columns["State"]["jsonPath"] == ".status.state"
    assert columns["Runtime"]["jsonPath"] == ".spec.runtimeRef.name"
    assert columns["Nodes"]["jsonPath"] == ".spec.trainer.numNodes"
    assert columns["Age"]["type"] == "date"


def test_scopes_and_subresources() -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in ALL_CRDS}
    assert by_kind["TrainJob"]["spec"]["scope"] == "Namespaced"
    assert by_kind["TrainingRuntime"]["spec"]["scope"] == "Namespaced"
    assert by_kind["ClusterTrainingRuntime"]["spec"]["scope"] == "Cluster"
    assert by_kind["TrainJob"]["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert "subresources" not in by_kind["ClusterTrainingRuntime"]["spec"]["versions"][0]
    assert by_kind["JobSet"]["spec"]["group"] == "jobset.x-k8s.io"
    assert by_kind["JobSet"]["spec"]["versions"][0]["name"] == "v1alpha2"


def test_generated_yaml_parses_back() -> None:
    for content in files().values():
        assert yaml.safe_load(content)
