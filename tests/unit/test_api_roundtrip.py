"""Lossless round trip: loading any valid object and dumping it gives back equal data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from tests.strategies import wire_data
from trainer.api.load import load_documents, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.jobset.types import JobSet
from trainer.machinery.models.base import K8sModel

ROOT = Path(__file__).resolve().parents[2]
REPO_YAML = sorted(p for d in ("runtimes", "examples") for p in (ROOT / d).rglob("*.yaml"))


def roundtrip(data: dict[str, Any]) -> dict[str, Any]:
    return parse_object(data).to_wire()


def test_repo_has_yaml_to_check() -> None:
    assert len(REPO_YAML) >= 15


@pytest.mark.parametrize("path", REPO_YAML, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repo_yaml_round_trips(path: Path) -> None:
    docs = load_documents(path.read_text(), str(path))
    assert docs
    for doc in docs:
        assert roundtrip(doc.data) == doc.data


# Upstream-shaped objects, written for these tests in the shapes upstream users apply.
TORCH_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-distributed
  labels: {trainer.kubeflow.org/framework: torch}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
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
                  image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
"""

MULTI_NODE = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: fine-tune, namespace: team-a}
spec:
  runtimeRef:
    {apiGroup: trainer.kubeflow.org, kind: ClusterTrainingRuntime, name: torch-distributed}
  trainer:
    numNodes: 4
    numProcPerNode: 2
    command: [torchrun, train.py]
    args: ["--epochs", "3"]
    resourcesPerNode:
      requests: {cpu: 500m, memory: 4Gi, nvidia.com/gpu: 2}
      limits: {cpu: 2, memory: 8Gi}
"""

RUNTIME_PATCHES = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: patched}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    env:
    - {name: CUSTOM, value: "1"}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
  runtimePatches:
  - manager: platform.example.com/defaults
    time: "2026-01-02T03:04:05Z"
    trainingRuntimeSpec:
      template:
        metadata:
          labels: {team: ml}
          annotations: {prometheus.io/scrape: "true"}
        spec:
          replicatedJobs:
          - name: node
            template:
              metadata: {labels: {job-level: "yes"}}
              spec:
                template:
                  metadata: {annotations: {a: b}}
                  spec:
                    serviceAccountName: trainer-sa
                    nodeSelector: {node-type: gpu}
                    tolerations:
                    - {key: gpu, operator: Exists, effect: NoSchedule}
                    affinity:
                      nodeAffinity:
                        requiredDuringSchedulingIgnoredDuringExecution:
                          nodeSelectorTerms:
                          - matchExpressions:
                            - {key: zone, operator: In, values: [a, b]}
                    schedulingGates: [{name: example.com/gate}]
                    volumes:
                    - name: data
                      persistentVolumeClaim: {claimName: data}
                    containers:
                    - name: sidecar
                      volumeMounts: [{name: data, mountPath: /data}]
                      securityContext: {runAsNonRoot: true}
"""

KUEUE_SUSPENDED = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: queued
  labels: {kueue.x-k8s.io/queue-name: team-a}
spec:
  suspend: true
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 3}
  runtimePatches:
  - manager: kueue.x-k8s.io/manager
    trainingRuntimeSpec: {template: {spec: {}}}
status:
  conditions:
  - type: Suspended
    status: "True"
    reason: Suspended
    message: TrainJob is suspended
    lastTransitionTime: "2026-01-01T00:00:00Z"
  jobsStatus:
  - {name: node, ready: 0, succeeded: 0, failed: 0, active: 0, suspended: 1}
"""

MPI_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: deepspeed}
spec:
  mlPolicy:
    numNodes: 1
    mpi: {numProcPerNode: 1, mpiImplementation: OpenMPI, sshAuthMountPath: /home/mpiuser/.ssh,
          runLauncherAsNode: true}
  template:
    spec:
      network: {publishNotReadyAddresses: true}
      successPolicy: {operator: All, targetReplicatedJobs: [launcher]}
      replicatedJobs:
      - name: node
        template:
          spec:
            template:
              spec:
                securityContext: {fsGroup: 1000}
                containers:
                - name: node
                  image: ghcr.io/kubeflow/trainer/deepspeed-runtime
                  securityContext: {runAsUser: 1000}
                  command: [/usr/sbin/sshd]
                  args: [-De, -f, /home/mpiuser/.sshd_config]
                  readinessProbe: {tcpSocket: {port: 2222}, initialDelaySeconds: 5}
      - name: launcher
        dependsOn: [{name: node, status: Ready}]
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            template:
              spec:
                containers:
                - {name: node, image: ghcr.io/kubeflow/trainer/deepspeed-runtime}
"""

