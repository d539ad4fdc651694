"""trainer.machinery.merge_keys: the runtime merge and the local API server's strategic merge patch
read one table, so a pod-template list merges the same way in both."""

from __future__ import annotations

from trainer.local.apiserver.patch import strategic_merge_patch
from trainer.machinery import merge_keys as mk
from trainer.runtime.merge import strategic_merge


def test_tables_share_the_pod_template_keys() -> None:
    for field, key in mk.POD_TEMPLATE_MERGE_KEYS.items():
        assert mk.JOBSET_MERGE_KEYS[field] == key
        assert mk.CORE_MERGE_KEYS[field] == key
    assert mk.JOBSET_MERGE_KEYS["replicatedJobs"] == "name"
    assert mk.CORE_MERGE_KEYS["ownerReferences"] == "uid"
    assert mk.CORE_MERGE_KEYS["finalizers"] == mk.SET
    assert "tolerations" not in mk.JOBSET_MERGE_KEYS and "tolerations" not in mk.CORE_MERGE_KEYS


def test_both_layers_merge_env_by_name_and_replace_tolerations() -> None:
    live = {
        "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}], "image": "i"}],
        "tolerations": [{"key": "k1"}],
    }
    patch = {
        "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}],
        "tolerations": [{"key": "k2"}],
    }
    want = {
        "containers": [
            {
                "name": "a",
                # An item the original lacks goes first, as kube-apiserver puts it.
                "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}],
                "image": "i",
            }
        ],
        "tolerations": [{"key": "k2"}],
    }
    assert strategic_merge(live, patch) == want
    assert strategic_merge_patch(live, patch, mk.CORE_MERGE_KEYS) == want


def test_volume_mounts_merge_by_mount_path() -> None:
    live = {"volumeMounts": [{"name": "a", "mountPath": "/a"}]}
    patch = {"volumeMounts": [{"name": "b", "mountPath": "/a"}, {"name": "c", "mountPath": "/c"}]}
    want = {"volumeMounts": [{"name": "b", "mountPath": "/a"}, {"name": "c", "mountPath": "/c"}]}
    assert strategic_merge(live, patch) == want
    assert strategic_merge_patch(live, patch, mk.CORE_MERGE_KEYS) == want


def test_lists_come_out_in_the_order_kube_apiserver_gives_them() -> None:
    # Checked on kube-apiserver 1.36 (`kubectl patch --type strategic` of a Deployment) and on
    # upstream Trainer's runtimePatches (docs/side-by-side.md).
    live = {
        "containers": [{"name": "node"}, {"name": "sidecar"}],
        "volumes": [{"name": "initializer"}, {"name": "cache"}],
    }
    patch = {
        "containers": [{"name": "sidecar", "image": "s"}],
        "volumes": [{"name": "scratch"}, {"name": "cache", "emptyDir": {}}],
    }
    want = {
        "containers": [{"name": "node"}, {"name": "sidecar", "image": "s"}],
        "volumes": [
            {"name": "scratch"},
            {"name": "initializer"},
            {"name": "cache", "emptyDir": {}},
        ],
    }
    assert strategic_merge(live, patch) == want
    assert strategic_merge_patch(live, patch, mk.CORE_MERGE_KEYS) == want
