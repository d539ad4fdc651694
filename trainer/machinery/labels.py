"""A ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``) matched against an
object's labels, as ``metav1.LabelSelectorAsSelector`` does: every requirement must hold; an
empty selector matches everything and a missing one (None) nothing, as a Deployment's,
ReplicaSet's, Service's or PodDisruptionBudget's controller reads them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SERVICE_NAME = "kubernetes.io/service-name"
"""The label naming an EndpointSlice's Service."""
ENDPOINTSLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
ENDPOINTSLICE_CONTROLLER = "endpointslice-controller.k8s.io"


def _expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
    values = [str(v) for v in expr.get("values") or []]
    have = labels.get(key)
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    return False  # an operator the API would have refused


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector`` (None: nothing; ``{}``: everything)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    return all(_expression(e, labels) for e in selector.get("matchExpressions") or [])


def map_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Service's ``spec.selector`` (a plain map): empty or absent selects nothing, as the
    EndpointSlice controller leaves a Service without a selector to whoever manages it."""
    if not selector:
        return False
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())
