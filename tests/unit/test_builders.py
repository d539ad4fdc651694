"""The shared fixture builders make objects the API server accepts and the runtime renders,
so a test that starts from a builder default tests its own change and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from trainer.api import constants as c
from trainer.api.load import check_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.plugins.registry import render


@pytest.mark.parametrize(
    "data",
    [
        b.trainjob(),
        b.trainjob("demo", namespace="team", num_nodes=2, suspend=True, labels={"a": "b"}),
        b.runtime(),
        b.runtime(kind=c.KIND_TRAINING_RUNTIME, namespace="team", ml_policy={"numNodes": 2}),
        b.jobset(replicated_jobs=[b.replicated_job()], suspend=True),
    ],
    ids=["trainjob", "trainjob-fields", "cluster-runtime", "namespaced-runtime", "jobset"],
)
def test_builder_defaults_pass_the_api_server_checks(data: dict[str, Any]) -> None:
    result = check_object(data)
    assert result.errors == []


def test_a_default_trainjob_on_a_default_runtime_renders_one_jobset() -> None:
    job = b.trainjob_model(runtime="torch", runtime_kind=c.KIND_CLUSTER_TRAINING_RUNTIME)
    (jobset,) = [o for o in render(job, b.cluster_runtime_model()) if o["kind"] == "JobSet"]
    assert [j["name"] for j in jobset["spec"]["replicatedJobs"]] == ["node"]
    assert jobset["metadata"]["name"] == "job"


def test_runtime_model_follows_the_kind() -> None:
    assert isinstance(b.runtime_model(), ClusterTrainingRuntime)
    namespaced = b.runtime_model(kind=c.KIND_TRAINING_RUNTIME, namespace="team")
    assert isinstance(namespaced, TrainingRuntime)
    assert namespaced.metadata is not None and namespaced.metadata.namespace == "team"


def test_named_fields_and_spec_extras_land_where_the_wire_puts_them() -> None:
    data = b.trainjob(
        "x",
        namespace=None,
        runtime="rt",
        runtime_kind=c.KIND_TRAINING_RUNTIME,
        num_nodes=3,
        trainer={"numProcPerNode": 2},
        runtime_patches=[{"manager": "a.io/b"}],
        managedBy="kueue.x-k8s.io/multikueue",
    )
    assert data["metadata"] == {"name": "x"}
    assert data["spec"] == {
        "runtimeRef": {"name": "rt", "kind": c.KIND_TRAINING_RUNTIME},
        "trainer": {"numNodes": 3, "numProcPerNode": 2},
        "runtimePatches": [{"manager": "a.io/b"}],
        "managedBy": "kueue.x-k8s.io/multikueue",
    }
    status = b.jobset(active={"node": 1})["status"]["replicatedJobsStatus"]
    assert status == [
        {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
    ]
