"""Quantities, the strategic merge, resource counting, naming, snapshots and status."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests import builders as b
from trainer.api.load import parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.jobset import budget
from trainer.jobset.types import JobSet, JobSetSpec
from trainer.machinery.models.core import ResourceRequirements
from trainer.machinery.quantity import Quantity, QuantityError
from trainer.plugins.status import status_from_jobset
from trainer.runtime.assemble import new_info
from trainer.runtime.info import BuildError
from trainer.runtime.merge import strategic_merge
from trainer.runtime.resources import cpu_count, gpu_count, pod_requests
from trainer.runtime.snapshot import build_snapshot, read_snapshot


@pytest.mark.parametrize(
    ("raw", "rounded_up"),
    [("0.7", 1), (0.7, 1), ("2.5", 3), ("2500m", 3), ("3.7", 4), ("4", 4), (2, 2), ("100m", 1)],
)
def test_cpu_rounds_up(raw: str | float, rounded_up: int) -> None:
    assert cpu_count(ResourceRequirements(requests={"cpu": raw})) == rounded_up


def test_cpu_falls_back_to_limits_when_request_is_zero() -> None:
    res = ResourceRequirements(requests={"cpu": "0"}, limits={"cpu": "1500m"})
    assert cpu_count(res) == 2
    assert cpu_count(None) == 0


@pytest.mark.parametrize(
    ("requests", "limits", "gpus"),
    [
        ({"nvidia.com/gpu": 2}, None, 2),
        (None, {"nvidia.com/gpu": "4"}, 4),
        ({"amd.com/gpu": 1}, {"nvidia.com/gpu": 8}, 1),  # requests before limits
        ({"example.com/GPU-a100": 3}, None, 3),  # case-insensitive
        ({"cpu": 4, "memory": "8Gi"}, None, 0),
        ({"b.com/gpu": 2, "a.com/gpu": 5}, None, 5),  # sorted by name: deterministic
    ],
)
def test_gpu_detection(
    requests: dict[str, Any] | None, limits: dict[str, Any] | None, gpus: int
) -> None:
    assert gpu_count(ResourceRequirements(requests=requests, limits=limits)) == gpus


@pytest.mark.parametrize(
    ("values", "printed"),
    [
        (["4Gi"] * 102, "408Gi"),
        (["1"] * 102, "102"),
        (["500m", "500m", "250m"], "1250m"),
        (["1Gi", "512Mi"], "1536Mi"),
        (["1k", "1"], "1001"),
        (["1.5"], "1500m"),
        (["0"], "0"),
        (["1e3"], "1e3"),
        (["100Mi", "100M"], "204857600"),
    ],
)
def test_quantity_sum_prints_canonically(values: list[str], printed: str) -> None:
    total = Quantity.parse(values[0])
    for v in values[1:]:
        total = total + Quantity.parse(v)
    assert str(total) == printed


def test_quantity_rejects_garbage() -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        Quantity.parse("lots")


def test_pod_requests_max_of_init_and_sum_of_containers_plus_overhead() -> None:
    pod = parse_object(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "n",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "initContainers": [
                                            {"name": "i", "resources": {"requests": {"cpu": "3"}}}
                                        ],
                                        "containers": [
                                            {"name": "a", "resources": {"requests": {"cpu": "1"}}},
                                            {
                                                "name": "b",
                                                "resources": {
                                                    "requests": {"cpu": "1", "memory": "1Gi"}
                                                },
                                            },
                                        ],
                                        "overhead": {"cpu": "250m"},
                                    }
                                }
                            }
                        },
                    }
                ]
            },
        }
    )
    assert isinstance(pod, JobSet)
    spec = pod.spec.replicated_jobs[0].template.spec.template.spec  # type: ignore[union-attr,index]
    got = {k: str(v) for k, v in pod_requests(spec).items()}  # type: ignore[arg-type]
    assert got == {"cpu": "3250m", "memory": "1Gi"}


class TestStrategicMerge:
    def test_lists_merge_by_key_and_new_items_append(self) -> None:
        base = {"containers": [{"name": "a", "image": "x"}, {"name": "b"}]}
        patch = {"containers": [{"name": "b", "image": "y"}, {"name": "c"}]}
        assert strategic_merge(base, patch) == {
            "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}, {"name": "c"}]
        }

    def test_maps_merge_and_null_deletes(self) -> None:
        base = {"nodeSelector": {"a": "1", "b": "2"}}
        assert strategic_merge(base, {"nodeSelector": {"b": None, "c": "3"}}) == {
            "nodeSelector": {"a": "1", "c": "3"}
        }

    def test_tolerations_and_command_are_replaced(self) -> None:
        base = {"tolerations": [{"key": "a"}], "command": ["x", "y"]}
        patch = {"tolerations": [{"key": "b"}], "command": ["z"]}
        assert strategic_merge(base, patch) == patch

    def test_volume_mounts_merge_by_mount_path_and_env_by_name(self) -> None:
        base = {
            "volumeMounts": [{"name": "a", "mountPath": "/a"}],
            "env": [{"name": "X", "value": "1"}],
        }
        patch = {
            "volumeMounts": [{"name": "b", "mountPath": "/a"}, {"name": "c", "mountPath": "/c"}],
            "env": [{"name": "X", "value": "2"}],
        }
        assert strategic_merge(base, patch) == {
            "volumeMounts": [{"name": "b", "mountPath": "/a"}, {"name": "c", "mountPath": "/c"}],
            "env": [{"name": "X", "value": "2"}],
        }

    def test_directives(self) -> None:
        base = {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b"}], "affinity": {"x": 1}}
        patch = {
            "volumes": [{"name": "a", "$patch": "delete"}],
            "affinity": {"$patch": "replace", "y": 2},
        }
        assert strategic_merge(base, patch) == {"volumes": [{"name": "b"}], "affinity": {"y": 2}}

    def test_inputs_are_not_modified(self) -> None:
        base = {"env": [{"name": "X", "value": "1"}]}
        patch = {"env": [{"name": "X", "value": "2"}]}
        strategic_merge(base, patch)
        assert base == {"env": [{"name": "X", "value": "1"}]}


RUNTIME = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt}
spec:
  mlPolicy: {numNodes: 4, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: dataset-initializer
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
          spec: {parallelism: 0, template: {spec: {containers: [{name: dataset-initializer}]}}}
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {parallelism: 7, template: {spec: {containers: [{name: node}]}}}
"""
)


