"""Invalid objects are rejected offline with the field named, by the same rules the generated
CRDs carry; valid ones are stored with the CRD defaults applied."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from trainer.api import crds
from trainer.api.load import UNKNOWN_FIELD, check_object
from trainer.machinery.errors import FieldError

JOB = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: demo, namespace: default}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2, command: [torchrun, train.py]}
"""
)

RUNTIME = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers: [{name: node, image: busybox}]
"""
)


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``base`` with the dotted ``path`` set to ``value`` (creating maps)."""
    out = copy.deepcopy(base)
    node = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return out


def errors_of(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    return check_object(obj, old).errors


def test_valid_objects_pass() -> None:
    assert errors_of(JOB) == []
    assert errors_of(RUNTIME) == []


INVALID_JOBS = [
    ("wrong type", "spec.trainer.numNodes", "four", "spec.trainer.numNodes", "integer"),
    ("bool as int", "spec.trainer.numNodes", True, "spec.trainer.numNodes", "integer"),
    ("negative numNodes", "spec.trainer.numNodes", -1, "spec.trainer.numNodes", "0"),
    (
        "numProcPerNode 0",
        "spec.trainer.numProcPerNode",
        0,
        "spec.trainer.numProcPerNode",
        "numProcPerNode must be greater than or equal to 1",
    ),
    (
        "64-character name",
        "metadata.name",
        "a" * 64,
        "",
        "metadata.name must be no more than 63 characters",
    ),
    (
        "name not RFC 1035",
        "metadata.name",
        "1-job",
        "",
        "metadata.name must match RFC 1035 DNS label format",
    ),
    (
        "bad storageUri",
        "spec.initializer",
        {"dataset": {"storageUri": "s3://"}},
        "spec.initializer.dataset.storageUri",
        "storageUri may be empty, or it must be a valid URI (scheme://...)",
    ),
    (
        "foreign managedBy",
        "spec.managedBy",
        "someone.else/controller",
        "spec.managedBy",
        "ManagedBy must be trainer.kubeflow.org/trainjob-controller or "
        "kueue.x-k8s.io/multikueue if set",
    ),
    ("deadline 0", "spec.activeDeadlineSeconds", 0, "spec.activeDeadlineSeconds", "1"),
    ("suspend not bool", "spec.suspend", "yes", "spec.suspend", "boolean"),
    ("image too long", "spec.trainer.image", "x" * 501, "spec.trainer.image", "500"),
    ("missing runtimeRef name", "spec.runtimeRef", {}, "spec.runtimeRef.name", ""),
]


@pytest.mark.parametrize(
    ("field", "value", "path", "text"),
    [case[1:] for case in INVALID_JOBS],
    ids=[case[0] for case in INVALID_JOBS],
)
def test_invalid_trainjobs_name_the_field(field: str, value: Any, path: str, text: str) -> None:
    errors = errors_of(with_(JOB, field, value))
    assert errors, "expected the object to be rejected"
    matching = [e for e in errors if e.path == path and text in str(e)]
    assert matching, f"no error at {path!r} mentioning {text!r}; got {[str(e) for e in errors]}"


def test_too_many_runtime_patches() -> None:
    patches = [{"manager": f"example.com/m{i}"} for i in range(17)]
    errors = errors_of(with_(JOB, "spec.runtimePatches", patches))
    assert [e.path for e in errors] == ["spec.runtimePatches"]
    assert "16" in str(errors[0])


def test_duplicate_runtime_patch_managers() -> None:
    patches = [{"manager": "example.com/a"}, {"manager": "example.com/a"}]
    errors = errors_of(with_(JOB, "spec.runtimePatches", patches))
    assert errors and errors[0].path.startswith("spec.runtimePatches")


INVALID_RUNTIMES = [
    (
        "two ML policies",
        "spec.mlPolicy",
        {"torch": {}, "mpi": {}},
        "spec.mlPolicy",
        "Only one of the policy can be configured",
    ),
    (
        "unknown MPI implementation",
        "spec.mlPolicy",
        {"mpi": {"mpiImplementation": "Intel"}},
        "spec.mlPolicy.mpi.mpiImplementation",
        '"OpenMPI"',
    ),
    (
        "MPI numProcPerNode 0",
        "spec.mlPolicy",
        {"mpi": {"numProcPerNode": 0}},
        "spec.mlPolicy.mpi.numProcPerNode",
        "NumProcPerNode in mpiPolicy must be >= 1",
    ),
    (
        "envInjection into node",
        "spec.mlPolicy",
        {"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["node"]}]}}},
        "spec.mlPolicy.torch.envInjection.targets[0].containerNames",
        "containerNames must not include the main node container",
    ),
    (
        "unknown volcano mode",
        "spec.podGroupPolicy",
        {"volcano": {"networkTopology": {"mode": "medium"}}},
        "spec.podGroupPolicy.volcano.networkTopology.mode",
        '"hard"',
    ),
    (
        "unknown dependsOn status",
        "spec.template.spec.replicatedJobs",
        [
            {"name": "a", "template": {"spec": {"template": {}}}},
            {
                "name": "b",
                "dependsOn": [{"name": "a", "status": "Started"}],
                "template": {"spec": {"template": {}}},
            },
        ],
        "spec.template.spec.replicatedJobs[1].dependsOn[0].status",
        '"Complete"',
    ),
    (
        "startupPolicy InOrder with dependsOn",
        "spec.template.spec",
        {
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "replicatedJobs": [
                {"name": "a", "template": {"spec": {"template": {}}}},
                {
                    "name": "b",
                    "dependsOn": [{"name": "a", "status": "Ready"}],
                    "template": {"spec": {"template": {}}},
                },
            ],
        },
        "spec.template.spec",
        "StartupPolicy and DependsOn APIs are mutually exclusive",
    ),
]


@pytest.mark.parametrize(
    ("field", "value", "path", "text"),
    [case[1:] for case in INVALID_RUNTIMES],
    ids=[case[0] for case in INVALID_RUNTIMES],
)
def test_invalid_runtimes_name_the_field(field: str, value: Any, path: str, text: str) -> None:
    errors = errors_of(with_(RUNTIME, field, value))
    matching = [e for e in errors if e.path == path and text in str(e)]
    assert matching, f"no error at {path!r} mentioning {text!r}; got {[str(e) for e in errors]}"


def test_all_errors_are_reported_not_just_the_first() -> None:
    bad = with_(JOB, "spec.trainer", {"numNodes": -3, "numProcPerNode": 0, "image": "x" * 600})
    paths = {e.path for e in errors_of(bad)}
    assert {
        "spec.trainer.numNodes",
        "spec.trainer.numProcPerNode",
        "spec.trainer.image",
    } <= paths


def test_status_rules() -> None:
    job = with_(JOB, "status", {"trainerStatus": {"progressPercentage": 101}})
    errors = errors_of(job)
    assert any(
        e.path == "status.trainerStatus"
        and e.message == "lastUpdatedTime is required when trainerStatus is present"
        for e in errors
    )
    assert any(e.path == "status.trainerStatus.progressPercentage" for e in errors)


def test_unknown_fields_are_errors_like_kubectl_strict() -> None:
    job = with_(JOB, "spec.trainer.numNode", 3)
    result = check_object(job)
    assert [(e.path, e.type) for e in result.errors] == [("spec.trainer.numNode", UNKNOWN_FIELD)]
    lenient = check_object(job, strict_fields=False)
    assert lenient.ok
    assert "numNode" not in lenient.stored["spec"]["trainer"]


def test_unmodelled_pod_fields_are_kept_not_pruned() -> None:
    runtime = copy.deepcopy(RUNTIME)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"][0]["livenessProbe"] = {"exec": {"command": ["true"]}}
    result = check_object(runtime)
    assert result.ok, result.errors
    stored_pod = result.stored["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    assert stored_pod["spec"]["template"]["spec"]["hostNetwork"] is True


class TestImmutability:
    def test_runtime_ref_cannot_change(self) -> None:
        new = with_(JOB, "spec.runtimeRef.name", "other")
        errors = errors_of(new, old=JOB)
        assert [(e.path, e.message) for e in errors] == [("spec.runtimeRef", "field is immutable")]

    def test_trainer_cannot_change(self) -> None:
        new = with_(JOB, "spec.trainer.numNodes", 5)
        assert [e.path for e in errors_of(new, old=JOB)] == ["spec.trainer"]

    def test_suspend_and_metadata_may_change(self) -> None:
        new = with_(with_(JOB, "spec.suspend", True), "metadata.labels", {"a": "b"})
        assert errors_of(new, old=JOB) == []

    def test_adding_a_field_that_was_unset_passes_cel(self) -> None:
        # Kubernetes evaluates transition rules only where both sides have the field.
        new = with_(JOB, "spec.activeDeadlineSeconds", 60)
        assert errors_of(new, old=JOB) == []

    def test_patch_volumes_are_immutable_per_manager(self) -> None:
        def patch(volume: str) -> list[dict[str, Any]]:
            return [
                {
                    "manager": "example.com/p",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "spec": {
                                                        "volumes": [{"name": volume}],
                                                        "nodeSelector": {"pool": volume},
                                                    }
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ]

        old = with_(JOB, "spec.runtimePatches", patch("a"))
        new = with_(JOB, "spec.runtimePatches", patch("b"))
        errors = errors_of(new, old=old)
        assert [e.message for e in errors] == ["field is immutable"]
        assert errors[0].path.endswith("template.spec.volumes")


def test_crd_defaults_are_applied_on_store() -> None:
    stored = check_object(JOB).stored
    assert stored["spec"]["suspend"] is False
    assert stored["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    assert stored["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    runtime = with_(
        RUNTIME,
        "spec.podGroupPolicy",
        {"coscheduling": {}, "volcano": {"networkTopology": {}}},
    )
    runtime = with_(runtime, "spec.mlPolicy", {"numNodes": 1, "mpi": {}})
    stored = check_object(runtime).stored["spec"]
    assert stored["mlPolicy"]["mpi"] == {
        "numProcPerNode": 1,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/root/.ssh",
        "runLauncherAsNode": False,
    }
    assert "numNodes" in stored["mlPolicy"]  # given, not defaulted
    assert stored["podGroupPolicy"]["coscheduling"] == {"scheduleTimeoutSeconds": 60}
    assert stored["podGroupPolicy"]["volcano"]["networkTopology"] == {
        "mode": "hard",
        "highestTierAllowed": 1,
    }
    rjob = stored["template"]["spec"]["replicatedJobs"][0]
    assert (rjob["replicas"], rjob["groupName"]) == (1, "default")


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        schema = schema["items"] if part == "[]" else schema["properties"][part]
    return schema


@pytest.mark.parametrize(
    ("kind", "path", "message"),
    [
        ("TrainJob", "", "metadata.name must be no more than 63 characters"),
        ("TrainJob", "", "metadata.name must match RFC 1035 DNS label format"),
        ("TrainJob", "spec.runtimeRef", "field is immutable"),
        (
            "TrainJob",
            "spec.trainer.numProcPerNode",
            "numProcPerNode must be greater than or equal to 1",
        ),
        ("TrainJob", "spec.managedBy", "field is immutable"),
        ("ClusterTrainingRuntime", "spec.mlPolicy", "Only one of the policy can be configured"),
        (
            "TrainingRuntime",
            "spec.mlPolicy.mpi.numProcPerNode",
            "NumProcPerNode in mpiPolicy must be >= 1",
        ),
        (
            "TrainingRuntime",
            "spec.template.spec",
            "StartupPolicy and DependsOn APIs are mutually exclusive",
        ),
    ],
)
def test_rules_are_in_the_generated_crds(kind: str, path: str, message: str) -> None:
    node = _node(crds.schema_for_kind(kind), path) if path else crds.schema_for_kind(kind)
    messages = [v.get("message") for v in node.get("x-kubernetes-validations", [])]
    assert message in messages


def test_numeric_limits_are_in_the_generated_crds() -> None:
    spec = crds.schema_for_kind("TrainJob")["properties"]["spec"]
    assert spec["properties"]["trainer"]["properties"]["numNodes"]["minimum"] == 0
    assert spec["properties"]["runtimePatches"]["maxItems"] == 16
    assert spec["properties"]["activeDeadlineSeconds"]["minimum"] == 1
    mpi = _node(crds.schema_for_kind("ClusterTrainingRuntime"), "spec.mlPolicy.mpi")
    assert mpi["properties"]["mpiImplementation"]["enum"] == ["OpenMPI", "MPICH", ""]
    assert spec["properties"]["ttlSecondsAfterFinished"]["minimum"] == 0
    run_policy = _node(crds.schema_for_kind("TrainingRuntime"), "spec.runPolicy")["properties"]
    assert run_policy["activeDeadlineSeconds"]["minimum"] == 1
    assert run_policy["ttlSecondsAfterFinished"]["minimum"] == 0