UPSTREAM_SHAPES = {
    "torch-runtime": TORCH_RUNTIME,
    "multi-node": MULTI_NODE,
    "runtime-patches": RUNTIME_PATCHES,
    "kueue-suspended": KUEUE_SUSPENDED,
    "mpi-run-launcher-as-node": MPI_RUNTIME,
}


@pytest.mark.parametrize("text", UPSTREAM_SHAPES.values(), ids=list(UPSTREAM_SHAPES))
def test_upstream_shapes_round_trip(text: str) -> None:
    data = yaml.safe_load(text)
    assert roundtrip(data) == data


def test_fields_we_never_model_survive() -> None:
    pod_spec: dict[str, Any] = {
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "someFutureField": {"nested": [1, "two", None, {"x": 1.5}]},
        "volumes": [
            {"name": "h", "hostPath": {"path": "/data", "type": "Directory"}},
            {"name": "n", "nfs": {"server": "nfs.local", "path": "/export"}},
            {"name": "c", "csi": {"driver": "x.csi", "volumeAttributes": {"a": "b"}}},
            {"name": "d", "downwardAPI": {"items": [{"path": "labels"}]}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
            {"name": "s", "secret": {"secretName": "s", "defaultMode": 256, "futureKnob": 1}},
        ],
        "containers": [
            {
                "name": "node",
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}},
                "ports": [{"containerPort": 29500, "name": "c10d", "protocol": "TCP"}],
                "env": [
                    {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}
                ],
                "resources": {"limits": {"cpu": 0.5, "memory": "1Gi"}, "claims": [{"name": "g"}]},
                "tty": True,
            }
        ],
    }
    data = yaml.safe_load(TORCH_RUNTIME)
    data["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ] = pod_spec
    data["spec"]["template"]["spec"]["futureJobSetField"] = {"x": 1}
    data["status"] = {"something": "new"}
    assert roundtrip(data) == data


def test_objects_stored_under_v2_1_still_parse() -> None:
    old_job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "old"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "labels": {"a": "b"},
            "annotations": {"c": "d"},
            "trainer": {"numNodes": 2, "numProcPerNode": "auto"},
            "podTemplateOverrides": [
                {"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"x": "y"}}}
            ],
        },
        "status": {"conditions": [], "jobsStatus": []},
    }
    job = parse_object(old_job)
    assert isinstance(job, TrainJob)
    assert job.spec is not None and job.spec.trainer is not None
    assert job.spec.trainer.num_proc_per_node == "auto"
    assert "podTemplateOverrides" in job.spec.extras()
    assert job.to_wire() == old_job

    old_runtime = yaml.safe_load(TORCH_RUNTIME)
    old_runtime["spec"]["mlPolicy"]["torch"] = {
        "numProcPerNode": "auto",
        "elasticPolicy": {"minNodes": 1, "maxNodes": 4, "maxRestarts": 3},
    }
    assert roundtrip(old_runtime) == old_runtime


def test_wrong_types_are_reported_with_the_field() -> None:
    data = yaml.safe_load(MULTI_NODE)
    data["spec"]["trainer"]["numNodes"] = "four"
    data["spec"]["suspend"] = "yes"
    with pytest.raises(ValueError) as err:
        parse_object(data)
    message = str(err.value)
    assert "spec.trainer.numNodes" in message
    assert "spec.suspend" in message


def test_apiversion_and_kind_are_always_written() -> None:
    job = TrainJob.model_validate({"metadata": {"name": "x"}})
    wire = job.to_wire()
    assert wire["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert wire["kind"] == "TrainJob"
    assert list(wire)[:2] == ["apiVersion", "kind"]


def test_unset_fields_read_their_crd_defaults() -> None:
    job = parse_object(yaml.safe_load(KUEUE_SUSPENDED))
    assert isinstance(job, TrainJob) and job.spec is not None
    assert job.spec.managed_by == "trainer.kubeflow.org/trainjob-controller"
    assert job.spec.runtime_ref.kind == "ClusterTrainingRuntime"
    assert job.spec.runtime_ref.api_group == "trainer.kubeflow.org"
    runtime = parse_object(yaml.safe_load(TORCH_RUNTIME))
    assert isinstance(runtime, ClusterTrainingRuntime) and runtime.spec is not None
    rjob = runtime.spec.template.spec.replicated_jobs[0]  # type: ignore[union-attr,index]
    assert (rjob.replicas, rjob.group_name) == (1, "default")


GENERATED = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(
    "model", [TrainJob, TrainingRuntime, ClusterTrainingRuntime, JobSet], ids=lambda m: m.__name__
)
def test_generated_objects_round_trip(model: type[K8sModel]) -> None:
    @GENERATED
    @given(wire_data(model))
    def check(data: dict[str, Any]) -> None:
        expected = {
            "apiVersion": model.model_fields["api_version"].default,
            "kind": model.model_fields["kind"].default,
            **data,
        }
        assert model.from_wire(data).to_wire() == expected

    check()
