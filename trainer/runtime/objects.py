"""Metadata shared by every object made for a TrainJob."""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.machinery.models.core import ObjectMeta, OwnerReference
from trainer.machinery.owners import controller_reference


def owner_reference(trainjob: TrainJob) -> OwnerReference:
    """The controller ownerReference every object made for a TrainJob carries."""
    meta = trainjob.metadata or ObjectMeta()
    ref = controller_reference(
        meta.name or "", meta.uid or "", api_version=c.API_VERSION, kind=c.KIND_TRAINJOB
    )
    return OwnerReference.from_wire(ref)


def object_meta(trainjob: TrainJob, name: str, **extra: Any) -> dict[str, Any]:
    """Wire metadata of a side object: name, the TrainJob's namespace, the
    ``trainer.kubeflow.org/trainjob-name`` label (plus any given), any ``extra`` fields and the
    controller ownerReference."""
    meta = trainjob.metadata or ObjectMeta()
    labels = {**extra.pop("labels", {}), c.LABEL_TRAINJOB_NAME: meta.name or ""}
    return {
        "name": name,
        "namespace": meta.namespace or "default",
        "labels": labels,
        **extra,
        "ownerReferences": [owner_reference(trainjob).to_wire()],
    }
