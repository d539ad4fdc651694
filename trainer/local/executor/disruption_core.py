"""The disruption controller's policy: a PodDisruptionBudget's status from the budget, the
pods it selects, the scale of their controllers and the clock, as kube-controller-manager's
disruption controller computes it
(https://github.com/kubernetes/kubernetes/blob/master/pkg/controller/disruption/disruption.go).

- **expectedPods and desiredHealthy** (``getExpectedPodCount``): with ``minAvailable`` an
  integer, the selected pods are expected and ``desiredHealthy`` is that integer; with
  ``minAvailable`` a percentage, or ``maxUnavailable``, ``expectedPods`` is the sum of the
  scales of the pods' controllers (``getExpectedScale``) and the percentage of it rounds up
  (``desiredHealthy`` = ceil(p% x expected), or expected - ceil(p% x expected) at least 0).
  A controller's scale is ``spec.replicas`` of a ReplicationController, a ReplicaSet (its
  Deployment's when a Deployment controls it), a Deployment or a StatefulSet. A pod without a
  controller counts for nothing there (an ``UnmanagedPods`` Warning says so); a controller that
  cannot be found is ``found no controllers for pod "<name>"``, and one of another kind (a Job,
  a JobSet: neither has a scale subresource) is ``jobs.batch does not implement the scale
  subresource``: the sync fails (below).
- **currentHealthy** (``countHealthyPods``): selected pods that are Ready, not being deleted,
  and not in ``disruptedPods`` (an eviction the API server granted, not yet seen deleted).
- **disruptedPods** (``buildDisruptedPodMap``): the entries of pods still there, not being
  deleted, and granted less than :data:`DELETION_TIMEOUT` ago; an older one is dropped with a
  ``NotDeleted`` Warning on the pod, and the budget is synced again when the next one expires.
- **disruptionsAllowed** = currentHealthy - desiredHealthy, at least 0, and 0 while no pod is
  expected; ``observedGeneration`` is the budget's generation; the condition
  ``DisruptionAllowed`` is True ``SufficientPods`` or False ``InsufficientPods``.
- **A failed sync** (a selector that does not parse, a scale that cannot be read) sets
  ``disruptionsAllowed`` 0 and ``DisruptionAllowed`` False ``SyncFailed`` with the error
  (``failSafe``), so no eviction is granted on a status nobody can compute.

Nothing here reads the API: :func:`sync` is given the pods and the controllers' objects
(:func:`scale_targets` says which to read), and answers the status to write and the Events.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.machinery import disruption as pdbs
from trainer.machinery.conditions import set_condition
from trainer.machinery.labels import SelectorError, selector_matches
from trainer.machinery.owners import controller_of
from trainer.machinery.times import format_time, parse_time

DELETION_TIMEOUT = dt.timedelta(minutes=2)
"""``DeletionTimeout``: how long a pod stays in ``disruptedPods`` waiting to be seen deleted."""
COMPONENT = "controllermanager"
"""The source component of the disruption controller's Events."""

Obj = Mapping[str, Any]
Find = Callable[[str, str, str], Obj | None]
"""(group, kind, name) in the budget's namespace -> the object, or None when there is none."""

