"""Owner references, as k8s.io/apimachinery's ``metav1.NewControllerRef`` makes them and
``metav1.GetControllerOf`` reads them back: how a child points at the object that controls it
(the JobSet of a Job, the Job of a pod, the TrainJob of a JobSet). Objects are wire dicts."""

from __future__ import annotations

from typing import Any


def controller_reference(name: str, uid: str, *, api_version: str, kind: str) -> dict[str, Any]:
    """The controller reference a child carries: ``controller`` and ``blockOwnerDeletion`` set,
    as ``metav1.NewControllerRef`` (and controller-runtime's ``SetControllerReference``)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: dict[str, Any], kind: str | None = None) -> dict[str, Any] | None:
    """The controller reference of ``obj`` (of ``kind`` when given), or None. Malformed
    metadata (the dashboard shows whatever a cluster holds) has none."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in refs if isinstance(refs, list) else []:
        if not isinstance(ref, dict) or not ref.get("controller"):
            continue
        if kind is None or ref.get("kind") == kind:
            return dict(ref)
    return None
