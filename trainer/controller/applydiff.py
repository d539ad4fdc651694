"""What to apply for a TrainJob, pure (docs/design.md, "One reconcile"): whether a desired
object differs from the cached one (by the hash of what this process last applied, and by
content), and whether a JobSet must be recreated rather than updated because JobSet lets only
some of its fields change (docs/design.md; the suspend/resume rules of the Kueue contract)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trainer.jobset import contract as jsc
from trainer.machinery.quantity import Quantity, QuantityError

ObjectKey = tuple[str, str, str, str]
"""An applied object: apiVersion, kind, namespace, name."""


def config_hash(obj: dict[str, Any]) -> str:
    """A hash of ``obj``, the configuration about to be applied."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:20]


def object_key(obj: dict[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


class AppliedConfigs:
    """The hash of the configuration this process last applied to each object, by the key of
    the TrainJob it was built for (``namespace/name``).

    Server-side apply removes a field a manager stops applying, which a "does the live object
    contain every desired field" check (:func:`covers`) cannot see; comparing the hash of what
    was last applied can. Upstream's objects carry no trace of such a hash, so it is kept here
    rather than in an annotation on the object: nothing of it reaches the API. Memory is bounded
    by the TrainJobs: the reconciler calls :meth:`forget` once a TrainJob is gone or finished
    (nothing is applied for a finished one). A new process (a restart, a new leader) starts
    empty and applies each object of an unfinished TrainJob once more on its first reconcile:
    a no-op server-side apply when nothing changed, which also takes away the
    ``trainer.kubeflow.org/applied-config-hash`` annotation earlier versions wrote (our field
    manager owns it and no longer applies it)."""

    def __init__(self) -> None:
        self._by_trainjob: dict[str, dict[ObjectKey, str]] = {}

    def unchanged(
        self, trainjob: str, live: dict[str, Any] | None, desired: dict[str, Any]
    ) -> bool:
        """Applying ``desired`` would change nothing in ``live``: this process last applied
        exactly ``desired`` to it, and ``live`` still holds every field of it."""
        if live is None:
            return False
        applied = self._by_trainjob.get(trainjob, {}).get(object_key(desired))
        return applied == config_hash(desired) and covers(live, desired)

    def record(self, trainjob: str, applied: dict[str, Any]) -> None:
        """``applied`` (the configuration, as sent) was applied for ``trainjob``."""
        self._by_trainjob.setdefault(trainjob, {})[object_key(applied)] = config_hash(applied)

    def forget(self, trainjob: str) -> None:
        self._by_trainjob.pop(trainjob, None)

    def __len__(self) -> int:
        """TrainJobs remembered."""
        return len(self._by_trainjob)


QUANTITY_MAPS = frozenset({"limits", "requests", "minResources", "overhead"})
"""Keys whose values map resource names to quantities (containers' resources, a PodGroup's
minResources, a pod's overhead)."""
QUANTITY_KEYS = frozenset({"sizeLimit"})


def covers(live: Any, desired: Any, quantities: bool = False) -> bool:
    """True when applying ``desired`` would change nothing in ``live``: every field of
    ``desired`` is in ``live`` with the same value (lists item by item).

    Quantities are compared by value: the API server keeps what was written, but a Go
    webhook that decodes and re-encodes the object (JobSet's defaulting webhook does) stores
    Go's canonical form, so ``2`` comes back as ``"2"`` and ``1000m`` as ``"1"``. Compared as
    written, a JobSet would never look applied, and a suspended one would be recreated for
    an "immutable change" over and over (seen on the real JobSet v0.12.0, docs/side-by-side.md)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(
            k in live
            and (
                _same_quantity(live[k], v)
                if quantities or k in QUANTITY_KEYS
                else covers(live[k], v, k in QUANTITY_MAPS)
            )
            for k, v in desired.items()
        )
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(covers(a, b) for a, b in zip(live, desired, strict=True))
    return bool(live == desired)


def _same_quantity(live: Any, desired: Any) -> bool:
    if live == desired:
        return True
    if not isinstance(live, str | int | float) or not isinstance(desired, str | int | float):
        return False
    try:
        return Quantity.parse(live).value == Quantity.parse(desired).value
    except QuantityError:
        return False


def _without_mutable(spec: dict[str, Any]) -> dict[str, Any]:
    """A JobSet spec without the fields JobSet's webhook lets change on an existing object."""
    out = {k: v for k, v in spec.items() if k not in ("suspend", "ttlSecondsAfterFinished")}
    out["replicatedJobs"] = jsc.mask_pod_templates(spec.get("replicatedJobs") or [])
    return out


def needs_recreate(live: dict[str, Any], desired: dict[str, Any]) -> bool:
    """The desired JobSet changes a field JobSet will not let change on an existing object."""
    return not covers(
        _without_mutable(live.get("spec") or {}), _without_mutable(desired.get("spec") or {})
    )


def _pod_templates(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        str(job.get("name")): ((job.get("template") or {}).get("spec") or {}).get("template") or {}
        for job in spec.get("replicatedJobs") or []
    }


def drops_mutable(live: dict[str, Any], desired: dict[str, Any]) -> bool:
    """The desired JobSet takes away a pod-template label, annotation, nodeSelector key,
    toleration or scheduling gate the live one has.

    JobSet lets these change while suspended, but on resume it *merges* them into the Jobs it
    already made (its controller's resume): what was taken away stays on those Jobs and reaches the
    pods. That is how a preempted TrainJob re-admitted on another flavor would keep the old
    flavor's nodeSelector keys; recreating the JobSet while nothing runs avoids it."""
    live_pods = _pod_templates(live.get("spec") or {})
    for name, want in _pod_templates(desired.get("spec") or {}).items():
        have = live_pods.get(name)
        if have is None:
            continue
        for part, key in (
            ("metadata", "labels"),
            ("metadata", "annotations"),
            ("spec", "nodeSelector"),
        ):
            old = (have.get(part) or {}).get(key) or {}
            new = (want.get(part) or {}).get(key) or {}
            if any(k not in new for k in old):
                return True
        old_tolerations = (have.get("spec") or {}).get("tolerations") or []
        new_tolerations = (want.get("spec") or {}).get("tolerations") or []
        if any(t not in new_tolerations for t in old_tolerations):
            return True
        old_gates = {g.get("name") for g in (have.get("spec") or {}).get("schedulingGates") or []}
        new_gates = {g.get("name") for g in (want.get("spec") or {}).get("schedulingGates") or []}
        if old_gates - new_gates:
            return True
    return False


# JobSet's webhook refuses a change to a field it does not let change with 422 Invalid and this
# text (its ValidateUpdate; the local plane's JobSet rules say the same).
IMMUTABLE = "field is immutable"


def refused_as_immutable(status: int, message: str, live: dict[str, Any]) -> bool:
    """An apply to the ``live`` JobSet was refused because it changes a field JobSet does not
    let change, and ``live`` is suspended with nothing active, so recreating it stops nothing.

    :func:`needs_recreate` cannot see a field taken away (the live object also holds JobSet's
    defaults); this is how it shows: Kueue v0.17, built on the Trainer v2.2 API, writes a
    TrainJob back without the v2.3 fields it does not know, such as a runtime patch's
    ``terminationGracePeriodSeconds`` (docs/kueue.md, "Kueue built on an older Trainer API")."""
    return (
        status == 422
        and IMMUTABLE in message
        and jobset_suspended(live)
        and any_active(live) is None
    )


def being_deleted(obj: dict[str, Any]) -> bool:
    """``obj`` has a deletionTimestamp: it goes once its finalizers (Foreground deletion's
    among them) are done."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def jobset_suspended(jobset: dict[str, Any]) -> bool:
    return bool((jobset.get("spec") or {}).get("suspend"))


def any_active(jobset: dict[str, Any]) -> str | None:
    for status in (jobset.get("status") or {}).get("replicatedJobsStatus") or []:
        if status.get("active", 0) > 0:
            return str(status.get("name"))
    return None
