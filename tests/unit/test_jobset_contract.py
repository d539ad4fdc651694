"""trainer.jobset.contract: one mask of the JobSet fields that stay mutable while
suspended, used by the local API server's JobSet webhook and by the controller."""

from __future__ import annotations

import copy
from typing import Any

from trainer.jobset import contract as jsc
from trainer.jobset.contract import mask_pod_templates
from trainer.jobset.webhook import validate_update
from trainer.machinery.owners import controller_of, controller_reference


def _rjob(pod_meta: dict[str, Any], pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "node",
        "replicas": 1,
        "template": {"spec": {"template": {"metadata": pod_meta, "spec": pod_spec}}},
    }


def _jobset(suspend: bool, rjob: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "spec": {"suspend": suspend, "replicatedJobs": [rjob]}}


BASE = _rjob({"labels": {"a": "1"}}, {"containers": [{"name": "c", "image": "i"}]})
KUEUE = _rjob(
    {"labels": {"a": "2"}, "annotations": {"x": "y"}},
    {
        "containers": [{"name": "c", "image": "i"}],
        "nodeSelector": {"flavor": "f"},
        "tolerations": [{"key": "k"}],
        "schedulingGates": [{"name": "g"}],
    },
)
IMAGE = _rjob({"labels": {"a": "1"}}, {"containers": [{"name": "c", "image": "other"}]})


def test_mask_hides_only_the_mutable_fields() -> None:
    assert mask_pod_templates([BASE]) == mask_pod_templates([KUEUE])
    assert mask_pod_templates([BASE]) != mask_pod_templates([IMAGE])


def test_mask_leaves_its_input_alone() -> None:
    before = copy.deepcopy(KUEUE)
    mask_pod_templates([KUEUE])
    assert before == KUEUE


def test_webhook_allows_mutable_changes_only_while_suspended() -> None:
    assert validate_update(_jobset(True, KUEUE), _jobset(True, BASE)) == []
    assert validate_update(_jobset(False, KUEUE), _jobset(True, BASE)) == []
    [running] = validate_update(_jobset(False, KUEUE), _jobset(False, BASE))
    assert running.path == "spec.replicatedJobs"
    [image] = validate_update(_jobset(True, IMAGE), _jobset(True, BASE))
    assert image.path == "spec.replicatedJobs"


def test_names_follow_jobsets_rules() -> None:
    assert jsc.job_name("train", "node", 2) == "train-node-2"
    assert jsc.pod_dns_name("train", "node", 2, 1, jsc.subdomain("train")) == "train-node-2-1.train"
    assert jsc.subdomain("train", "net") == "net"
    assert jsc.claim_name("data", "train") == "data-train"
    assert jsc.pod_dns_names("train", "node", 2, 2, "net") == [
        jsc.pod_dns_name("train", "node", job, pod, "net") for job in (0, 1) for pod in (0, 1)
    ]


def test_controller_of_reads_malformed_metadata_as_no_owner() -> None:
    owner = controller_reference("t", "u", api_version="trainer.kubeflow.org/v1alpha1", kind="T")
    plain = {"apiVersion": "v1", "kind": "T", "name": "other", "uid": "v"}
    good = {"metadata": {"ownerReferences": ["junk", plain, owner]}}
    assert controller_of(good, "T") == owner
    assert controller_of(good, "JobSet") is None
    for bad in ({"metadata": "x"}, {"metadata": {"ownerReferences": "x"}}, {}):
        assert controller_of(bad) is None