def job(**spec: Any) -> TrainJob:
    return b.trainjob_model("demo", namespace="ns", uid="u-1", runtime="rt", **spec)


def test_pod_set_counts_before_plugins() -> None:
    info = new_info(job(), ClusterTrainingRuntime.from_wire(RUNTIME))
    # parallelism 0 is clamped to 1; the trainer step takes mlPolicy.numNodes.
    assert [(p.name, p.ancestor, p.count) for p in info.pod_sets] == [
        ("dataset-initializer", "dataset-initializer", 1),
        ("node", "trainer", 4),
    ]


def test_patch_order_is_kept_and_runtime_job_order_restored() -> None:
    patches = [
        {
            "manager": f"example.com/{i}",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {"template": {"spec": {"nodeSelector": {"k": str(i)}}}}
                                },
                            },
                            {"name": "dataset-initializer"},
                        ]
                    }
                }
            },
        }
        for i in range(3)
    ]
    info = new_info(job(runtimePatches=patches), ClusterTrainingRuntime.from_wire(RUNTIME))
    assert [p.name for p in info.pod_sets] == ["dataset-initializer", "node"]
    assert info.pod_set("node").pod_spec.node_selector == {"k": "2"}  # type: ignore[union-attr]


class TestNaming:
    def spec(self, name: str, replicas: int, completions: int) -> JobSetSpec:
        return JobSetSpec.from_wire(
            {
                "replicatedJobs": [
                    {
                        "name": name,
                        "replicas": replicas,
                        "template": {"spec": {"completions": completions, "template": {}}},
                    }
                ]
            }
        )

    @pytest.mark.parametrize(
        ("rjob", "completions", "limit"),
        [
            ("node", 10, 48),
            ("node", 100, 47),
            ("dataset-initializer", 1, 33),
            ("model-initializer", 1, 35),
            ("launcher", 1, 44),
            ("cache-initializer", 1, 35),
            ("cache-initializer", 11, 34),
        ],
    )
    def test_worked_limits_of_the_spec(self, rjob: str, completions: int, limit: int) -> None:
        assert budget.max_name_length("x", self.spec(rjob, 1, completions)) == limit

    def test_too_long_names_are_listed_longest_first(self) -> None:
        long = budget.too_long("a" * 34, self.spec("dataset-initializer", 1, 1))
        assert [(g.kind, len(g.name)) for g in long] == [("Pod", 64)]
        longer = budget.too_long("a" * 40, self.spec("dataset-initializer", 1, 1))
        assert [(g.kind, len(g.name)) for g in longer] == [("Pod", 70), ("hostname", 64)]
        assert budget.too_long("short", self.spec("node", 1, 3)) == []


