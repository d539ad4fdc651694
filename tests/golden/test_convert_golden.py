"""Golden tests of ``trainer convert``: a v1 job -> the converted objects and warnings
(``converted.yaml``) -> what the controller renders for them (``rendered.yaml``).

Each directory under ``convert/`` holds ``v1.yaml``. ``pytest tests/golden --update-golden``
rewrites the expectations; review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView
from trainer.api.load import check_object, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.cli.render import offline_trainjob, to_yaml_stream
from trainer.convert import Converted, convert
from trainer.plugins.registry import render
from trainer.runtime.builtin import builtin_runtime_documents, builtin_runtimes
from trainer.runtime.info import BuildContext, SSHKeyPair

CASES = Path(__file__).parent / "convert"
FAKE_KEYS = SSHKeyPair(
    b"-----BEGIN EC PRIVATE KEY-----\nZ29sZGVu\n-----END EC PRIVATE KEY-----\n",
    b"ecdsa-sha2-nistp521 Z29sZGVu golden",
)
CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir())
BUILTINS = {str(d["metadata"]["name"]): d for d in builtin_runtime_documents()}  # type: ignore[index]


def converted(case: Path) -> Converted:
    data = yaml.safe_load((case / "v1.yaml").read_text())
    return convert(data, "v1.yaml", builtins=BUILTINS)


def converted_text(result: Converted) -> str:
    head = "".join(f"# info: {line}\n" for line in result.info)
    head += "".join(f"# warning: {w}\n" for w in result.warnings)
    return head + to_yaml_stream(result.objects)


def runtime_and_trainjob(
    result: Converted,
) -> tuple[TrainingRuntime | ClusterTrainingRuntime, TrainJob]:
    """The converted TrainJob and the runtime it references: its own, or the built-in."""
    *own, trainjob = (parse_object(o) for o in result.objects)
    assert isinstance(trainjob, TrainJob) and trainjob.spec is not None
    if own:
        (runtime,) = own
        assert isinstance(runtime, TrainingRuntime)
        return runtime, trainjob
    ref = trainjob.spec.runtime_ref
    assert ref.kind == "ClusterTrainingRuntime"
    return builtin_runtimes()[ref.name], trainjob


def rendered_text(result: Converted) -> str:
    runtime, trainjob = runtime_and_trainjob(result)
    offline_trainjob(trainjob)  # as `trainer render` does: default namespace, placeholder uid
    return to_yaml_stream(render(trainjob, runtime, ctx=BuildContext(lambda: FAKE_KEYS)))


def test_every_v1_kind_has_a_case() -> None:
    kinds = {yaml.safe_load((d / "v1.yaml").read_text())["kind"] for d in CASE_DIRS}
    assert kinds == {"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob"}


def test_which_cases_reference_a_built_in_runtime() -> None:
    """Only the two plain Worker-only PyTorchJobs fit torch-distributed; every other case keeps
    its own runtime, for the reason its converted.yaml states."""
    uses = {d.name: converted(d).runtime for d in CASE_DIRS}
    assert {k: v for k, v in uses.items() if v.startswith("ClusterTrainingRuntime/")} == {
        "pytorch-workers-builtin": "ClusterTrainingRuntime/torch-distributed",
        "pytorch-workers-patched": "ClusterTrainingRuntime/torch-distributed",
    }


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_converted_trainjob_passes_admission(case: Path) -> None:
    runtime, trainjob = runtime_and_trainjob(converted(case))
    verdict = validate_trainjob(trainjob, None, ClusterView(runtime=runtime))
    assert verdict.allowed, [str(e) for e in verdict.errors]


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_converted_objects_pass_the_crd_checks(case: Path) -> None:
    for obj in converted(case).objects:
        result = check_object(obj)
        assert result.ok, [str(e) for e in result.errors]
        assert result.stored is not None


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
@pytest.mark.parametrize("what", ["converted", "rendered"])
def test_convert_golden(case: Path, what: str, request: pytest.FixtureRequest) -> None:
    result = converted(case)
    actual = converted_text(result) if what == "converted" else rendered_text(result)
    path = case / f"{what}.yaml"
    if request.config.getoption("--update-golden"):
        path.write_text(actual)
    assert path.exists(), f"{case.name}: run pytest tests/golden --update-golden and review"
    assert actual == path.read_text(), (
        f"{case.name}: {what} output differs from {path.name} (pytest tests/golden "
        "--update-golden rewrites it; review the diff)"
    )
