"""TrainJobs: on create, on update (transition rules) and on status updates."""

from __future__ import annotations

from typing import Any

from .base import (
    BAD_REQUEST,
    CREATED,
    JOB,
    Case,
    changed,
    invalid,
    with_,
)

# --- TrainJobs on create ------------------------------------------------------------------

JOB_CREATES = [
    Case("job-valid", JOB, CREATED),
    invalid(
        "job-numNodes-wrong-type",
        with_(JOB, "spec.trainer.numNodes", "four"),
        ("spec.trainer.numNodes", "integer"),
    ),
    invalid(
        "job-numNodes-bool",
        with_(JOB, "spec.trainer.numNodes", True),
        ("spec.trainer.numNodes", "must be of type int32"),
    ),
    invalid(
        "job-numNodes-negative",
        with_(JOB, "spec.trainer.numNodes", -1),
        ("spec.trainer.numNodes", "0"),
    ),
    invalid(
        "job-numProcPerNode-0",
        with_(JOB, "spec.trainer.numProcPerNode", 0),
        ("spec.trainer.numProcPerNode", "numProcPerNode must be greater than or equal to 1"),
    ),
    invalid(
        "job-name-64-characters",
        with_(JOB, "metadata.name", "a" * 64),
        ("<nil>", "metadata.name must be no more than 63 characters"),
    ),
    invalid(
        "job-name-not-rfc1035",
        with_(JOB, "metadata.name", "1-job"),
        ("<nil>", "metadata.name must match RFC 1035 DNS label format"),
    ),
    invalid(
        "job-name-breaks-both-rules",
        with_(JOB, "metadata.name", "j" * 62 + "-J"),
        ("<nil>", "metadata.name must match RFC 1035 DNS label format"),
        ("<nil>", "metadata.name must be no more than 63 characters"),
    ),
    invalid(
        "job-dataset-storageUri",
        with_(JOB, "spec.initializer", {"dataset": {"storageUri": "s3://"}}),
        (
            "spec.initializer.dataset.storageUri",
            "storageUri may be empty, or it must be a valid URI (scheme://...)",
        ),
    ),
    invalid(
        "job-model-storageUri",
        with_(JOB, "spec.initializer", {"model": {"storageUri": "hf:/model"}}),
        (
            "spec.initializer.model.storageUri",
            "storageUri may be empty, or it must be a valid URI (scheme://...)",
        ),
    ),
    Case(
        "job-storageUris-empty-and-valid",
        with_(JOB, "spec.initializer", {"dataset": {"storageUri": ""}, "model": {}}),
        CREATED,
    ),
    invalid(
        "job-foreign-managedBy",
        with_(JOB, "spec.managedBy", "someone.else/controller"),
        (
            "spec.managedBy",
            "ManagedBy must be trainer.kubeflow.org/trainjob-controller or "
            "kueue.x-k8s.io/multikueue if set",
        ),
    ),
    Case("job-multikueue", with_(JOB, "spec.managedBy", "kueue.x-k8s.io/multikueue"), CREATED),
    invalid(
        "job-deadline-0",
        with_(JOB, "spec.activeDeadlineSeconds", 0),
        ("spec.activeDeadlineSeconds", "1"),
    ),
    invalid(
        "job-suspend-not-bool",
        with_(JOB, "spec.suspend", "yes"),
        ("spec.suspend", "boolean"),
    ),
    invalid(
        "job-image-too-long",
        with_(JOB, "spec.trainer.image", "x" * 501),
        ("spec.trainer.image", "500"),
    ),
    invalid(
        "job-runtimeRef-without-name",
        with_(JOB, "spec.runtimeRef", {}),
        ("spec.runtimeRef.name", ""),
    ),
    invalid(
        "job-17-runtime-patches",
        with_(JOB, "spec.runtimePatches", [{"manager": f"example.com/m{i}"} for i in range(17)]),
        ("spec.runtimePatches", "16"),
        ("<nil>", "some validation rules were not checked"),
        only=True,
    ),
    invalid(
        "job-duplicate-runtime-patch-managers",
        with_(JOB, "spec.runtimePatches", [{"manager": "example.com/a"}] * 2),
        ("spec.runtimePatches[1]", ""),
    ),
    invalid(
        "job-every-trainer-error",
        with_(JOB, "spec.trainer", {"numNodes": -3, "numProcPerNode": 0, "image": "x" * 600}),
        # The too long image blocks the CEL rules: numProcPerNode's is not run.
        ("spec.trainer.numNodes", "should be greater than or equal to 0"),
        ("spec.trainer.image", "may not be more than 500 bytes"),
        ("<nil>", "some validation rules were not checked"),
        only=True,
    ),
    invalid(
        "job-numNodes-and-numProcPerNode",
        with_(JOB, "spec.trainer", {"numNodes": -1, "numProcPerNode": 0}),
        ("spec.trainer.numNodes", "Invalid value: -1"),
        ("spec.trainer.numProcPerNode", "Invalid value: 0"),
        only=True,
    ),
    invalid(
        "job-runtimeRef-empty-name",
        with_(JOB, "spec.runtimeRef.name", ""),
        ("spec.runtimeRef.name", "should be at least 1 chars long"),
    ),
    invalid(
        "job-numNodes-beyond-int32",
        with_(JOB, "spec.trainer.numNodes", 2**31),
        ("<nil>", "Checked value must be of type integer with format int32"),
    ),
    invalid(
        "job-numNodes-fraction",
        with_(JOB, "spec.trainer.numNodes", 1.5),
        ("spec.trainer.numNodes", "must be of type int32"),
    ),
    Case(
        "job-nulls-dropped",
        with_(with_(JOB, "spec.suspend", None), "spec.trainer.image", None),
        CREATED,
    ),
    invalid(
        "job-quantity-not-a-string",
        with_(JOB, "spec.trainer.resourcesPerNode", {"limits": {"cpu": True}}),
        ("spec.trainer.resourcesPerNode.limits.cpu", "must be of type integer,string"),
    ),
    invalid(
        "job-quantity-pattern",
        with_(JOB, "spec.trainer.resourcesPerNode", {"requests": {"memory": "lots"}}),
        ("spec.trainer.resourcesPerNode.requests.memory", "should match"),
    ),
    invalid(
        "job-duplicate-env",
        with_(JOB, "spec.trainer.env", [{"name": "A"}, {"name": "A", "value": "x"}]),
        ("spec.trainer.env[1]", ""),
    ),
    invalid(
        "job-bad-label-and-rule",
        with_(with_(JOB, "metadata.labels", {"a b": "x"}), "spec.trainer.numProcPerNode", 0),
        ("spec.trainer.numProcPerNode", "numProcPerNode must be greater than or equal to 1"),
    ),
    Case(
        "job-unknown-field-strict",
        with_(JOB, "spec.trainer.numNode", 3),
        BAD_REQUEST,
        (("spec.trainer.numNode", 'unknown field "spec.trainer.numNode"'),),
        only=True,
    ),
    Case(
        "job-unknown-field-ignored",
        with_(JOB, "spec.trainer.numNode", 3),
        CREATED,
        field_validation="Ignore",
    ),
]