def test_snapshot_round_trip_and_checks() -> None:
    runtime = ClusterTrainingRuntime.from_wire(RUNTIME)
    trainjob = job()
    cm = build_snapshot(trainjob, runtime)
    assert cm["metadata"]["name"] == "demo-runtime-snapshot"
    assert read_snapshot(trainjob, cm).to_wire() == runtime.to_wire()

    other_owner = {**cm, "metadata": {**cm["metadata"], "ownerReferences": []}}
    with pytest.raises(BuildError, match=r"invalid runtime snapshot: .*owned by another object"):
        read_snapshot(trainjob, other_owner)
    with pytest.raises(BuildError, match='missing "runtime" data key'):
        read_snapshot(trainjob, {**cm, "data": {}})
    with pytest.raises(BuildError, match="cannot decode"):
        read_snapshot(trainjob, {**cm, "data": {"runtime": "a: [1"}})
    moved = TrainJob.from_wire(
        {**trainjob.to_wire(), "spec": {"runtimeRef": {"name": "elsewhere"}}}
    )
    with pytest.raises(BuildError, match="wrong runtime"):
        read_snapshot(moved, cm)


def test_status_from_jobset_copies_terminal_conditions_and_counts() -> None:
    trainjob = TrainJob.from_wire(
        {
            "metadata": {"name": "demo"},
            "spec": {"runtimeRef": {"name": "rt"}},
            "status": {
                "conditions": [
                    {
                        "type": "Suspended",
                        "status": "False",
                        "reason": "Resumed",
                        "message": "TrainJob is resumed",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "trainerStatus": {
                    "progressPercentage": 40,
                    "lastUpdatedTime": "2026-01-01T00:00:01Z",
                },
            },
        }
    )
    jobset = JobSet.from_wire(
        {
            "status": {
                "conditions": [
                    {
                        "type": "Completed",
                        "status": "True",
                        "reason": "AllJobsCompleted",
                        "message": "jobset completed successfully",
                        "lastTransitionTime": "2026-01-01T01:00:00Z",
                        "observedGeneration": 3,
                    },
                    {
                        "type": "Suspended",
                        "status": "True",
                        "reason": "SuspendedJobs",
                        "message": "jobset is suspended",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    },
                ],
                "replicatedJobsStatus": [
                    {
                        "name": "node",
                        "ready": 0,
                        "succeeded": 2,
                        "failed": 0,
                        "active": 0,
                        "suspended": 0,
                    },
                    {
                        "name": "init",
                        "ready": 0,
                        "succeeded": 1,
                        "failed": 0,
                        "active": 0,
                        "suspended": 0,
                    },
                ],
            }
        }
    )
    status = status_from_jobset(trainjob, jobset).to_wire()
    assert [c["type"] for c in status["conditions"]] == ["Suspended", "Complete"]
    assert status["conditions"][1] == {
        "type": "Complete",
        "status": "True",
        "reason": "AllJobsCompleted",
        "message": "jobset completed successfully",
        "lastTransitionTime": "2026-01-01T01:00:00Z",
    }
    assert [j["name"] for j in status["jobsStatus"]] == ["node", "init"]
    assert status["trainerStatus"]["progressPercentage"] == 40
