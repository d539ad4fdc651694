"""TrainingRuntimes and ClusterTrainingRuntimes: on create and on update."""

from __future__ import annotations

import copy
from typing import Any

from .base import (
    BAD_REQUEST,
    CREATED,
    POD_SPEC,
    RUNTIME,
    Case,
    changed,
    invalid,
    named,
    pod_spec,
    with_,
)

# --- runtimes on create -------------------------------------------------------------------


def two_jobs(depends: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    second: dict[str, Any] = {"name": "b", "template": {"spec": {"template": {}}}}
    if depends is not None:
        second["dependsOn"] = [depends]
    return [{"name": "a", "template": {"spec": {"template": {}}}}, second]


def misspelt_runtime() -> dict[str, Any]:
    """A runtime whose pod spec and container each have a misspelt field."""
    out = copy.deepcopy(RUNTIME)
    pod_spec(out)["restartPolicyy"] = "Never"
    pod_spec(out)["containers"][0]["imagePullPolicyy"] = "Always"
    return out


def bad_pod_values() -> dict[str, Any]:
    out = copy.deepcopy(RUNTIME)
    container = pod_spec(out)["containers"][0]
    container["ports"] = [{"containerPort": "http"}]
    container["resources"] = {"limits": {"cpu": "lots"}}
    return out


def unmodelled_pod_fields() -> dict[str, Any]:
    out = copy.deepcopy(RUNTIME)
    pod_spec(out)["hostNetwork"] = True
    pod_spec(out)["containers"][0]["livenessProbe"] = {"exec": {"command": ["true"]}}
    return out


def pod_fields(**fields: Any) -> dict[str, Any]:
    """``RUNTIME`` with ``fields`` set in its pod spec."""
    out = copy.deepcopy(RUNTIME)
    pod_spec(out).update(fields)
    return out


VOLUME_CLAIMS = [{"templates": [{"metadata": {"name": "data"}, "spec": {}}]}]

RUNTIME_CREATES = [
    Case("runtime-valid", RUNTIME, CREATED),
    Case("runtime-valid-namespaced", named(RUNTIME, "rt", "TrainingRuntime"), CREATED),
    Case(
        "runtime-without-template", with_(RUNTIME, "spec", {"mlPolicy": {"numNodes": 1}}), CREATED
    ),
    invalid(
        "runtime-empty-template",
        with_(RUNTIME, "spec.template", {}),
        ("spec.template", "should have at least 1 properties"),
        only=True,
    ),
    invalid(
        "runtime-two-ml-policies",
        with_(RUNTIME, "spec.mlPolicy", {"torch": {}, "mpi": {}}),
        ("spec.mlPolicy", "Only one of the policy can be configured"),
    ),
    invalid(
        "runtime-two-ml-policies-namespaced",
        with_(named(RUNTIME, "rt", "TrainingRuntime"), "spec.mlPolicy", {"jax": {}, "flux": {}}),
        ("spec.mlPolicy", "Only one of the policy can be configured"),
    ),
    invalid(
        "runtime-unknown-mpi-implementation",
        with_(RUNTIME, "spec.mlPolicy", {"mpi": {"mpiImplementation": "Intel"}}),
        ("spec.mlPolicy.mpi.mpiImplementation", '"OpenMPI"'),
    ),
    invalid(
        "runtime-mpi-numProcPerNode-0",
        with_(RUNTIME, "spec.mlPolicy", {"mpi": {"numProcPerNode": 0}}),
        ("spec.mlPolicy.mpi.numProcPerNode", "NumProcPerNode in mpiPolicy must be >= 1"),
    ),
    invalid(
        "runtime-flux-numProcPerNode-0",
        with_(RUNTIME, "spec.mlPolicy", {"flux": {"numProcPerNode": 0}}),
        ("spec.mlPolicy.flux.numProcPerNode", "NumProcPerNode in fluxPolicy must be >= 1"),
    ),
    invalid(
        "runtime-elastic-min-above-max",
        with_(
            RUNTIME, "spec.mlPolicy", {"torch": {"elasticPolicy": {"minNodes": 3, "maxNodes": 2}}}
        ),
        ("spec.mlPolicy.torch.elasticPolicy", "minNodes must be less than or equal to maxNodes"),
    ),
    invalid(
        "runtime-envInjection-into-node",
        with_(
            RUNTIME,
            "spec.mlPolicy",
            {
                "torch": {
                    "envInjection": {"targets": [{"jobName": "node", "containerNames": ["node"]}]}
                }
            },
        ),
        (
            "spec.mlPolicy.torch.envInjection.targets[0].containerNames",
            "containerNames must not include the main node container",
        ),
    ),
    invalid(
        "runtime-unknown-volcano-mode",
        with_(RUNTIME, "spec.podGroupPolicy", {"volcano": {"networkTopology": {"mode": "medium"}}}),
        ("spec.podGroupPolicy.volcano.networkTopology.mode", '"hard"'),
    ),
    invalid(
        "runtime-unknown-dependsOn-status",
        with_(
            RUNTIME, "spec.template.spec.replicatedJobs", two_jobs({"name": "a", "status": "Go"})
        ),
        ("spec.template.spec.replicatedJobs[1].dependsOn[0].status", '"Complete"'),
    ),
    invalid(
        "runtime-startupPolicy-InOrder-with-dependsOn",
        with_(
            RUNTIME,
            "spec.template.spec",
            {
                "startupPolicy": {"startupPolicyOrder": "InOrder"},
                "replicatedJobs": two_jobs({"name": "a", "status": "Ready"}),
            },
        ),
        ("spec.template.spec", "StartupPolicy and DependsOn APIs are mutually exclusive"),
    ),
    invalid(
        "runtime-claim-template-namespace",
        with_(
            RUNTIME,
            "spec.template.spec.volumeClaimPolicies",
            [{"templates": [{"metadata": {"name": "data", "namespace": "other"}, "spec": {}}]}],
        ),
        (
            "spec.template.spec.volumeClaimPolicies[0]",
            "namespace cannot be set for VolumeClaimPolicies templates",
        ),
    ),
    Case(
        "runtime-defaults",
        with_(
            with_(
                RUNTIME,
                "spec.podGroupPolicy",
                {"coscheduling": {}, "volcano": {"networkTopology": {}}},
            ),
            "spec.mlPolicy",
            {"numNodes": 1, "mpi": {}},
        ),
        CREATED,
    ),
    invalid(
        "runtime-empty-spec",
        named(with_(RUNTIME, "spec", {}), "rt", "TrainingRuntime"),
        ("spec", "should have at least 1 properties"),
    ),
    invalid(
        "runtime-duplicate-container-names",
        with_(
            RUNTIME,
            "spec.mlPolicy",
            {
                "torch": {
                    "envInjection": {"targets": [{"jobName": "a", "containerNames": ["x", "x"]}]}
                }
            },
        ),
        ("spec.mlPolicy.torch.envInjection.targets[0].containerNames[1]", ""),
    ),
    invalid(
        "runtime-no-container-names",
        with_(
            RUNTIME,
            "spec.mlPolicy",
            {"torch": {"envInjection": {"targets": [{"jobName": "a", "containerNames": []}]}}},
        ),
        ("spec.mlPolicy.torch.envInjection.targets[0].containerNames", "at least 1 items"),
    ),
    invalid(
        "runtime-duplicate-containers",
        pod_fields(containers=[{"name": "node", "image": "a"}, {"name": "node", "image": "b"}]),
        (f"{POD_SPEC}.containers[1]", ""),
    ),
    invalid(
        "runtime-container-without-name",
        pod_fields(containers=[{"image": "a"}]),
        (f"{POD_SPEC}.containers[0].name", ""),
    ),
    invalid(
        "runtime-node-selector-value",
        pod_fields(nodeSelector={"pool": 1}),
        (f"{POD_SPEC}.nodeSelector.pool", "must be of type string"),
    ),
    invalid(
        "runtime-tier-fraction",
        with_(
            RUNTIME,
            "spec.podGroupPolicy",
            {"volcano": {"networkTopology": {"highestTierAllowed": 1.5}}},
        ),
        ("spec.podGroupPolicy.volcano.networkTopology.highestTierAllowed", 'integer: "number"'),
        ("<nil>", "Checked value must be of type integer (default format)"),
    ),
    Case("runtime-unmodelled-pod-fields", unmodelled_pod_fields(), CREATED),
    Case(
        "runtime-misspelt-pod-fields-strict",
        misspelt_runtime(),
        BAD_REQUEST,
        (
            (f"{POD_SPEC}.restartPolicyy", ""),
            (f"{POD_SPEC}.containers[0].imagePullPolicyy", ""),
        ),
        only=True,
    ),
    Case("runtime-misspelt-pod-fields-warn", misspelt_runtime(), CREATED, field_validation="Warn"),
    Case(
        "runtime-misspelt-pod-fields-ignore", misspelt_runtime(), CREATED, field_validation="Ignore"
    ),
    Case(
        "runtime-odd-field-names-warn",
        with_(with_(RUNTIME, "spec.a\nb", 1), "spec.é", 2),
        CREATED,
        field_validation="Warn",
    ),
    invalid(
        "runtime-bad-pod-values",
        bad_pod_values(),
        (f"{POD_SPEC}.containers[0].ports[0].containerPort", "Invalid value"),
        (f"{POD_SPEC}.containers[0].resources.limits.cpu", 'Invalid value: "lots": '),
    ),
]


FAILURE_POLICY = with_(RUNTIME, "spec.template.spec.failurePolicy", {"maxRestarts": 1})
DEPENDS = with_(
    RUNTIME, "spec.template.spec.replicatedJobs", two_jobs({"name": "a", "status": "Ready"})
)

RUNTIME_UPDATES = [
    changed(
        "runtime-failurepolicy-changed",
        FAILURE_POLICY,
        with_(RUNTIME, "spec.template.spec.failurePolicy", {"maxRestarts": 2}),
        ("spec.template.spec.failurePolicy", "Value is immutable"),
        only=True,
    ),
    changed(
        "runtime-dependson-changed",
        DEPENDS,
        with_(
            RUNTIME,
            "spec.template.spec.replicatedJobs",
            two_jobs({"name": "a", "status": "Complete"}),
        ),
        ("spec.template.spec.replicatedJobs[1].dependsOn", "Value is immutable"),
        only=True,
    ),
    changed("runtime-mlpolicy-changed", RUNTIME, with_(RUNTIME, "spec.mlPolicy.numNodes", 4)),
]

RUNTIME_CASES = RUNTIME_CREATES + RUNTIME_UPDATES
