"""What we write differently from upstream's v2.3.0 controller, on purpose: each test pins one
entry of hack/sidebyside/differences.yaml (docs/side-by-side.md, "Differences"), so a change
that removed a justified difference, or the behaviour behind it, is seen here first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from trainer.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

GANG_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: gang, namespace: ns}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  podGroupPolicy: {coscheduling: {scheduleTimeoutSeconds: 60}}
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
                containers:
                - name: node
                  image: example.com/train:1
                  resources: {limits: {nvidia.com/gpu: 1}}
"""
FLUX_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: flux, namespace: ns}
spec:
  mlPolicy: {numNodes: 2, flux: {numProcPerNode: 1}}
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
                containers:
                - {name: node, image: example.com/lammps:1}
"""


def trainjob(runtime: str, kind: str = "TrainingRuntime", **trainer: Any) -> str:
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime, "kind": kind}}
    if trainer:
        spec["trainer"] = trainer
    return yaml.safe_dump(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "job", "namespace": "ns"},
            "spec": spec,
        }
    )


def render(tmp_path: Path, job: str, runtime: str = "") -> dict[str, dict[str, Any]]:
    args = ["render", "-f", "-"]
    if runtime:
        path = tmp_path / "runtime.yaml"
        path.write_text(runtime)
        args += ["-r", str(path)]
    result = runner.invoke(app, args, input=job)
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def validate(job: str) -> tuple[int, str]:
    result = runner.invoke(app, ["validate", "-f", "-"], input=job)
    return result.exit_code, result.output


def pod_spec(jobset: dict[str, Any], job: str = "node") -> dict[str, Any]:
    rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == job)
    spec: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return spec


def test_side_objects_carry_the_trainjob_name_label(tmp_path: Path) -> None:
    # Our controller watches only the Secrets and ConfigMaps it made (by this label), not every
    # Secret of the cluster.
    objects = render(tmp_path, trainjob("deepspeed-distributed", "ClusterTrainingRuntime"))
    for key in ("Secret/job-mpi-ssh-auth", "ConfigMap/job-mpi-hostfile"):
        assert objects[key]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-name": "job"}


def test_the_mpi_launcher_also_gets_prrte_names(tmp_path: Path) -> None:
    objects = render(tmp_path, trainjob("deepspeed-distributed", "ClusterTrainingRuntime"))
    launcher = pod_spec(objects["JobSet/job"], "launcher")["containers"][0]
    names = [e["name"] for e in launcher["env"]]
    assert "OMPI_MCA_orte_default_hostfile" in names
    assert "PRTE_MCA_prte_default_hostfile" in names  # OpenMPI 5's launcher reads only these


def test_gang_min_resources_count_limits_without_requests(tmp_path: Path) -> None:
    # A container with limits and no requests requests its limits: upstream counts nothing.
    objects = render(tmp_path, trainjob("gang", numNodes=2), GANG_RUNTIME)
    assert objects["PodGroup/job"]["spec"]["minResources"] == {"nvidia.com/gpu": "2"}


def test_env_is_copied_as_written(tmp_path: Path) -> None:
    env = [{"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "x"}}}]
    job = trainjob("torch-distributed", "ClusterTrainingRuntime", env=env)
    node = pod_spec(render(tmp_path, job)["JobSet/job"])["containers"][0]
    assert env[0] in node["env"]  # upstream drops fieldRef.apiVersion (v1, the default)


def test_flux_quotes_each_word_of_the_command(tmp_path: Path) -> None:
    job = trainjob("flux", command=["python3", "-c", "print('a b')"])
    node = pod_spec(render(tmp_path, job, FLUX_RUNTIME)["JobSet/job"])["containers"][0]
    assert node["command"][-1] == "python3 -c 'print('\"'\"'a b'\"'\"')'"


def test_flux_builds_without_num_nodes(tmp_path: Path) -> None:
    # Upstream's Flux plugin dereferences trainer.numNodes and panics when it is unset.
    job = yaml.safe_load(trainjob("flux"))
    job["spec"]["trainer"] = {}  # set, without numNodes
    objects = render(tmp_path, yaml.safe_dump(job), FLUX_RUNTIME)
    assert "ConfigMap/job-flux-entrypoint" in objects
    node = objects["JobSet/job"]["spec"]["replicatedJobs"][0]
    assert node["template"]["spec"]["parallelism"] == 2


def test_rules_upstream_added_after_v2_3_are_kept() -> None:
    code, out = validate(trainjob("torch-distributed", "ClusterTrainingRuntime", numNodes=-1))
    assert code == 1 and "spec.trainer.numNodes" in out and "greater than or equal to 0" in out


def test_names_over_the_budget_are_refused_at_admission() -> None:
    job = yaml.safe_load(trainjob("torch-distributed", "ClusterTrainingRuntime"))
    job["metadata"]["name"] = "a" * 60
    code, out = validate(yaml.safe_dump(job))
    assert code == 1 and "metadata.name" in out


def test_a_wrong_json_type_is_refused_naming_the_field() -> None:
    # Upstream's defaulting webhook fails to decode it first: 400 with Go's json error.
    job = trainjob("torch-distributed", "ClusterTrainingRuntime", numProcPerNode="auto")
    code, out = validate(job)
    assert code == 1 and "spec.trainer.numProcPerNode" in out


def test_xgboost_env_comes_before_the_trainjobs(tmp_path: Path) -> None:
    env = [{"name": "HF_HOME", "value": "/cache"}]
    job = trainjob("xgboost-distributed", "ClusterTrainingRuntime", env=env)
    node = pod_spec(render(tmp_path, job)["JobSet/job"])["containers"][0]
    names = [e["name"] for e in node["env"]]
    assert names.index("DMLC_TRACKER_URI") < names.index("HF_HOME")
