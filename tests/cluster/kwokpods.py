"""TrainJobs whose pods KWOK runs for a given time, then succeeds or fails
(docs/testbed.md, "Pods on KWOK nodes").

The annotations reach the pods through a runtime patch, as a platform's tool would add them.
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.cluster.conftest import ROOT

STAGE = "stage.kwok.x-k8s.io"


def pod_annotations(
    run_for: str = "2s", exit_code: int | None = None, message: str = ""
) -> dict[str, str]:
    """KWOK's general stages with no random jitter, the pod completing after ``run_for``; with
    ``exit_code``, the bed's failure stage instead (hack/testbed/kwok-stages.yaml)."""
    found = {
        f"pod-create.{STAGE}/jitter-delay": "0s",
        f"pod-ready.{STAGE}/delay": "0s",
        f"pod-ready.{STAGE}/jitter-delay": "0s",
        f"pod-complete.{STAGE}/delay": run_for,
        # KWOK draws a stage's delay between delay and jitter-delay: equal, it is exact.
        f"pod-complete.{STAGE}/jitter-delay": run_for,
    }
    if exit_code is not None:
        found[f"pod-complete.{STAGE}/weight"] = "0"
        found["testbed.kubeflow.org/exit-code"] = str(exit_code)
        found["testbed.kubeflow.org/message"] = message
    return found


def trainjob(
    name: str,
    runtime: str = "torch-distributed",
    num_nodes: int = 2,
    replicated_jobs: tuple[str, ...] = ("node",),
    annotations: dict[str, str] | None = None,
    runtime_kind: str = "ClusterTrainingRuntime",
    **spec: Any,
) -> dict[str, Any]:
    # KWOK deletes a pod after a random part of its grace period: 1 s, not 30 s.
    pod = {
        "metadata": {"annotations": annotations or pod_annotations()},
        "spec": {"terminationGracePeriodSeconds": 1},
    }
    jobs = [{"name": job, "template": {"spec": {"template": pod}}} for job in replicated_jobs]
    patch = {
        "manager": "testbed.kubeflow.org/kwok",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}},
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": runtime, "kind": runtime_kind},
            "trainer": {"numNodes": num_nodes},
            "runtimePatches": [patch],
            **spec,
        },
    }


def fail_fast_runtime(name: str = "fail-fast") -> dict[str, Any]:
    """The installed torch-distributed runtime as a TrainingRuntime whose Jobs retry no failed
    pod (backoffLimit 0): the Job controller would otherwise retry a failing pod six times,
    with its exponential back-off, before JobSet fails."""
    runtime: dict[str, Any] = yaml.safe_load(
        (ROOT / "manifests/base/runtimes/torch-distributed.yaml").read_text()
    )
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": name}
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        job["template"]["spec"]["backoffLimit"] = 0
    return runtime


def dump(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj)
