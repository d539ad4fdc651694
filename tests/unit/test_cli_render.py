"""``trainer render`` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from trainer.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def run(*args: str, stdin: str | None = None) -> Any:
    return runner.invoke(app, ["render", *args], input=stdin)


def jobset_of(stdout: str) -> dict[str, Any]:
    docs = list(yaml.safe_load_all(stdout))
    assert docs[-1]["kind"] == "JobSet"
    jobset: dict[str, Any] = docs[-1]
    return jobset


def node_container(jobset: dict[str, Any], job: str = "node") -> dict[str, Any]:
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] == job:
            for ctr in rjob["template"]["spec"]["template"]["spec"]["containers"]:
                if ctr["name"] == "node":
                    return dict(ctr)
    raise AssertionError(f"no node container in {job}")


def test_three_node_torch_example() -> None:
    result = run("-f", str(ROOT / "examples/multi-node.yaml"))
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["ConfigMap", "JobSet"]
    jobset = docs[-1]
    name = jobset["metadata"]["name"]
    env = {e["name"]: e for e in node_container(jobset)["env"]}
    assert env["PET_NNODES"]["value"] == "3"
    assert env["PET_MASTER_ADDR"]["value"] == f"{name}-node-0-0.{name}"
    assert env["PET_MASTER_PORT"]["value"] == "29500"
    assert env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    rjob = jobset["spec"]["replicatedJobs"][0]
    assert rjob["template"]["spec"]["parallelism"] == rjob["template"]["spec"]["completions"] == 3


def test_same_input_same_output_byte_for_byte() -> None:
    args = ("-f", str(ROOT / "examples/runtime-patches.yaml"))
    first, second = run(*args), run(*args)
    assert first.exit_code == 0
    assert first.stdout == second.stdout


def test_mpi_output_differs_only_in_key_material() -> None:
    args = ("-f", str(ROOT / "examples/mpi-deepspeed.yaml"))
    first, second = run(*args), run(*args)
    assert first.exit_code == 0, first.output

    def without_keys(text: str) -> list[dict[str, Any]]:
        docs = list(yaml.safe_load_all(text))
        for d in docs:
            if d["kind"] == "Secret":
                d["data"] = sorted(d["data"])
        return docs

    assert without_keys(first.stdout) == without_keys(second.stdout)
    secret = next(d for d in yaml.safe_load_all(first.stdout) if d["kind"] == "Secret")
    assert secret["type"] == "kubernetes.io/ssh-auth"


def test_json_output() -> None:
    result = run("-o", "json", "-f", str(ROOT / "examples/multi-node.yaml"))
    assert result.exit_code == 0
    objects = json.loads(result.stdout)
    assert [o["kind"] for o in objects] == ["ConfigMap", "JobSet"]


RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: mine, namespace: team}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: busybox}]}}}
"""

JOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: mine-job, namespace: team}
spec:
  runtimeRef: {kind: TrainingRuntime, name: mine}
  trainer: {numNodes: 2}
"""


def test_runtime_from_a_file_and_from_the_same_stream(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(RUNTIME)
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    separate = run("-f", str(job), "--runtime", str(runtime))
    assert separate.exit_code == 0, separate.output
    together = run("-f", "-", stdin=RUNTIME + "---\n" + JOB)
    assert together.exit_code == 0, together.output
    assert separate.stdout == together.stdout
    assert node_container(jobset_of(separate.stdout))["image"] == "busybox"


def test_namespaced_runtime_must_be_in_the_job_namespace() -> None:
    other = JOB.replace("namespace: team", "namespace: elsewhere")
    result = run("-f", "-", stdin=RUNTIME + "---\n" + other)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "TrainingRuntime 'mine' in namespace elsewhere" in result.stderr


def test_unknown_runtime_is_a_one_line_error_with_exit_2() -> None:
    result = run("-f", "-", stdin=JOB.replace("kind: TrainingRuntime, ", ""))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "ClusterTrainingRuntime 'mine'" in lines[0]
    assert "ClusterTrainingRuntime/torch-distributed" in lines[0]


def test_not_a_trainjob_is_exit_2() -> None:
    result = run("-f", "-", stdin=RUNTIME)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "no TrainJob found" in result.stderr
    pod = run("-f", "-", stdin="apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert pod.exit_code == 2
    assert "v1 Pod is not a kind this tool reads" in pod.stderr


def test_malformed_and_invalid_input_is_exit_2(tmp_path: Path) -> None:
    broken = run("-f", "-", stdin="kind: [TrainJob\n")
    assert broken.exit_code == 2 and broken.stdout == ""
    assert "<stdin>: line 2, column 1: YAML syntax error: " in broken.stderr
    invalid = run("-f", "-", stdin=JOB.replace("numNodes: 2", "numNodes: -2"))
    assert invalid.exit_code == 2 and invalid.stdout == ""
    assert "spec.trainer.numNodes" in invalid.stderr
    missing = run("-f", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2
    assert "cannot read" in missing.stderr


def test_build_error_is_exit_1() -> None:
    runtime = RUNTIME.replace(
        "torch: {}",
        "torch: {envInjection: {targets: [{jobName: node, containerNames: [sidecar]}]}}",
    )
    result = run("-f", "-", stdin=runtime + "---\n" + JOB)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert 'envInjection target podSet "node" container "sidecar" not found' in result.stderr


def test_trainjob_status_gate_needs_a_ca_and_renders_the_tls_config(tmp_path: Path) -> None:
    example = str(ROOT / "examples/torch-ddp-cpu/trainjob.yaml")
    missing = run("-f", example, "--feature-gates", "TrainJobStatus=true")
    assert missing.exit_code == 2
    assert "needs --status-server-ca FILE" in missing.output
    unknown = run("-f", example, "--feature-gates", "Nope=true")
    assert unknown.exit_code == 2 and "unrecognized feature gate: Nope" in unknown.output
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n")
    result = run(
        "-f",
        example,
        "--feature-gates",
        "TrainJobStatus=true",
        "--status-server-ca",
        str(ca),
        "--status-server-url",
        "https://status.example:8443",
    )
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    tls = next(d for d in docs if d["metadata"]["name"].endswith("-tls-config"))
    assert tls["data"] == {"ca.crt": ca.read_text()}
    env = {e["name"]: e.get("value") for e in node_container(jobset_of(result.stdout))["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"].startswith("https://status.example:8443/apis/")
    off = run("-f", example)
    assert "KUBEFLOW_TRAINER_SERVER_URL" not in off.stdout
