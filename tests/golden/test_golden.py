"""Golden tests: TrainJob + runtime YAML -> the exact objects the controller applies.

Each directory under ``cases/`` holds ``input.yaml`` (runtimes and one TrainJob; without a
runtime document the built-in runtimes are used), an optional ``observed.yaml`` (objects that
already exist: JobSet, Secrets, ConfigMaps, PodGroup; a Secret in the operator namespace
``kubeflow-system`` is the webhook certificate Secret), an optional ``context.yaml``
(``featureGates`` and ``statusServerURL`` of the build) and ``expected.yaml``. Run
``pytest tests/golden --update-golden`` to rewrite the expectations, then review the diff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.api.load import check_object, load_documents, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.cli.render import to_yaml_stream
from trainer.jobset.types import JobSet
from trainer.plugins.registry import render
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.info import BuildContext, Observed, Runtime, SSHKeyPair

CASES = Path(__file__).parent / "cases"
OPERATOR_NAMESPACE = "kubeflow-system"
CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir())

FAKE_KEYS = SSHKeyPair(
    private_pem=b"-----BEGIN EC PRIVATE KEY-----\nZ29sZGVu\n-----END EC PRIVATE KEY-----\n",
    public_authorized_key=b"ecdsa-sha2-nistp521 Z29sZGVu golden",
)


def load_case(case: Path) -> tuple[TrainJob, Runtime, Observed]:
    docs = load_documents((case / "input.yaml").read_text(), str(case / "input.yaml"))
    trainjob: TrainJob | None = None
    runtimes: dict[str, Runtime] = {}
    for doc in docs:
        result = check_object(doc.data)
        assert result.ok, f"{case.name}: invalid input: {[str(e) for e in result.errors]}"
        obj = parse_object(result.stored)
        if isinstance(obj, TrainJob):
            trainjob = obj
        elif isinstance(obj, TrainingRuntime | ClusterTrainingRuntime):
            runtimes[obj.metadata.name or ""] = obj  # type: ignore[union-attr]
    assert trainjob is not None and trainjob.spec is not None, f"{case.name}: no TrainJob"
    name = trainjob.spec.runtime_ref.name
    runtime = runtimes.get(name) or builtin_runtimes()[name]
    observed = Observed()
    status_secret = None
    if (case / "observed.yaml").exists():
        secrets: dict[str, Any] = {}
        config_maps: dict[str, Any] = {}
        jobset = None
        pod_group = None
        for doc in yaml.safe_load_all((case / "observed.yaml").read_text()):
            kind, name = doc["kind"], doc["metadata"]["name"]
            if kind == "Secret" and doc["metadata"].get("namespace") == OPERATOR_NAMESPACE:
                status_secret = doc
            elif kind == "Secret":
                secrets[name] = doc
            elif kind == "ConfigMap":
                config_maps[name] = doc
            elif kind == "JobSet":
                jobset = JobSet.from_wire(doc)
            elif kind == "PodGroup":
                pod_group = doc
        observed = Observed(
            jobset, pod_group, secrets, config_maps, status_server_secret=status_secret
        )
    return trainjob, runtime, observed


def build_context(case: Path) -> BuildContext:
    settings: dict[str, Any] = {}
    if (case / "context.yaml").exists():
        settings = yaml.safe_load((case / "context.yaml").read_text()) or {}
    return BuildContext(
        lambda: FAKE_KEYS,
        credential_gen=lambda: "golden-data-cache-credential",
        feature_gates=settings.get("featureGates") or {},
        status_server_url=settings.get("statusServerURL"),
    )


def rendered(case: Path) -> str:
    trainjob, runtime, observed = load_case(case)
    objects = render(trainjob, runtime, observed=observed, ctx=build_context(case))
    return to_yaml_stream(objects)


def test_there_are_golden_cases() -> None:
    assert len(CASE_DIRS) >= 10


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_golden(case: Path, request: pytest.FixtureRequest) -> None:
    actual = rendered(case)
    expected_path = case / "expected.yaml"
    if request.config.getoption("--update-golden"):
        expected_path.write_text(actual)
    assert expected_path.exists(), f"{case.name}: run pytest --update-golden and review"
    assert actual == expected_path.read_text(), (
        f"{case.name}: output differs from expected.yaml (pytest tests/golden --update-golden "
        "rewrites it; review the diff)"
    )


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_rendered_jobset_passes_the_jobset_schema(case: Path) -> None:
    for obj in yaml.safe_load_all(rendered(case)):
        if obj["kind"] == "JobSet":
            result = check_object(obj)
            assert result.ok, [str(e) for e in result.errors]