WORKLOAD_GROUPS = ("apps", "extensions")
SCALED = {
    ("", "ReplicationController"),
    ("apps", "ReplicaSet"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
}
"""The kinds whose ``spec.replicas`` is their scale (``extensions`` is read as ``apps``)."""


class SyncError(Exception):
    """A budget whose status cannot be computed (the message is the condition's)."""


@dataclass
class Sync:
    """What one sync of a budget does: ``status`` to write (None: already up to date), Events
    (on the budget, or on a pod: ``(object, type, reason, message)``), and when to sync it
    again (seconds; None: on the next change)."""

    status: dict[str, Any] | None
    events: list[tuple[Obj, str, str, str]] = field(default_factory=list)
    recheck_after: float | None = None


def group_of(api_version: str) -> str:
    group, _, _ = str(api_version or "").rpartition("/")
    return "apps" if group == "extensions" else group


def selected_pods(pdb: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """``getPodsForPdb``: the pods of the budget's namespace its selector matches;
    :class:`SyncError` for a selector that does not parse."""
    namespace = (pdb.get("metadata") or {}).get("namespace") or ""
    selector = (pdb.get("spec") or {}).get("selector")
    try:
        return [
            p
            for p in pods
            if ((p.get("metadata") or {}).get("namespace") or "") == namespace
            and selector_matches(selector, (p.get("metadata") or {}).get("labels") or {})
        ]
    except SelectorError as exc:
        raise SyncError(str(exc)) from None


def needs_scale(pdb: Obj) -> bool:
    """Whether the budget's count needs its pods' controllers (a percentage or
    maxUnavailable)."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        return True
    return isinstance(spec.get("minAvailable"), str)


def scale_targets(pods: Iterable[Obj]) -> set[tuple[str, str, str]]:
    """(group, kind, name) of the controllers of ``pods`` whose scale is read."""
    out = set()
    for pod in pods:
        ref = controller_of(dict(pod))
        if ref is None:
            continue
        key = (group_of(str(ref.get("apiVersion") or "")), str(ref.get("kind") or ""))
        if key in SCALED:
            out.add((*key, str(ref.get("name") or "")))
    return out


def owner_targets(objects: Iterable[Obj]) -> set[tuple[str, str, str]]:
    """(group, kind, name) of the Deployments controlling the ReplicaSets in ``objects``."""
    out = set()
    for obj in objects:
        ref = controller_of(dict(obj))
        if (
            ref is not None
            and ref.get("kind") == "Deployment"
            and group_of(str(ref.get("apiVersion") or "")) == "apps"
        ):
            out.add(("apps", "Deployment", str(ref.get("name") or "")))
    return out


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _replicas(obj: Obj) -> int:
    replicas = (obj.get("spec") or {}).get("replicas")
    return int(replicas) if isinstance(replicas, int) else 1


def controller_scale(ref: Mapping[str, Any], find: Find) -> tuple[str, int] | None:
    """The (uid, scale) of the controller ``ref`` names, trying the disruption controller's
    finders in its order (ReplicationController, the Deployment of a ReplicaSet, a ReplicaSet
    of no Deployment, StatefulSet, then any kind with a scale); None when it is not found (or
    is another object of that name); :class:`SyncError` for a kind without a scale."""
    group = group_of(str(ref.get("apiVersion") or ""))
    kind, name, uid = str(ref.get("kind") or ""), str(ref.get("name") or ""), ref.get("uid")
    if (group, kind) == ("apps", "ReplicaSet"):
        rs = find(group, kind, name)
        if rs is not None and _uid(rs) == uid:
            owner = controller_of(dict(rs))
            if owner is not None and owner.get("kind") == "Deployment":
                dep = None
                if group_of(str(owner.get("apiVersion") or "")) == "apps":
                    dep = find("apps", "Deployment", str(owner.get("name") or ""))
                if dep is not None and _uid(dep) == owner.get("uid"):
                    return _uid(dep), _replicas(dep)
                return _uid(rs), _replicas(rs)  # the scale finder reads the ReplicaSet itself
    if (group, kind) not in SCALED:
        plural = f"{kind.lower()}s"
        resource = f"{plural}.{group}" if group else plural
        raise SyncError(f"{resource} does not implement the scale subresource")
    found = find(group, kind, name)
    if found is None or _uid(found) != uid:
        return None
    return _uid(found), _replicas(found)


def expected_scale(pods: Iterable[Obj], find: Find) -> tuple[int, list[str]]:
    """``getExpectedScale``: the sum of the scales of the pods' controllers (each counted
    once) and the names of the pods without a controller."""
    scales: dict[str, int] = {}
    unmanaged: list[str] = []
    for pod in pods:
        name = str((pod.get("metadata") or {}).get("name") or "")
        ref = controller_of(dict(pod))
        if ref is None:
            unmanaged.append(name)
            continue
        if ref.get("uid") in scales:
            continue
        found = controller_scale(ref, find)
        if found is None:
            raise SyncError(f'found no controllers for pod "{name}"')
        scales[found[0]] = found[1]
    return sum(scales.values()), unmanaged


def expected_count(pdb: Obj, pods: list[Obj], find: Find) -> tuple[int, int, list[str]]:
    """``getExpectedPodCount``: (expectedPods, desiredHealthy, unmanaged pods)."""
    spec = pdb.get("spec") or {}
    max_unavailable = spec.get("maxUnavailable")
    min_available = spec.get("minAvailable")
    try:
        if max_unavailable is not None:
            expected, unmanaged = expected_scale(pods, find)
            unavailable = pdbs.scaled_value(max_unavailable, expected, round_up=True)
            return expected, max(expected - unavailable, 0), unmanaged
        if isinstance(min_available, int) and not isinstance(min_available, bool):
            return len(pods), min_available, []
        if isinstance(min_available, str):
            expected, unmanaged = expected_scale(pods, find)
            return expected, pdbs.scaled_value(min_available, expected, round_up=True), unmanaged
    except ValueError as exc:
        raise SyncError(str(exc)) from None
    return 0, 0, []


def disrupted_pods(
    pdb: Obj, pods: Iterable[Obj], now: dt.datetime
) -> tuple[dict[str, str], dt.datetime | None, list[Obj]]:
    """``buildDisruptedPodMap``: the entries of ``disruptedPods`` still awaited, when the
    first of them expires, and the pods whose entry expired without their deletion."""
    recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
    kept: dict[str, str] = {}
    recheck: dt.datetime | None = None
    overdue: list[Obj] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        if meta.get("deletionTimestamp") or name not in recorded:
            continue
        try:
            since = parse_time(recorded[name])
        except ValueError:
            since = None
        if since is None:
            continue
        expires = since + DELETION_TIMEOUT
        if expires < now:
            overdue.append(pod)
            continue
        if recheck is None or expires < recheck:
            recheck = expires
        kept[name] = recorded[name]
    return kept, recheck, overdue


def healthy_pods(pods: Iterable[Obj], disrupted: Mapping[str, str], now: dt.datetime) -> int:
    """``countHealthyPods``: Ready pods not being deleted nor awaited in ``disrupted``."""
    count = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        since = parse_time(disrupted.get(str(meta.get("name") or "")))
        if since is not None and since + DELETION_TIMEOUT > now:
            continue
        if pdbs.pod_ready(pod):
            count += 1
    return count


def new_status(
    pdb: Obj,
    *,
    current: int,
    desired: int,
    expected: int,
    disrupted: dict[str, str],
    stamp: str,
) -> dict[str, Any] | None:
    """``updatePdbStatus``: the status these figures make, or None when the budget already
    says it."""
    allowed = current - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    status = pdb.get("status") or {}
    generation = int((pdb.get("metadata") or {}).get("generation") or 0)
    if (
        status.get("currentHealthy") == current
        and status.get("desiredHealthy") == desired
        and status.get("expectedPods") == expected
        and status.get("disruptionsAllowed") == allowed
        and (status.get("disruptedPods") or {}) == disrupted
        and int(status.get("observedGeneration") or 0) == generation
        and pdbs.conditions_are_up_to_date(pdb)
    ):
        return None
    out: dict[str, Any] = {}
    if generation:
        out["observedGeneration"] = generation
    if disrupted:
        out["disruptedPods"] = dict(disrupted)
    out |= {
        "disruptionsAllowed": allowed,
        "currentHealthy": current,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": list(status.get("conditions") or []),
    }
    pdbs.update_disruption_allowed_condition(out, stamp)
    return out


def fail_safe(pdb: Obj, message: str, stamp: str) -> dict[str, Any]:
    """``failSafe``: the budget's status with no disruption allowed and ``DisruptionAllowed``
    False ``SyncFailed`` saying why."""
    status = dict(pdb.get("status") or {})
    status["disruptionsAllowed"] = 0
    for key in ("currentHealthy", "desiredHealthy", "expectedPods"):
        status.setdefault(key, 0)
    condition = {
        "type": pdbs.DISRUPTION_ALLOWED,
        "status": "False",
        "reason": pdbs.SYNC_FAILED,
        "message": message,
        "observedGeneration": int(status.get("observedGeneration") or 0),
    }
    status["conditions"] = set_condition(list(status.get("conditions") or []), condition, stamp)
    return status


def sync(pdb: Obj, pods: Iterable[Obj], find: Find, now: dt.datetime) -> Sync:
    """One sync of ``pdb`` (``trySync``, and ``failSafe`` when it fails): ``pods`` are the
    pods of the cluster (or of its namespace), ``find`` reads the controllers
    :func:`scale_targets` and :func:`owner_targets` named."""
    stamp = format_time(now)
    events: list[tuple[Obj, str, str, str]] = []
    try:
        selected = selected_pods(pdb, pods)
    except SyncError as exc:
        events.append((pdb, "Warning", "NoPods", f"Failed to get pods: {exc}"))
        return Sync(fail_safe(pdb, str(exc), stamp), events)
    if not selected:
        events.append((pdb, "Normal", "NoPods", "No matching pods found"))
    try:
        expected, desired, unmanaged = expected_count(pdb, selected, find)
    except SyncError as exc:
        why = f"Failed to calculate the number of expected pods: {exc}"
        events.append((pdb, "Warning", "CalculateExpectedPodCountFailed", why))
        return Sync(fail_safe(pdb, str(exc), stamp), events)
    if unmanaged:
        selector = _go_selector((pdb.get("spec") or {}).get("selector"))
        events.append((pdb, "Warning", "UnmanagedPods", UNMANAGED.format(selector=selector)))
    disrupted, recheck, overdue = disrupted_pods(pdb, selected, now)
    namespace = (pdb.get("metadata") or {}).get("namespace") or ""
    for pod in overdue:
        # Upstream's message names the budget's namespace twice (namespace/namespace).
        message = f"Pod was expected by PDB {namespace}/{namespace} to be deleted but it wasn't"
        events.append((pod, "Warning", "NotDeleted", message))
    status = new_status(
        pdb,
        current=healthy_pods(selected, disrupted, now),
        desired=desired,
        expected=expected,
        disrupted=disrupted,
        stamp=stamp,
    )
    after = (recheck - now).total_seconds() if recheck is not None else None
    return Sync(status, events, after)


UNMANAGED = (
    "Pods selected by this PodDisruptionBudget (selector: {selector}) were found to be "
    "unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may "
    'result in undefined behavior. To account for these pods please set ".spec.minAvailable" '
    "field of the PDB to an integer value."
)


def _go_selector(selector: Any) -> str:
    """A LabelSelector as Go prints a ``*metav1.LabelSelector`` with ``%v`` (its generated
    ``String()``)."""
    if not isinstance(selector, Mapping):
        return "nil"
    labels = "".join(f"{k}: {v}," for k, v in sorted((selector.get("matchLabels") or {}).items()))
    exprs = "".join(
        f"LabelSelectorRequirement{{Key:{e.get('key')},Operator:{e.get('operator')},"
        f"Values:[{' '.join(str(v) for v in e.get('values') or [])}],}},"
        for e in selector.get("matchExpressions") or []
        if isinstance(e, Mapping)
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{labels}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{exprs}}},}}"
    )
