"""The ``trainer`` command as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trainer.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

GOOD = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: good}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2}
"""

BAD = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bad}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: -1, numProcPerNode: 0}
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_validate_accepts_the_shipped_runtimes_and_examples() -> None:
    result = runner.invoke(
        app, ["validate", "-f", str(ROOT / "runtimes"), "-f", str(ROOT / "examples")]
    )
    assert result.exit_code == 0, result.output
    assert "0 invalid" in result.output
    assert "valid    ClusterTrainingRuntime/torch-distributed" in result.output


def test_validate_reports_every_bad_field_and_exits_1(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "-f", write(tmp_path, "a.yaml", GOOD + "---\n" + BAD)])
    assert result.exit_code == 1
    assert "INVALID  TrainJob/bad" in result.output
    assert "spec.trainer.numNodes: Invalid value: -1" in result.output
    assert "numProcPerNode must be greater than or equal to 1" in result.output
    assert "1 valid, 1 invalid" in result.output


def test_validate_json_output(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "-o", "json", "-f", write(tmp_path, "b.yaml", BAD)])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report[0]["valid"] is False
    assert {e["field"] for e in report[0]["errors"]} == {
        "spec.trainer.numNodes",
        "spec.trainer.numProcPerNode",
    }


def test_validate_reads_stdin() -> None:
    result = runner.invoke(app, ["validate", "-f", "-"], input=GOOD)
    assert result.exit_code == 0, result.output


def test_validate_unreadable_input_exits_2(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["validate", "-f", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2
    assert "cannot read" in missing.output
    broken = runner.invoke(app, ["validate", "-f", write(tmp_path, "c.yaml", "a: [1, 2\n")])
    assert broken.exit_code == 2
    assert "c.yaml: line 2, column 1: YAML syntax error: " in broken.output


def test_validate_rejects_foreign_kinds(tmp_path: Path) -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
    result = runner.invoke(app, ["validate", "-f", write(tmp_path, "p.yaml", pod)])
    assert result.exit_code == 1
    assert "v1 Pod is not a kind this tool reads" in result.output


def test_crds_prints_installable_yaml() -> None:
    result = runner.invoke(app, ["crds", "--jobset"])
    assert result.exit_code == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(result.output)]
    assert names == [
        "clustertrainingruntimes.trainer.kubeflow.org",
        "trainingruntimes.trainer.kubeflow.org",
        "trainjobs.trainer.kubeflow.org",
        "jobsets.jobset.x-k8s.io",
    ]


def test_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0
    assert "v2.3" in result.output


ADMISSION_BAD = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: a-very-long-trainjob-name-for-the-torchtune-runtime}
spec:
  runtimeRef: {name: torchtune-llama3.2-1b}
  trainer:
    env: [{name: PET_NNODES, value: "4"}]
"""


def test_validate_applies_the_admission_rules(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "-f", write(tmp_path, "adm.yaml", ADMISSION_BAD)])
    assert result.exit_code == 1
    assert "must not have reserved envs, invalid envs configured: [PET_NNODES]" in result.output
    assert "the longest TrainJob name this runtime allows with these settings is 33" in (
        result.output
    )


def test_validate_reports_a_missing_runtime(tmp_path: Path) -> None:
    missing = GOOD.replace("torch-distributed", "no-such-runtime")
    result = runner.invoke(app, ["validate", "-f", write(tmp_path, "m.yaml", missing)])
    assert result.exit_code == 1
    assert "spec.runtimeRef" in result.output
    assert "specified clusterTrainingRuntime must be created before the TrainJob" in result.output


def test_validate_uses_runtimes_given_with_the_jobs_and_warns_on_stderr(tmp_path: Path) -> None:
    runtime = yaml.safe_load((ROOT / "runtimes/torch-distributed.yaml").read_text())
    runtime["metadata"]["name"] = "old-torch"
    runtime["metadata"]["labels"]["trainer.kubeflow.org/support"] = "deprecated"
    job = GOOD.replace("torch-distributed", "old-torch")
    stream = yaml.safe_dump(runtime) + "---\n" + job
    result = runner.invoke(app, ["validate", "-f", write(tmp_path, "d.yaml", stream)])
    assert result.exit_code == 0, result.output
    assert 'Referenced ClusterTrainingRuntime "old-torch" is deprecated' in result.stderr
    assert "valid    TrainJob/good" in result.stdout
    only = runner.invoke(
        app,
        ["validate", "-f", write(tmp_path, "j.yaml", job), "--runtime", str(ROOT / "runtimes")],
    )
    assert only.exit_code == 1  # old-torch is not among the given runtimes


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        (
            "Bad=true",
            "error: --feature-gates: unrecognized feature gate: Bad (known: TrainJobStatus)",
        ),
        ("TrainJobStatus", "error: --feature-gates: missing bool value for TrainJobStatus"),
    ],
)
def test_controller_rejects_bad_feature_gates_before_starting(gates: str, message: str) -> None:
    result = runner.invoke(app, ["controller", "--feature-gates", gates])
    assert result.exit_code == 2
    assert result.output.strip() == message
