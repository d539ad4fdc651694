"""The work queue's TrainJob keys (``namespace/name``), distinct from the informer cache's
``(namespace, name)`` keys."""

from __future__ import annotations

from trainer.controller.handlers import owner_key, queue_key, trainjob_key
from trainer.kube.informer import key_of


def test_queue_key_defaults_the_namespace() -> None:
    assert queue_key("team", "job") == "team/job"
    assert queue_key(None, "job") == "default/job"
    assert queue_key("", "job") == "default/job"


def test_trainjob_and_owner_keys_agree() -> None:
    job = {"metadata": {"namespace": "team", "name": "job"}}
    pod = {
        "metadata": {
            "namespace": "team",
            "name": "job-node-0-0",
            "ownerReferences": [
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "name": "job",
                    "controller": True,
                }
            ],
        }
    }
    assert trainjob_key(job) == owner_key(pod) == "team/job"


def test_cache_key_is_a_pair_with_empty_namespace() -> None:
    assert key_of({"metadata": {"name": "crd"}}) == ("", "crd")
    assert key_of({"metadata": {"namespace": "team", "name": "job"}}) == ("team", "job")
