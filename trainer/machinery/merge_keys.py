"""Strategic-merge list keys: which lists of the Kubernetes types merge item by item, and by
which field.

Kubernetes reads these from Go struct tags (``patchMergeKey``); Python has no such tags, so
the lists that matter are named here by field name, which is unambiguous in the kinds the
project handles. Two layers merge: the runtime layer merges a TrainJob's runtime patches and
overrides onto the JobSet template (:mod:`trainer.runtime.merge`), and the local API server
applies strategic-merge patches and server-side apply to built-in kinds. Both read their
table from here, built from the one list of pod-template keys they share:

* :data:`POD_TEMPLATE_MERGE_KEYS`: the pod spec's lists, as Kubernetes tags them;
* :data:`JOBSET_MERGE_KEYS`: those plus a JobSet's ``replicatedJobs`` and a container's
  resource ``claims`` (by ``name``: the runtime layer merges them as upstream Trainer does);
* :data:`CORE_MERGE_KEYS`: those plus the metadata and status lists of the core kinds
  (``ownerReferences`` by ``uid``, ``conditions`` by ``type``, webhook configurations'
  ``webhooks`` by ``name``, ``finalizers`` as a set of strings, marked by ``""``).

Every other list is replaced whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

SET: Final = ""
"""The key of a list of scalars merged as a set (``$deleteFromPrimitiveList`` applies)."""

POD_TEMPLATE_MERGE_KEYS: Final[Mapping[str, str]] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}

JOBSET_MERGE_KEYS: Final[Mapping[str, str]] = {
    "replicatedJobs": "name",
    **POD_TEMPLATE_MERGE_KEYS,
    "claims": "name",
}

CORE_MERGE_KEYS: Final[Mapping[str, str]] = {
    **POD_TEMPLATE_MERGE_KEYS,
    "ownerReferences": "uid",
    "conditions": "type",
    "webhooks": "name",
    "finalizers": SET,
}


def strategic_order(
    merged: list[Any], original: list[Any], named: list[Any], key: str
) -> list[Any]:
    """``merged`` (a keyed list after merging ``named``'s items into ``original``) in the
    order Kubernetes' strategic merge gives it (apimachinery ``strategicpatch.mergeSlice``,
    checked against kube-apiserver, docs/side-by-side.md): the items the patch names, in
    the patch's order, interleaved with the items only the original has, in the original's
    order; at each step an original-only item goes first only when it stood before the next
    patch item in the original, so an item the original lacks goes first. A patch that adds
    a volume puts it before the others; patching an existing container keeps their order."""
    if not named:
        return merged
    by_key = {item[key]: item for item in merged if isinstance(item, dict) and key in item}
    from_patch = [by_key[k] for k in named if k in by_key]
    wanted = set(named)
    only_original = [
        item for item in merged if not (isinstance(item, dict) and item.get(key) in wanted)
    ]
    position = {
        item[key]: i for i, item in enumerate(original) if isinstance(item, dict) and key in item
    }
    ordered: list[Any] = []
    i = j = 0
    while i < len(only_original) or j < len(from_patch):
        if j >= len(from_patch):
            ordered.append(only_original[i])
            i += 1
            continue
        if i < len(only_original):
            left = only_original[i]
            li = position.get(left.get(key)) if isinstance(left, dict) else None
            ri = position.get(from_patch[j][key])
            if li is not None and ri is not None and li < ri:
                ordered.append(left)
                i += 1
                continue
        ordered.append(from_patch[j])
        j += 1
    return ordered
