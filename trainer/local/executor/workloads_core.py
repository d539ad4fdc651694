"""What the Deployment and ReplicaSet controllers decide, as kube-controller-manager's do
(https://github.com/kubernetes/kubernetes/tree/master/pkg/controller/deployment and
.../replicaset): a Deployment's ReplicaSet per pod template (named by the template's hash), a
rolling update bounded by ``maxSurge`` and ``maxUnavailable`` (or Recreate), revision
annotations, and both kinds' status and conditions with Kubernetes' reasons and messages.

Pure: objects and the clock in, decisions out (docs/local-plane.md, "Workloads and
Services"). :mod:`~trainer.local.executor.workloads` reads the caches and writes.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.api import jobset_contract as jc
from trainer.local.executor.controllers.policy.batch import pod_phase, pod_ready
from trainer.machinery.times import parse_time

POD_TEMPLATE_HASH = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
SAFE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
"""``rand.SafeEncodeString``'s alphabet: no vowels, no 0/1/3 (no words, no look-alikes)."""
DEFAULT_SURGE = DEFAULT_UNAVAILABLE = "25%"
DEFAULT_HISTORY = 10


# --- small readers -------------------------------------------------------------------------
def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def spec_replicas(obj: Mapping[str, Any]) -> int:
    """``spec.replicas``, 1 when unset (the API's default for both kinds)."""
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else max(int(value), 0)


def is_active(pod: Mapping[str, Any]) -> bool:
    """A pod a ReplicaSet counts: not Succeeded or Failed, not being deleted."""
    return pod_phase(dict(pod)) not in ("Succeeded", "Failed") and not meta(pod).get(
        "deletionTimestamp"
    )


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: dt.datetime) -> bool:
    """Ready for at least ``min_ready_seconds`` (``podutil.IsPodAvailable``)."""
    if not pod_ready(dict(pod)):
        return False
    if min_ready_seconds <= 0:
        return True
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            since = parse_time(cond.get("lastTransitionTime"))
            return since is not None and since + dt.timedelta(seconds=min_ready_seconds) <= now
    return False


