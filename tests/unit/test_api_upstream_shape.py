"""Verdicts that follow from our CRDs having upstream's shape (Trainer v2.3.0, JobSet v0.12.0)
outside pod specs: what ``trainer validate`` (and the API server, which checks the same
schemas) accepts, refuses and defaults, and its warning for a runtime whose JobSets JobSet's
webhook would refuse."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from trainer.api.load import check_object
from trainer.cli.main import app

# The TrainJob and runtime verdicts of upstream's shape (a runtime without a template, an empty
# one, runtime patch metadata, 253-character job names in the status) are cases of the CRD
# validation table (tests/crd_cases), which kube-apiserver also answers in the cluster tier.


def errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.path, e.type) for e in check_object(obj).errors]


JOBSET = yaml.safe_load(
    """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: default}
spec:
  failurePolicy: {maxRestarts: 3}
  volumeClaimPolicies:
  - templates: [{metadata: {name: data}, spec: {accessModes: [ReadWriteOnce]}}]
    retentionPolicy: {}
status:
  currentInPlaceRestartAttempt: 2
  previousInPlaceRestartAttempt: 1
  replicatedJobsStatus:
  - {name: node, ready: 1, succeeded: 0, failed: 0, active: 1, suspended: 0,
     jobRestarts: [0, 2], jobRestartsCountTowardsMax: [0, 1]}
"""
)


def test_jobset_crd_defaults_and_in_place_restart_status() -> None:
    result = check_object(JOBSET)
    assert result.ok, result.errors
    spec = result.stored["spec"]
    assert spec["failurePolicy"]["restartStrategy"] == "Recreate"
    assert spec["volumeClaimPolicies"][0]["retentionPolicy"] == {"whenDeleted": "Delete"}
    assert result.stored["status"]["replicatedJobsStatus"][0]["jobRestarts"] == [0, 2]
    bad = copy.deepcopy(JOBSET)
    bad["status"]["currentInPlaceRestartAttempt"] = -1
    assert errors(bad) == [("status.currentInPlaceRestartAttempt", "Invalid value")]


def test_jobset_claim_templates_may_not_set_a_namespace() -> None:
    jobset = copy.deepcopy(JOBSET)
    jobset["spec"]["volumeClaimPolicies"][0]["templates"][0]["metadata"]["namespace"] = "other"
    assert [str(e) for e in check_object(jobset).errors] == [
        "spec.volumeClaimPolicies[0]: Invalid value: namespace cannot be set for "
        "VolumeClaimPolicies templates"
    ]


BAD_RULES_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: bad-rules}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      failurePolicy:
        rules:
        - {name: 1st, action: FailJobSet, onJobFailureReasons: [OOMKilled]}
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers: [{name: node, image: busybox}]
"""


def test_validate_warns_about_a_runtime_jobsets_webhook_would_refuse(tmp_path: Path) -> None:
    """Upstream's CRD and runtime webhook accept these rules (JobSet checks them in its own
    webhook), so the runtime is valid; but every JobSet built from it would be refused."""
    path = tmp_path / "runtime.yaml"
    path.write_text(BAD_RULES_RUNTIME)
    result = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 valid, 0 invalid" in result.stdout
    refused = (
        "spec.template.spec: JobSet's webhook will refuse every JobSet built from this runtime"
    )
    assert f"{refused}: invalid failure policy rule name '1st', a failure policy" in result.stderr
    assert (
        f"{refused}: invalid job failure reason 'OOMKilled' in failure policy is not a "
        "recognized job failure reason"
    ) in result.stderr
