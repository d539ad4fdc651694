"""What a pod takes of its node, as kube-scheduler and ``kubectl describe node`` count it, from
the pod as stored (plain dicts; fields missing or malformed count as nothing): one home for the
local scheduler and the dashboard's Nodes page.

A container's request for a resource is its own, else its limit (the API server defaults a
request to the limit). A pod's is the larger of its regular containers' and sidecars'
(``restartPolicy: Always`` init containers) sum and each init container plus the sidecars
started before it, plus the pod's overhead
(https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/#resource-sharing-within-containers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from trainer.machinery.quantity import Quantity

Amounts = dict[str, Fraction]
_ZERO = Fraction(0)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def amounts(values: Any) -> Amounts:
    """Resource name -> amount of a ``requests`` / ``limits`` / ``allocatable`` map; a value
    that does not parse is left out."""
    out: Amounts = {}
    for name, value in _dict(values).items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        try:
            out[str(name)] = Quantity.parse(str(value)).value
        except ValueError:
            continue
    return out


def add(total: Amounts, more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, _ZERO) + value


def container_requests(container: Any) -> Amounts:
    resources = _dict(_dict(container).get("resources"))
    out = amounts(resources.get("requests"))
    for name, value in amounts(resources.get("limits")).items():
        out.setdefault(name, value)
    return out


def container_limits(container: Any) -> Amounts:
    return amounts(_dict(_dict(container).get("resources")).get("limits"))


def pod_total(spec: Any, of: Callable[[Any], Amounts]) -> Amounts:
    """max(the containers' and sidecars' sum, each init container plus the sidecars started
    before it), without overhead."""
    spec = _dict(spec)
    total: Amounts = {}
    for container in _list(spec.get("containers")):
        add(total, of(container))
    sidecars: Amounts = {}
    peak: Amounts = {}
    for container in _list(spec.get("initContainers")):
        own = of(container)
        if _dict(container).get("restartPolicy") == "Always":
            add(sidecars, own)
            own = dict(sidecars)
        else:
            own = {**sidecars, **{k: v + sidecars.get(k, _ZERO) for k, v in own.items()}}
        for name, value in own.items():
            peak[name] = max(peak.get(name, _ZERO), value)
    add(total, sidecars)
    for name, value in peak.items():
        total[name] = max(total.get(name, _ZERO), value)
    return total


def pod_requests(spec: Any) -> Amounts:
    """What a pod (its ``spec``) takes of its node: :func:`pod_total` of the requests plus the
    overhead."""
    total = pod_total(spec, container_requests)
    add(total, amounts(_dict(spec).get("overhead")))
    return total


def pod_requests_and_limits(spec: Any) -> tuple[Amounts, Amounts]:
    """The pod's requests, and what it may use at most: the limits' total, with the overhead
    added to each resource it limits (as ``kubectl describe node`` shows them)."""
    overhead = amounts(_dict(spec).get("overhead"))
    limits = pod_total(spec, container_limits)
    for name, value in overhead.items():
        if name in limits:
            limits[name] += value
    return pod_requests(spec), limits
