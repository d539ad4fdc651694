"""Status conditions (``metav1.Condition``) over wire dicts, set as apimachinery's
``meta.SetStatusCondition`` sets them (k8s.io/apimachinery/pkg/api/meta/conditions.go), or as
JobSet's controller sets its own (``transitions_only``). Nothing here does I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def set_condition(
    conditions: Iterable[Mapping[str, Any]] | None,
    new: Mapping[str, Any],
    now: str,
    *,
    transitions_only: bool = False,
) -> list[dict[str, Any]]:
    """A new list: ``conditions`` with ``new`` set in place of the first condition of its type,
    or appended. Every other condition is copied as it was.

    By default, ``meta.SetStatusCondition``: the condition is ``new``, written in the field
    order of a ``metav1.Condition`` (``observedGeneration`` left out when 0, as Go's JSON does),
    its ``lastTransitionTime`` the old one while the status holds, else ``new``'s or ``now``.

    ``transitions_only``: JobSet's ``updateCondition``
    (https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/controllers/jobset_controller.go),
    which is not ``SetStatusCondition``: a condition changes only when its status flips
    (``new``'s fields then written over the old entry, ``lastTransitionTime`` ``new``'s or
    ``now``), so its reason and message stay while the status holds, and a condition not there
    yet is added only when True. The local JobSet controller plays JobSet, so it writes what
    JobSet would."""
    out: list[dict[str, Any]] = []
    found = False
    for old in conditions or ():
        if found or old.get("type") != new["type"]:
            out.append(dict(old))
            continue
        found = True
        same = old.get("status") == new["status"]
        if transitions_only:
            out.append(dict(old) if same else _over(old, new, now))
        else:
            since = old.get("lastTransitionTime") if same else None
            out.append(_metav1(new, since or new.get("lastTransitionTime") or now))
    if not found and not transitions_only:
        out.append(_metav1(new, new.get("lastTransitionTime") or now))
    elif not found and new["status"] == "True":
        out.append(_over({}, new, now))
    return out


def _metav1(c: Mapping[str, Any], since: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": c["type"], "status": c["status"]}
    if c.get("observedGeneration"):
        out["observedGeneration"] = c["observedGeneration"]
    out["lastTransitionTime"] = since
    out["reason"] = c.get("reason") or ""
    out["message"] = c.get("message") or ""
    return out


def _over(old: Mapping[str, Any], new: Mapping[str, Any], now: str) -> dict[str, Any]:
    return {**old, **new, "lastTransitionTime": new.get("lastTransitionTime") or now}
