"""``trainer convert`` choosing a built-in ClusterTrainingRuntime, and the pod-equivalence
check behind it (:mod:`trainer.convert.equivalence`, :mod:`trainer.convert.builtin`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView
from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.cli.main import app
from trainer.convert import ConvertError, convert
from trainer.convert.equivalence import expand, first_difference, jobset_view, resolved_env
from trainer.runtime.builtin import builtin_runtime_documents

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "convert"
BUILTINS: dict[str, Any] = {d["metadata"]["name"]: d for d in builtin_runtime_documents()}  # type: ignore[index]


def v1(case: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((GOLDEN / case / "v1.yaml").read_text())
    return data


def pod(replica: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = replica["template"]["spec"]
    return spec


# --- equivalence helpers ------------------------------------------------------------------------
def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "x", "B": "y"}
    assert expand("$(A)-$(B)", env) == "x-y"
    assert expand("$(MISSING)", env) == "$(MISSING)"
    assert expand("$$(A) $$", env) == "$(A) $"


def test_resolved_env_uses_indices_and_earlier_variables_only() -> None:
    container = {
        "env": [
            {"name": "I", "valueFrom": {"fieldRef": {"fieldPath": c.FIELD_PATH_COMPLETION_INDEX}}},
            {"name": "LATER_REF", "value": "$(J)"},
            {"name": "J", "value": "rank-$(I)"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]
    }
    env = resolved_env(container, {c.FIELD_PATH_COMPLETION_INDEX: "3"})
    assert env["I"] == "3" and env["J"] == "rank-3"
    assert env["LATER_REF"] == "$(J)"  # defined after: not expanded, as the kubelet does
    assert env["IP"].startswith("valueFrom:") and "status.podIP" in env["IP"]


def jobset(pod: dict[str, Any], parallelism: int = 2) -> dict[str, Any]:
    return {
        "kind": "JobSet",
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": parallelism, "template": pod}},
                }
            ]
        },
    }


def test_views_ignore_plain_ports_and_default_restart_policy() -> None:
    a = {"spec": {"containers": [{"name": "node", "ports": [{"containerPort": 1}]}]}}
    b = {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "node"}]}}
    assert first_difference(jobset_view(jobset(a)), jobset_view(jobset(b))) is None


def test_views_keep_host_ports_and_per_pod_env() -> None:
    base: dict[str, Any] = {
        "spec": {"containers": [{"name": "node", "ports": [{"containerPort": 1}]}]}
    }
    host = copy.deepcopy(base)
    host["spec"]["containers"][0]["ports"][0]["hostPort"] = 1
    diff = first_difference(jobset_view(jobset(base)), jobset_view(jobset(host)))
    assert (
        diff is not None
        and diff.path == "spec.replicatedJobs.node.pods.0.spec.containers.node.ports"
    )
    indexed = copy.deepcopy(base)
    indexed["spec"]["containers"][0]["env"] = [
        {"name": "R", "valueFrom": {"fieldRef": {"fieldPath": c.FIELD_PATH_COMPLETION_INDEX}}}
    ]
    fixed = copy.deepcopy(base)
    fixed["spec"]["containers"][0]["env"] = [{"name": "R", "value": "0"}]
    diff = first_difference(jobset_view(jobset(indexed)), jobset_view(jobset(fixed)))
    assert diff is not None
    assert diff.path == "spec.replicatedJobs.node.pods.1.spec.containers.node.env.R"
    assert (diff.left, diff.right) == ("1", "0")


# --- which runtime a job gets --------------------------------------------------------------------
def test_simple_workers_only_pytorchjob_references_torch_distributed() -> None:
    result = convert(v1("pytorch-workers-builtin"), builtins=BUILTINS)
    (trainjob,) = result.objects
    assert result.runtime == "ClusterTrainingRuntime/torch-distributed"
    assert trainjob["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    assert trainjob["spec"]["trainer"] == {
        "numNodes": 3,
        "numProcPerNode": 2,
        "image": "ghcr.io/example/ddp:1.0",
        "command": ["torchrun", "/workspace/train.py", "--epochs=3"],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "0"}],
        "resourcesPerNode": {
            "limits": {"nvidia.com/gpu": 2, "memory": "32Gi"},
            "requests": {"cpu": "8", "memory": "32Gi"},
        },
    }
    assert "runtimePatches" not in trainjob["spec"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda r: pod(r)["containers"][0].update(imagePullPolicy="Always"),
            'containers.node.imagePullPolicy as unset instead of "Always"',
        ),
        (
            lambda r: pod(r)["containers"].append({"name": "sidecar", "image": "proxy"}),
            "containers.sidecar as unset",
        ),
        (lambda r: pod(r).update(hostNetwork=True), "spec.hostNetwork as unset instead of true"),
        (
            lambda r: r.update(restartPolicy="Never"),
            'spec.restartPolicy as "OnFailure" instead of "Never"',
        ),
    ],
)
def test_a_field_no_trainjob_can_set_keeps_the_own_runtime(change: Any, reason: str) -> None:
    data = v1("pytorch-workers-builtin")
    change(data["spec"]["pytorchReplicaSpecs"]["Worker"])
    result = convert(data, builtins=BUILTINS)
    assert [o["kind"] for o in result.objects] == ["TrainingRuntime", "TrainJob"]
    assert result.runtime == "TrainingRuntime/ddp-workers"
    (info,) = result.info
    assert info.startswith("uses its own TrainingRuntime: torch-distributed would render ")
    assert reason in info


def test_run_policy_without_a_trainjob_field_keeps_the_own_runtime() -> None:
    data = v1("pytorch-workers-builtin")
    data["spec"]["runPolicy"] = {"backoffLimit": 2}
    result = convert(data, builtins=BUILTINS)
    assert result.runtime == "TrainingRuntime/ddp-workers"
    assert 'spec.failurePolicy as unset instead of {"maxRestarts": 2}' in result.info[0]


def test_runtime_modes() -> None:
    data = v1("pytorch-workers-builtin")
    own = convert(data, builtins=BUILTINS, runtime_mode="own")
    assert [o["kind"] for o in own.objects] == ["TrainingRuntime", "TrainJob"]
    assert own.info == ["uses its own TrainingRuntime (own mode)"]
    assert convert(data, builtins=BUILTINS, runtime_mode="builtin").runtime.endswith(
        "/torch-distributed"
    )
    with pytest.raises(
        ConvertError,
        match=r"PyTorchJob/mnist: no built-in .* fits .*"
        r"spec\.failurePolicy",
    ):
        convert(v1("pytorch-master-3-workers"), builtins=BUILTINS, runtime_mode="builtin")
    with pytest.raises(ConvertError, match="runtime mode 'sometimes' is not one of"):
        convert(data, runtime_mode="sometimes")
    assert convert(data).runtime == "TrainingRuntime/ddp-workers"  # no built-ins given


def test_cli_reports_the_runtime_choice(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "-f",
            str(GOLDEN / "pytorch-workers-builtin" / "v1.yaml"),
            "-f",
            str(GOLDEN / "xgboostjob" / "v1.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout)] == [
        "TrainJob",
        "TrainingRuntime",
        "TrainJob",
    ]
    lines = result.stderr.splitlines()
    assert (
        "info: PyTorchJob/ddp-workers: uses the built-in ClusterTrainingRuntime "
        "torch-distributed: it renders the same pods as the job's own runtime would"
    ) in lines
    assert any(
        line.startswith("info: XGBoostJob/xgboost-dist-iris: uses its own TrainingRuntime: ")
        and 'restartPolicy as "OnFailure" instead of "Never"' in line
        for line in lines
    )
    own = CliRunner().invoke(
        app,
        [
            "convert",
            "--runtime-mode",
            "own",
            "-f",
            str(GOLDEN / "pytorch-workers-builtin" / "v1.yaml"),
        ],
    )
    assert [d["kind"] for d in yaml.safe_load_all(own.stdout)] == ["TrainingRuntime", "TrainJob"]
    bad = CliRunner().invoke(app, ["convert", "--runtime-mode", "x", "-f", str(GOLDEN)])
    assert bad.exit_code == 1 and "--runtime-mode must be one of auto, builtin, own" in bad.stderr


def test_master_and_workers_with_one_template_fit_and_pass_admission() -> None:
    """v1's MASTER_ADDR / RANK env travels in spec.trainer.env; admission accepts it."""
    data = v1("pytorch-workers-builtin")
    specs = data["spec"]["pytorchReplicaSpecs"]
    specs["Master"] = copy.deepcopy(specs["Worker"])
    specs["Master"]["replicas"] = 1
    result = convert(data, builtins=BUILTINS)
    assert result.runtime == "ClusterTrainingRuntime/torch-distributed"
    (wire,) = result.objects
    env = {e["name"]: e for e in wire["spec"]["trainer"]["env"]}
    assert env["MASTER_ADDR"]["value"] == "ddp-workers-node-0-0.ddp-workers"
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == c.FIELD_PATH_COMPLETION_INDEX
    trainjob = TrainJob.from_wire(wire)
    runtime = ClusterTrainingRuntime.from_wire(BUILTINS["torch-distributed"])
    verdict = validate_trainjob(trainjob, None, ClusterView(runtime=runtime))
    assert verdict.allowed, [str(e) for e in verdict.errors]
