"""``metav1.LabelSelector`` matching, as ``metav1.LabelSelectorAsSelector`` reads a selector
(k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go): ``matchLabels`` and ``matchExpressions``
ANDed; a missing (None) selector matches nothing and an empty one everything. A selector
LabelSelectorAsSelector refuses (an unknown operator, ``In`` without values, ``Exists`` with
some) raises :class:`SelectorError` with its message, so each caller decides what a broken
selector means (the eviction subresource skips the budget, the disruption controller reports
it). Also a Service's plain-map selector, and where its EndpointSlices route a connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def ready_endpoints(
    service: Mapping[str, Any] | None, slices: Iterable[Mapping[str, Any]], port: int
) -> list[tuple[str, str, int]]:
    """Where a connection to ``service`` on its ``port`` may go, as kube-proxy routes one:
    (namespace, pod, container port) of each ready endpoint of its EndpointSlices (those of
    ``slices`` labelled with its name) whose port has the Service port's name."""
    meta = (service or {}).get("metadata") or {}
    name, namespace = meta.get("name"), str(meta.get("namespace") or "")
    spec_port = next(
        (
            p
            for p in ((service or {}).get("spec") or {}).get("ports") or []
            if p.get("port") == port
        ),
        None,
    )
    if spec_port is None:
        return []
    port_name = spec_port.get("name", "")
    out: list[tuple[str, str, int]] = []
    for slice_ in slices:
        if ((slice_.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME) != name:
            continue
        number = next(
            (p.get("port") for p in slice_.get("ports") or [] if p.get("name", "") == port_name),
            None,
        )
        if number is None:
            continue
        for ep in slice_.get("endpoints") or []:
            ref = ep.get("targetRef") or {}
            if (ep.get("conditions") or {}).get("ready") and ref.get("kind") == "Pod":
                out.append((str(ref.get("namespace") or namespace), str(ref["name"]), int(number)))
    return out
