"""``metav1.LabelSelector`` matching, as ``metav1.LabelSelectorAsSelector`` reads a selector
(k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go): ``matchLabels`` and ``matchExpressions``
ANDed; a missing (None) selector matches nothing and an empty one everything. A selector
LabelSelectorAsSelector refuses (an unknown operator, ``In`` without values, ``Exists`` with
some) raises :class:`SelectorError` with its message, so each caller decides what a broken
selector means (the eviction subresource skips the budget, the disruption controller reports
it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SERVICE_NAME = "kubernetes.io/service-name"
"""The label naming an EndpointSlice's Service."""
ENDPOINTSLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
ENDPOINTSLICE_CONTROLLER = "endpointslice-controller.k8s.io"


class SelectorError(ValueError):
    """A label selector that LabelSelectorAsSelector refuses."""


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, Any]) -> bool:
    """Whether ``labels`` satisfy ``selector``; :class:`SelectorError` for a broken one."""
    if selector is None:
        return False
    if not isinstance(selector, Mapping):
        raise SelectorError("a label selector must be an object")
    match = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    ok = all(labels.get(key) == value for key, value in match.items())
    for expr in expressions:
        ok = _expression(expr, labels) and ok  # every expression is checked for errors
    return ok


def _expression(expr: Any, labels: Mapping[str, Any]) -> bool:
    if not isinstance(expr, Mapping):
        raise SelectorError("a label selector requirement must be an object")
    key = str(expr.get("key") or "")
    op = str(expr.get("operator") or "")
    values = [str(v) for v in expr.get("values") or []]
    if op in ("In", "NotIn"):
        if not values:
            raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
        present = key in labels
        if op == "In":
            return present and labels[key] in values
        return not present or labels[key] not in values
    if op in ("Exists", "DoesNotExist"):
        if values:
            raise SelectorError("values set must be empty for exists and does not exist")
        return (key in labels) == (op == "Exists")
    raise SelectorError(f'"{op}" is not a valid label selector operator')


def map_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Service's ``spec.selector`` (a plain map): empty or absent selects nothing, as the
    EndpointSlice controller leaves a Service without a selector to whoever manages it."""
    if not selector:
        return False
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())