def available_at(pod: Mapping[str, Any], min_ready_seconds: int) -> dt.datetime | None:
    """When a ready pod becomes available (for a requeue), None when not ready."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            since = parse_time(cond.get("lastTransitionTime"))
            return None if since is None else since + dt.timedelta(seconds=min_ready_seconds)
    return None


# --- the template hash ----------------------------------------------------------------------
def safe_encode(text: str) -> str:
    return "".join(SAFE_CHARS[ord(ch) % len(SAFE_CHARS)] for ch in text)


def template_hash(template: Mapping[str, Any], collision_count: int | None = None) -> str:
    """The ``pod-template-hash`` of a template: FNV-32a of its canonical JSON (and the
    collision count, when set), written with :data:`SAFE_CHARS` as ``controller.ComputeHash``
    writes it. (Kubernetes hashes its Go printing of the struct, so the values differ from a
    cluster's; what matters is the same: one name per template.)"""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count is not None:
        data += str(collision_count).encode()
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return safe_encode(str(value))


def _without_hash(template: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(template))
    labels = (out.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(POD_TEMPLATE_HASH, None)
    return out


def same_template(rs: Mapping[str, Any], deployment: Mapping[str, Any]) -> bool:
    """``EqualIgnoreHash``: the ReplicaSet runs the Deployment's current template."""
    return _without_hash((rs.get("spec") or {}).get("template") or {}) == _without_hash(
        (deployment.get("spec") or {}).get("template") or {}
    )


# --- int-or-percent ----------------------------------------------------------------------------
def scaled(value: Any, total: int, *, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an int as is, ``"N%"`` of ``total``."""
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%") and text[:-1].isdigit():
        exact = int(text[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    if text.isdigit():
        return int(text)
    raise ValueError(f"invalid value for IntOrString: {text!r}")


def fenceposts(deployment: Mapping[str, Any]) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a RollingUpdate Deployment, surge rounded up and
    unavailability down; both 0 allow one unavailable pod (``ResolveFenceposts``)."""
    replicas = spec_replicas(deployment)
    rolling = ((deployment.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    surge = scaled(rolling.get("maxSurge", DEFAULT_SURGE), replicas, round_up=True)
    unavailable = scaled(
        rolling.get("maxUnavailable", DEFAULT_UNAVAILABLE), replicas, round_up=False
    )
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


# --- ReplicaSets ---------------------------------------------------------------------------------
def replicaset_status(
    rs: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: dt.datetime
) -> dict[str, Any]:
    """A ReplicaSet's status from its active pods (``calculateStatus``)."""
    spec = rs.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    active = [p for p in pods if is_active(p)]
    status = dict(rs.get("status") or {})
    status.update(
        {
            "replicas": len(active),
            "fullyLabeledReplicas": sum(
                1
                for p in active
                if all(meta(p).get("labels", {}).get(k) == v for k, v in template_labels.items())
            ),
            "readyReplicas": sum(1 for p in active if pod_ready(dict(p))),
            "availableReplicas": sum(1 for p in active if is_available(p, min_ready, now)),
            "observedGeneration": int(meta(rs).get("generation") or 1),
        }
    )
    return status


def _deletion_rank(pod: Mapping[str, Any]) -> tuple[int, int, int, str]:
    """``ActivePods`` order, the first deleted first: unscheduled before scheduled, Pending
    before Unknown before Running, not ready before ready, then the newest first."""
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(pod_phase(dict(pod)), 0)
    scheduled = 1 if (pod.get("spec") or {}).get("nodeName") else 0
    created = str(meta(pod).get("creationTimestamp") or "")
    # Newest first: invert the timestamp's characters' order by sorting on the negation below.
    return (scheduled, phase_rank, 1 if pod_ready(dict(pod)) else 0, created)


def pods_to_delete(pods: Sequence[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    """The ``count`` active pods a ReplicaSet scaled down deletes first."""
    ranked = sorted(pods, key=lambda p: str(meta(p).get("creationTimestamp") or ""), reverse=True)
    ranked.sort(key=lambda p: _deletion_rank(p)[:3])
    return ranked[: max(count, 0)]


def new_pod(rs: Mapping[str, Any]) -> dict[str, Any]:
    """A pod of the ReplicaSet's template, named ``<rs>-<random>`` by the API server."""
    m = meta(rs)
    template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
    pod_meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{m['name']}-",
            "namespace": m.get("namespace", ""),
            "labels": dict(pod_meta.get("labels") or {}),
            "annotations": dict(pod_meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(rs, "ReplicaSet")],
        },
        "spec": template.get("spec") or {},
    }


def owner_reference(owner: Mapping[str, Any], kind: str) -> dict[str, Any]:
    m = meta(owner)
    return jc.owner_reference(
        str(m.get("name", "")), str(m.get("uid", "")), api_version="apps/v1", kind=kind
    )


# --- Deployments -----------------------------------------------------------------------------
@dataclass
class DeploymentPlan:
    """One step of a Deployment's rollout: a ReplicaSet to create, or ReplicaSets to scale,
    old ones to delete past the history limit, and the status to write."""

    create: dict[str, Any] | None = None
    scale: dict[str, int] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    annotate_revision: str | None = None
    """The revision to record on the Deployment (``deployment.kubernetes.io/revision``)."""


def revision(obj: Mapping[str, Any]) -> int:
    try:
        return int(meta(obj).get("annotations", {}).get(REVISION, "0"))
    except ValueError:
        return 0


def new_replicaset(
    deployment: Mapping[str, Any], olds: Sequence[Mapping[str, Any]], replicas: int
) -> dict[str, Any]:
    """The ReplicaSet of the Deployment's current template (``getNewReplicaSet``)."""
    m = meta(deployment)
    spec = deployment.get("spec") or {}
    collision = (deployment.get("status") or {}).get("collisionCount")
    template = copy.deepcopy(spec.get("template") or {})
    pod_hash = template_hash(template, collision)
    template.setdefault("metadata", {}).setdefault("labels", {})[POD_TEMPLATE_HASH] = pod_hash
    selector = copy.deepcopy(spec.get("selector") or {})
    selector.setdefault("matchLabels", {})[POD_TEMPLATE_HASH] = pod_hash
    surge, _ = fenceposts(deployment) if _rolling(deployment) else (0, 0)
    desired = spec_replicas(deployment)
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{m['name']}-{pod_hash}",
            "namespace": m.get("namespace", ""),
            "labels": labels,
            "annotations": {
                REVISION: str(max((revision(r) for r in olds), default=0) + 1),
                DESIRED_REPLICAS: str(desired),
                MAX_REPLICAS: str(desired + surge),
            },
            "ownerReferences": [owner_reference(deployment, "Deployment")],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": int(spec.get("minReadySeconds") or 0),
            "selector": selector,
            "template": template,
        },
    }


def _rolling(deployment: Mapping[str, Any]) -> bool:
    strategy = ((deployment.get("spec") or {}).get("strategy") or {}).get("type")
    return strategy != "Recreate"


def _status_of(rs: Mapping[str, Any], key: str) -> int:
    return int((rs.get("status") or {}).get(key) or 0)


def _condition(
    old: Sequence[Mapping[str, Any]], type_: str, status: str, reason: str, message: str, at: str
) -> dict[str, Any]:
    """A Deployment condition; its lastTransitionTime kept while its status holds."""
    before = next((c for c in old if c.get("type") == type_), None)
    transition = (
        before.get("lastTransitionTime", at)
        if before is not None and before.get("status") == status
        else at
    )
    if before is not None and before.get("reason") == reason and before.get("status") == status:
        updated = before.get("lastUpdateTime", at)
    else:
        updated = at
    return {
        "type": type_,
        "status": status,
        "lastUpdateTime": updated,
        "lastTransitionTime": transition,
        "reason": reason,
        "message": message,
    }


def deployment_status(
    deployment: Mapping[str, Any],
    new: Mapping[str, Any] | None,
    all_sets: Sequence[Mapping[str, Any]],
    at: str,
    created: str | None = None,
) -> dict[str, Any]:
    """``calculateStatus`` and the Available / Progressing conditions (``syncRolloutStatus``);
    ``created`` names a ReplicaSet this step created."""
    replicas = spec_replicas(deployment)
    old_status = dict(deployment.get("status") or {})
    available = sum(_status_of(r, "availableReplicas") for r in all_sets)
    updated = _status_of(new, "replicas") if new is not None else 0
    _, max_unavailable = fenceposts(deployment) if _rolling(deployment) else (0, 0)
    status: dict[str, Any] = {
        "observedGeneration": int(meta(deployment).get("generation") or 1),
        "replicas": sum(_status_of(r, "replicas") for r in all_sets),
        "updatedReplicas": updated,
        "readyReplicas": sum(_status_of(r, "readyReplicas") for r in all_sets),
        "availableReplicas": available,
        "unavailableReplicas": max(replicas - available, 0),
    }
    if old_status.get("collisionCount") is not None:
        status["collisionCount"] = old_status["collisionCount"]
    for key in ("readyReplicas", "availableReplicas", "unavailableReplicas", "updatedReplicas"):
        if not status[key]:
            del status[key]  # omitempty, as the API writes them
    conditions = old_status.get("conditions") or []
    if available >= replicas - max_unavailable:
        avail = _condition(
            conditions,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            at,
        )
    else:
        avail = _condition(
            conditions,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            at,
        )
    name = meta(new).get("name", "") if new is not None else ""
    if created is not None:
        progressing = _condition(
            conditions,
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            f'Created new replica set "{created}"',
            at,
        )
    elif new is not None and _complete(deployment, new, all_sets):
        progressing = _condition(
            conditions,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            f'ReplicaSet "{name}" has successfully progressed.',
            at,
        )
    else:
        progressing = _condition(
            conditions,
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            f'ReplicaSet "{name}" is progressing.',
            at,
        )
    status["conditions"] = [avail, progressing]
    return status


def _complete(
    deployment: Mapping[str, Any], new: Mapping[str, Any], all_sets: Sequence[Mapping[str, Any]]
) -> bool:
    """``DeploymentComplete``: every replica updated and available, no old one left."""
    replicas = spec_replicas(deployment)
    return (
        _status_of(new, "replicas") == replicas
        and _status_of(new, "availableReplicas") == replicas
        and sum(_status_of(r, "replicas") for r in all_sets) == replicas
    )


def scale_message(rs: Mapping[str, Any], old: int, new: int) -> str:
    """The ``ScalingReplicaSet`` Event's message."""
    direction = "up" if new > old else "down"
    return f"Scaled {direction} replica set {meta(rs)['name']} from {old} to {new}"


def plan_deployment(
    deployment: Mapping[str, Any], sets: Sequence[Mapping[str, Any]], at: str
) -> DeploymentPlan:
    """One reconcile of a Deployment over the ReplicaSets it controls (``sets``)."""
    plan = DeploymentPlan()
    spec = deployment.get("spec") or {}
    replicas = spec_replicas(deployment)
    new = next((r for r in sets if same_template(r, deployment)), None)
    olds = sorted(
        (r for r in sets if r is not new),
        key=lambda r: str(meta(r).get("creationTimestamp") or ""),
    )
    if spec.get("paused"):
        plan.status = deployment_status(deployment, new, sets, at)
        return plan
    if new is None:
        if _rolling(deployment):
            surge, _ = fenceposts(deployment)
            current = sum(spec_replicas(r) for r in olds)
            start = min(max(replicas + surge - current, 0), replicas)
        else:
            start = (
                0 if any(_status_of(r, "replicas") or spec_replicas(r) for r in olds) else replicas
            )
        plan.create = new_replicaset(deployment, olds, start)
        plan.annotate_revision = plan.create["metadata"]["annotations"][REVISION]
        plan.status = deployment_status(
            deployment, None, sets, at, created=plan.create["metadata"]["name"]
        )
        return plan
    if revision(new) and str(revision(new)) != meta(deployment).get("annotations", {}).get(
        REVISION
    ):
        plan.annotate_revision = str(revision(new))
    if _rolling(deployment):
        _rolling_step(deployment, new, olds, plan)
    else:
        _recreate_step(deployment, new, olds, plan)
    if not plan.scale:
        _history(deployment, olds, plan)
    plan.status = deployment_status(deployment, new, sets, at)
    return plan


def _rolling_step(
    deployment: Mapping[str, Any],
    new: Mapping[str, Any],
    olds: Sequence[Mapping[str, Any]],
    plan: DeploymentPlan,
) -> None:
    replicas = spec_replicas(deployment)
    surge, max_unavailable = fenceposts(deployment)
    everyone = [new, *olds]
    current = sum(spec_replicas(r) for r in everyone)
    new_replicas = spec_replicas(new)
    # reconcileNewReplicaSet: up to replicas + maxSurge pods in all; down when over replicas.
    if new_replicas > replicas:
        target = replicas
    else:
        target = new_replicas + max(min(replicas + surge - current, replicas - new_replicas), 0)
    if target != new_replicas:
        plan.scale[meta(new)["name"]] = target
        return
    # reconcileOldReplicaSets: never below replicas - maxUnavailable available pods.
    min_available = replicas - max_unavailable
    new_unavailable = new_replicas - _status_of(new, "availableReplicas")
    budget = current - min_available - new_unavailable
    if budget <= 0:
        return
    # First the old pods that are not available anyway (cleanupUnhealthyReplicas) ...
    targets: dict[str, int] = {}
    for rs in olds:
        if budget <= 0:
            break
        want = spec_replicas(rs)
        unhealthy = want - _status_of(rs, "availableReplicas")
        if want == 0 or unhealthy <= 0:
            continue
        down = min(budget, unhealthy)
        targets[meta(rs)["name"]] = want - down
        budget -= down
    # ... then available ones, oldest first, as long as enough stay available.
    room = sum(_status_of(r, "availableReplicas") for r in everyone) - min_available
    for rs in olds:
        if room <= 0:
            break
        want = targets.get(meta(rs)["name"], spec_replicas(rs))
        if want == 0:
            continue
        down = min(want, room)
        targets[meta(rs)["name"]] = want - down
        room -= down
    for rs in olds:
        name = meta(rs)["name"]
        if name in targets and targets[name] != spec_replicas(rs):
            plan.scale[name] = targets[name]


def _recreate_step(
    deployment: Mapping[str, Any],
    new: Mapping[str, Any],
    olds: Sequence[Mapping[str, Any]],
    plan: DeploymentPlan,
) -> None:
    """Recreate: every old pod gone before the new ReplicaSet scales up."""
    running_old = False
    for rs in olds:
        if spec_replicas(rs):
            plan.scale[meta(rs)["name"]] = 0
        if _status_of(rs, "replicas"):
            running_old = True
    if plan.scale or running_old:
        return
    replicas = spec_replicas(deployment)
    if spec_replicas(new) != replicas:
        plan.scale[meta(new)["name"]] = replicas


def _history(
    deployment: Mapping[str, Any], olds: Sequence[Mapping[str, Any]], plan: DeploymentPlan
) -> None:
    """``cleanupDeployment``: old ReplicaSets scaled to nothing, beyond
    ``revisionHistoryLimit`` (default 10), oldest first."""
    limit = (deployment.get("spec") or {}).get("revisionHistoryLimit")
    limit = DEFAULT_HISTORY if limit is None else int(limit)
    idle = [r for r in olds if not spec_replicas(r) and not _status_of(r, "replicas")]
    extra = len(idle) - limit
    plan.delete = [meta(r)["name"] for r in idle[: max(extra, 0)]]