def runtime_patch(**meta: Any) -> dict[str, Any]:
    """A runtime patch setting ``meta`` on the JobSet, Job and pod templates, and changing a
    container whose name is 200 characters long."""
    pod = {"metadata": meta, "spec": {"containers": [{"name": "c" * 200}]}}
    job = {"name": "node", "template": {"metadata": meta, "spec": {"template": pod}}}
    return {
        "manager": "example.com/me",
        "trainingRuntimeSpec": {"template": {"metadata": meta, "spec": {"replicatedJobs": [job]}}},
    }


JOB_CREATES += [
    Case(
        "job-runtime-patch-metadata-fields",
        with_(
            JOB,
            "spec.runtimePatches",
            [
                runtime_patch(
                    name="n", namespace="ns", finalizers=["example.com/f"], labels={"a": "b"}
                )
            ],
        ),
        CREATED,
    ),
    Case(
        "job-runtime-patch-metadata-misspelt",
        with_(JOB, "spec.runtimePatches", [runtime_patch(finalizer=["example.com/f"])]),
        BAD_REQUEST,
        (
            ("spec.runtimePatches[0].trainingRuntimeSpec.template.metadata.finalizer", ""),
            (
                "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
                ".template.metadata.finalizer",
                "",
            ),
            (
                "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
                ".template.spec.template.metadata.finalizer",
                "",
            ),
        ),
        only=True,
    ),
]


# --- updates ------------------------------------------------------------------------------


