"""``trainer render`` output a user can feed to ``kubectl apply`` as it is: the namespace of
``-n`` for runtimes next to the TrainJob, a placeholder owner uid the API server accepts,
strict unknown-field errors, and no JobSet for TrainJobs another controller manages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from trainer.cli.main import app
from trainer.cli.render import OFFLINE_OWNER_UID

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

RUNTIME = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: mine}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers: [{name: node, image: busybox}]
"""
JOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: mine-job}
spec:
  runtimeRef: {kind: TrainingRuntime, name: mine}
  trainer: {numNodes: 2}
"""
PATCHED = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: patched}
spec:
  runtimeRef: {name: torch-distributed}
  runtimePatches:
    - manager: example.com/platform
      trainingRuntimeSpec:
        template:
          spec:
            priorityClassName: high
"""
PATCH_PATH = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.priorityClassName"


def run(*args: str, stdin: str | None = None) -> Any:
    return runner.invoke(app, ["render", *args], input=stdin)


def objects(stdout: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(stdout) if d]


def test_namespace_option_applies_to_a_runtime_in_the_same_file() -> None:
    result = run("-n", "team", "-f", "-", stdin=RUNTIME + "---\n" + JOB)
    assert result.exit_code == 0, result.output
    rendered = objects(result.stdout)
    assert [o["metadata"]["namespace"] for o in rendered] == ["team", "team"]
    assert rendered[-1]["kind"] == "JobSet"


def test_namespace_option_applies_to_a_runtime_given_with_runtime(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(RUNTIME)
    result = run("-n", "team", "-f", "-", "-r", str(runtime), stdin=JOB)
    assert result.exit_code == 0, result.output
    assert objects(result.stdout)[-1]["metadata"]["namespace"] == "team"


def test_a_runtime_with_its_own_namespace_keeps_it() -> None:
    runtime = RUNTIME.replace("{name: mine}", "{name: mine, namespace: other}")
    result = run("-n", "team", "-f", "-", stdin=runtime + "---\n" + JOB)
    assert result.exit_code == 2 and result.stdout == ""
    assert "TrainingRuntime 'mine' in namespace team is not among the runtimes" in result.stderr
    assert "TrainingRuntime/other/mine" in result.stderr


def test_owner_references_carry_the_placeholder_uid() -> None:
    result = run("-f", str(ROOT / "examples/multi-node.yaml"))
    assert result.exit_code == 0, result.output
    rendered = objects(result.stdout)
    owners = [ref for o in rendered for ref in o["metadata"]["ownerReferences"]]
    assert len(owners) == len(rendered) >= 2
    assert {ref["uid"] for ref in owners} == {OFFLINE_OWNER_UID}
    assert "uid: ''" not in result.stdout


def test_a_trainjob_with_a_uid_keeps_it() -> None:
    job = JOB.replace("{name: mine-job}", "{name: mine-job, uid: 0a1b2c3d-real}")
    result = run("-f", "-", stdin=RUNTIME + "---\n" + job)
    assert result.exit_code == 0, result.output
    uids = {r["uid"] for o in objects(result.stdout) for r in o["metadata"]["ownerReferences"]}
    assert uids == {"0a1b2c3d-real"}


def test_unknown_fields_in_a_runtime_patch_are_errors_naming_the_path() -> None:
    result = run("-f", "-", stdin=PATCHED)
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: <stdin>: TrainJob/patched is invalid: ")
    assert f'{PATCH_PATH}: Unknown field: unknown field "{PATCH_PATH}"' in lines[0]


def test_no_strict_fields_drops_them_as_the_api_server_prunes() -> None:
    result = run("--no-strict-fields", "-f", "-", stdin=PATCHED)
    assert result.exit_code == 0, result.output
    assert "priorityClassName" not in result.stdout
    assert objects(result.stdout)[-1]["kind"] == "JobSet"


def test_unknown_fields_in_a_runtime_file_are_errors(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(RUNTIME.replace("mlPolicy:", "mlPolicyy: {}\n  mlPolicy:"))
    result = run("-f", "-", "-r", str(runtime), stdin=JOB)
    assert result.exit_code == 2 and result.stdout == ""
    assert f"{runtime}: TrainingRuntime/mine is invalid: spec.mlPolicyy: Unknown field" in (
        result.stderr
    )


MULTIKUEUE = "  managedBy: kueue.x-k8s.io/multikueue\n"


def test_an_externally_managed_trainjob_renders_a_note_and_no_jobset() -> None:
    job = JOB.replace("spec:\n", "spec:\n" + MULTIKUEUE)
    result = run("-f", "-", stdin=RUNTIME + "---\n" + job)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.strip() == (
        "note: TrainJob mine-job: spec.managedBy is kueue.x-k8s.io/multikueue, so the trainer "
        "controller creates nothing for it (its manager does); nothing rendered"
    )
    as_json = run("-o", "json", "-f", "-", stdin=RUNTIME + "---\n" + job)
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == []


def test_only_the_externally_managed_trainjob_is_skipped() -> None:
    external = JOB.replace("spec:\n", "spec:\n" + MULTIKUEUE).replace("mine-job", "remote")
    result = run("-f", "-", stdin=RUNTIME + "---\n" + external + "---\n" + JOB)
    assert result.exit_code == 0, result.output
    names = {o["metadata"]["name"] for o in objects(result.stdout) if o["kind"] == "JobSet"}
    assert names == {"mine-job"}
    assert "note: TrainJob remote: spec.managedBy is kueue.x-k8s.io/multikueue" in result.stderr
