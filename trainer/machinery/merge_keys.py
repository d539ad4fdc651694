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
from typing import Final

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