def patch_volumes(volume: str) -> list[dict[str, Any]]:
    pod = {"spec": {"volumes": [{"name": volume}], "nodeSelector": {"pool": volume}}}
    job = {"name": "node", "template": {"spec": {"template": pod}}}
    spec = {"template": {"spec": {"replicatedJobs": [job]}}}
    return [{"manager": "example.com/p", "trainingRuntimeSpec": spec}]


WITH_DATASET = with_(JOB, "spec.initializer", {"dataset": {"storageUri": "hf://a/b"}})
WITH_DEADLINE = with_(JOB, "spec.activeDeadlineSeconds", 60)
PROGRESS = {"progressPercentage": 50, "lastUpdatedTime": "2026-01-01T00:00:00Z"}
CONDITION = {
    "type": "Created",
    "status": "True",
    "reason": "JobSetCreated",
    "message": "",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}
COUNTS = {"ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}


JOB_UPDATES = [
    changed(
        "runtimeref-changed",
        JOB,
        with_(JOB, "spec.runtimeRef.name", "other"),
        ("spec.runtimeRef", "field is immutable"),
        only=True,
    ),
    changed(
        "trainer-changed",
        JOB,
        with_(JOB, "spec.trainer.numNodes", 5),
        ("spec.trainer", "field is immutable"),
        only=True,
    ),
    changed(
        "suspend-and-labels-changed",
        JOB,
        with_(with_(JOB, "spec.suspend", True), "metadata.labels", {"a": "b"}),
    ),
    changed("deadline-added", JOB, WITH_DEADLINE),
    changed(
        "deadline-changed",
        WITH_DEADLINE,
        with_(JOB, "spec.activeDeadlineSeconds", 120),
        ("spec.activeDeadlineSeconds", "field is immutable"),
        only=True,
    ),
    changed(
        "initializer-changed",
        WITH_DATASET,
        with_(JOB, "spec.initializer", {"dataset": {"storageUri": "hf://a/c"}}),
        ("spec.initializer", "field is immutable"),
        only=True,
    ),
    changed(
        "managedby-changed",
        JOB,
        with_(JOB, "spec.managedBy", "kueue.x-k8s.io/multikueue"),
        ("spec.managedBy", "field is immutable"),
        only=True,
    ),
    changed(
        "patch-volumes-changed",
        with_(JOB, "spec.runtimePatches", patch_volumes("a")),
        with_(JOB, "spec.runtimePatches", patch_volumes("b")),
        (
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
            ".template.spec.template.spec.volumes",
            "field is immutable",
        ),
        only=True,
    ),
    changed(
        "patch-manager-changed",
        with_(JOB, "spec.runtimePatches", [{"manager": "example.com/a"}]),
        with_(JOB, "spec.runtimePatches", [{"manager": "example.com/b"}]),
    ),
    changed(
        "trainer-status-without-time",
        JOB,
        with_(JOB, "status", {"trainerStatus": {"progressPercentage": 101}}),
        ("status.trainerStatus", "lastUpdatedTime is required when trainerStatus is present"),
        ("status.trainerStatus.progressPercentage", ""),
        status=True,
    ),
    changed("trainer-status-valid", JOB, with_(JOB, "status.trainerStatus", PROGRESS), status=True),
    changed(
        "jobs-status-name-253",
        JOB,
        with_(JOB, "status.jobsStatus", [{"name": "j" * 253, **COUNTS}]),
        status=True,
    ),
    changed(
        "jobs-status-name-254",
        JOB,
        with_(JOB, "status.jobsStatus", [{"name": "j" * 254, **COUNTS}]),
        ("status.jobsStatus[0].name", ""),
        status=True,
    ),
    changed(
        "trainer-status-bad-time",
        JOB,
        with_(JOB, "status.trainerStatus", {"lastUpdatedTime": "yesterday"}),
        ("status.trainerStatus.lastUpdatedTime", "must be of type date-time"),
        status=True,
    ),
    changed(
        "condition-bad-status",
        JOB,
        with_(JOB, "status.conditions", [CONDITION | {"status": "Maybe", "reason": ""}]),
        ("status.conditions[0].status", '"True"'),
        ("status.conditions[0].reason", "should be at least 1 chars long"),
        status=True,
    ),
    changed(
        "status-empty",
        JOB,
        with_(JOB, "status", {}),
        ("status", "should have at least 1 properties"),
        status=True,
    ),
]

TRAINJOB_CASES = JOB_CREATES + JOB_UPDATES
