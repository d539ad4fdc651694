"""PodDisruptionBudget rules that kube-apiserver's eviction subresource and the disruption
controller share, as Kubernetes spells them:

- which budgets cover a pod (``GetPodPodDisruptionBudgets`` of the policy/v1 lister: same
  namespace, the selector matches; a budget whose selector does not parse covers nothing);
- whether a pod is Ready (``podutil.IsPodReady``);
- the ``DisruptionAllowed`` condition (k8s.io/component-helpers/apps/poddisruptionbudget:
  ``UpdateDisruptionAllowedCondition`` and ``ConditionsAreUpToDate``) over
  ``apimeta.SetStatusCondition`` (:mod:`trainer.machinery.conditions`);
- a count from an integer or a percentage (``intstr.GetScaledValueFromIntOrPercent``).

Objects are the wire dicts; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainer.machinery.conditions import set_condition
from trainer.machinery.labels import SelectorError, selector_matches

DISRUPTION_ALLOWED = "DisruptionAllowed"
SUFFICIENT_PODS = "SufficientPods"
INSUFFICIENT_PODS = "InsufficientPods"
SYNC_FAILED = "SyncFailed"
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
"""``policyv1.DisruptionBudgetCause``: the cause of an eviction a budget refuses."""
ALWAYS_ALLOW = "AlwaysAllow"
"""``unhealthyPodEvictionPolicy: AlwaysAllow``; the default, ``IfHealthyBudget``, is any other
value."""


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's ``Ready`` condition is True."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def covers(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether budget ``pdb`` covers ``pod``: same namespace and its selector matches the pod's
    labels (a nil selector matches nothing, an empty one everything; one that does not parse
    covers nothing)."""
    pdb_meta = pdb.get("metadata") or {}
    pod_meta = pod.get("metadata") or {}
    if (pdb_meta.get("namespace") or "") != (pod_meta.get("namespace") or ""):
        return False
    try:
        return selector_matches(
            (pdb.get("spec") or {}).get("selector"), pod_meta.get("labels") or {}
        )
    except SelectorError:
        return False


def budgets_of(
    pdbs: Iterable[Mapping[str, Any]], pod: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The budgets of ``pdbs`` that cover ``pod``, in the order given."""
    return [pdb for pdb in pdbs if covers(pdb, pod)]


def update_disruption_allowed_condition(status: dict[str, Any], now: str) -> None:
    """``UpdateDisruptionAllowedCondition``: ``DisruptionAllowed`` True (``SufficientPods``)
    while ``disruptionsAllowed`` > 0, else False (``InsufficientPods``), at the status's
    observedGeneration. Changes ``status`` in place."""
    allowed = int(status.get("disruptionsAllowed") or 0) > 0
    condition = {
        "type": DISRUPTION_ALLOWED,
        "status": "True" if allowed else "False",
        "reason": SUFFICIENT_PODS if allowed else INSUFFICIENT_PODS,
        "observedGeneration": int(status.get("observedGeneration") or 0),
    }
    status["conditions"] = set_condition(list(status.get("conditions") or []), condition, now)


def conditions_are_up_to_date(pdb: Mapping[str, Any]) -> bool:
    """``ConditionsAreUpToDate``: the ``DisruptionAllowed`` condition says what
    ``disruptionsAllowed`` says, at the budget's generation."""
    status = pdb.get("status") or {}
    found = next(
        (c for c in status.get("conditions") or [] if c.get("type") == DISRUPTION_ALLOWED), None
    )
    if found is None:
        return False
    if int(status.get("observedGeneration") or 0) != int(
        (pdb.get("metadata") or {}).get("generation") or 0
    ):
        return False
    want = (
        ("True", SUFFICIENT_PODS)
        if int(status.get("disruptionsAllowed") or 0) > 0
        else ("False", INSUFFICIENT_PODS)
    )
    return (found.get("status"), found.get("reason")) == want


def scaled_value(value: Any, total: int, *, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: an integer as is, ``"N%"`` of ``total``
    (rounded up or down); ValueError with apimachinery's message for anything else."""
    if isinstance(value, bool) or value is None:
        raise ValueError("invalid value for IntOrString: invalid type: neither int nor percentage")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise ValueError("invalid value for IntOrString: invalid type: neither int nor percentage")
    if not value.endswith("%"):
        raise ValueError("invalid value for IntOrString: invalid type: string is not a percentage")
    try:
        percent = int(value[:-1])
    except ValueError:
        raise ValueError(
            f'invalid value for IntOrString: invalid value "{value}": strconv.Atoi: parsing '
            f'"{value[:-1]}": invalid syntax'
        ) from None
    scaled = percent * total
    return -(-scaled // 100) if round_up else scaled // 100
