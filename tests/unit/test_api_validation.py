"""Invalid objects are rejected offline with the field named, by the same rules the generated
CRDs carry; valid ones are stored with the CRD defaults applied. The cases are the CRD
validation table's (tests/crd_cases), which the cluster tier also sends to kube-apiserver."""

from __future__ import annotations

from typing import Any

import pytest

from tests.crd_cases import BY_ID, CASES, Case
from trainer.api import crds
from trainer.api.load import UNKNOWN_FIELD, check_object
from trainer.machinery.errors import FieldError


def errors_of(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
    return check_object(obj, old).errors


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_check_object_gives_the_api_servers_verdict_naming_the_fields(case: Case) -> None:
    """Every case of the CRD validation table (tests/crd_cases): ``trainer validate`` accepts
    what the API server accepts (kubectl's strict field validation unless the case says
    otherwise) and names each field the table lists, with the text given."""
    strict = case.field_validation == "Strict"
    result = check_object(case.obj, case.old, strict_fields=strict)
    errors = [str(e) for e in result.errors]
    assert result.ok == case.ok, errors
    for path, text in case.errors:
        matching = [e for e in result.errors if e.path == path and text in str(e)]
        assert matching, f"no error at {path!r} mentioning {text!r}; got {errors}"
    if case.only:
        assert len(result.errors) == len(case.errors), errors


def test_too_many_runtime_patches_names_the_limit() -> None:
    error = errors_of(BY_ID["job-17-runtime-patches"].obj)[0]
    assert str(error) == "spec.runtimePatches: Too many: 17: must have at most 16 items"


def test_unknown_fields_are_errors_like_kubectl_strict() -> None:
    job = BY_ID["job-unknown-field-ignored"].obj
    result = check_object(job)
    assert [(e.path, e.type) for e in result.errors] == [("spec.trainer.numNode", UNKNOWN_FIELD)]
    lenient = check_object(job, strict_fields=False)
    assert lenient.ok
    assert "numNode" not in lenient.stored["spec"]["trainer"]


def test_unmodelled_pod_fields_are_kept_not_pruned() -> None:
    result = check_object(BY_ID["runtime-unmodelled-pod-fields"].obj)
    assert result.ok, result.errors
    stored_pod = result.stored["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    assert stored_pod["spec"]["template"]["spec"]["hostNetwork"] is True


def test_a_transition_rule_names_the_field_it_guards() -> None:
    case = BY_ID["patch-volumes-changed"]
    errors = errors_of(case.obj, case.old)
    assert [e.message for e in errors] == ["field is immutable"]
    assert errors[0].path.endswith("template.spec.volumes")


def test_crd_defaults_are_applied_on_store() -> None:
    stored = check_object(BY_ID["job-valid"].obj).stored
    assert stored["spec"]["suspend"] is False
    assert stored["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    assert stored["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    runtime = BY_ID["runtime-defaults"].obj
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
