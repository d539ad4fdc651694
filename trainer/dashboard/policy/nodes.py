"""The Nodes page: each node's readiness, GPUs, and how much of it the pods bound to it take,
as pure functions of Node and Pod objects (no I/O; docs/dashboard.md, "Pages").

What a node offers is its ``status.allocatable`` (its ``capacity`` when it reports no
allocatable). What it gives out is summed as ``kubectl describe node``'s "Allocated resources"
sums it: the requests and limits of the pods bound to it (``spec.nodeName``) that have not
terminated (phase neither Succeeded nor Failed). A pod's requests are counted as kube-scheduler
counts them: its containers' and sidecars' sum or its largest init container (plus the sidecars
started before it), whichever is more, plus its overhead; a container that sets only a limit
requests its limit (the API server defaults the request to it). Free is allocatable less
requests, never below zero.

Pods that wait for a node (``PodScheduled=False``, reason ``Unschedulable``) are counted, with
the scheduler's message of the oldest.

A real cluster has nodes without GPU labels, conditions or allocatable, and pods with odd
fields: whatever is missing or malformed is shown as unknown or left out, never an exception.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from trainer.dashboard.policy.summary import Obj, _dict, _list, _text, epoch, meta
from trainer.machinery import podresources
from trainer.machinery.podresources import Amounts, add, amounts

CPU, MEMORY, PODS = "cpu", "memory", "pods"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GPU feature discovery's labels: the product (spaces as ``-``) and each GPU's memory in MiB."""
TERMINATED = ("Succeeded", "Failed")
NOT_TERMINATED = "status.phase!=Succeeded,status.phase!=Failed"
"""The field selector of the pods a node's allocation counts (``kubectl describe node``'s)."""
UNSCHEDULABLE = "Unschedulable"
_ZERO = Fraction(0)
_BINARY_UNITS = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def pod_requests_and_limits(pod: Obj) -> tuple[Amounts, Amounts]:
    """What a pod takes of its node (requests) and may use at most (limits), as ``kubectl
    describe node`` sums them (:mod:`trainer.machinery.podresources`)."""
    return podresources.pod_requests_and_limits(pod.get("spec"))


def slim_pod(pod: Obj) -> Obj:
    """The fields of a pod this module reads, for the cache of every pod of a cluster (the
    informer's transform): a cluster's thousands of pods then cost the dashboard little."""
    m, spec, status = meta(pod), _dict(pod.get("spec")), _dict(pod.get("status"))

    def container(raw: Any) -> Obj:
        c = _dict(raw)
        out = {"name": c.get("name"), "resources": c.get("resources")}
        if c.get("restartPolicy") is not None:
            out["restartPolicy"] = c.get("restartPolicy")
        return out

    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "metadata": {k: m[k] for k in keep if k in m},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [container(c) for c in _list(spec.get("containers"))],
            "initContainers": [container(c) for c in _list(spec.get("initContainers"))],
            "overhead": spec.get("overhead"),
        },
        "status": {
            "phase": status.get("phase"),
            "conditions": [
                c for c in _list(status.get("conditions")) if _dict(c).get("type") == "PodScheduled"
            ],
        },
    }


def readiness(node: Obj) -> tuple[str, str]:
    """``Ready``, ``NotReady`` (the Ready condition is False or Unknown) or ``Unknown`` (no
    Ready condition), as ``kubectl get nodes`` prints it, and why when not Ready."""
    for raw in _list(_dict(node.get("status")).get("conditions")):
        cond = _dict(raw)
        if cond.get("type") != "Ready":
            continue
        if cond.get("status") == "True":
            return "Ready", ""
        why = f"{_text(cond.get('reason'))}: {_text(cond.get('message'))}".strip(": ")
        return "NotReady", why or f"Ready is {_text(cond.get('status')) or 'unset'}"
    return "Unknown", "the node reports no Ready condition"


def _taint(raw: Any) -> str:
    t = _dict(raw)
    key, value, effect = _text(t.get("key")), _text(t.get("value")), _text(t.get("effect"))
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def offered(node: Obj) -> Amounts:
    """``status.allocatable``, or ``capacity`` when the node reports no allocatable."""
    status = _dict(node.get("status"))
    allocatable = status.get("allocatable")
    return amounts(allocatable if isinstance(allocatable, dict) else status.get("capacity"))


def amount_text(name: str, value: Fraction | None) -> str:
    """An amount as a person reads it: cores (``1.5``), memory in Ti/Gi/Mi/Ki, a count."""
    if value is None:
        return ""
    if name == MEMORY or name.endswith("storage"):
        for unit, size in _BINARY_UNITS:
            if abs(value) >= size:
                return f"{float(value / size):.1f}".removesuffix(".0") + unit
        return f"{float(value):g}"
    return f"{float(value):.3f}".rstrip("0").rstrip(".")


def _number(value: Fraction | None) -> float | None:
    return None if value is None else float(value)


def resource_names(nodes: Iterable[Obj]) -> list[str]:
    """The columns: cpu, memory, every GPU-like resource a node offers (``nvidia.com/gpu``,
    ``amd.com/gpu``, ...), pods."""
    gpus = {name for node in nodes for name in offered(node) if name.endswith("/gpu")}
    return [CPU, MEMORY, *sorted(gpus), PODS]


def _usage(
    name: str, offer: Fraction | None, requests: Fraction | None, limits: Fraction | None
) -> Obj:
    free = None if offer is None or requests is None else max(offer - requests, _ZERO)
    percent = None
    if offer and requests is not None:
        percent = round(float(requests / offer * 100), 1)
    return {
        "name": name,
        "allocatable": _number(offer),
        "requests": _number(requests),
        "limits": _number(limits),
        "free": _number(free),
        "percent": percent,
        "text": {
            "allocatable": amount_text(name, offer),
            "requests": amount_text(name, requests),
            "limits": amount_text(name, limits),
            "free": amount_text(name, free),
        },
    }


def node_row(node: Obj, pods: list[Obj] | None, names: list[str]) -> Obj:
    """One node as the page shows it. ``pods`` are the non-terminated pods bound to it, or
    None when they are not known (the user may not list pods in all namespaces): then only
    what the node offers is shown."""
    m = meta(node)
    labels = _dict(m.get("labels"))
    ready, why = readiness(node)
    offer = offered(node)
    requests: Amounts | None = None
    limits: Amounts | None = None
    if pods is not None:
        requests, limits = {}, {}
        for pod in pods:
            req, lim = pod_requests_and_limits(pod)
            add(requests, req)
            add(limits, lim)
    usage = []
    for name in names:
        if name == PODS:
            count = None if pods is None else Fraction(len(pods))
            usage.append(_usage(name, offer.get(name), count, None))
        else:
            usage.append(
                _usage(
                    name,
                    offer.get(name),
                    None if requests is None else requests.get(name, _ZERO),
                    None if limits is None else limits.get(name, _ZERO),
                )
            )
    spec = _dict(node.get("spec"))
    return {
        "name": _text(m.get("name")),
        "ready": ready,
        "readyDetail": why,
        "schedulable": not spec.get("unschedulable"),
        "taints": [_taint(t) for t in _list(spec.get("taints"))],
        "gpuProduct": _text(labels.get(GPU_PRODUCT_LABEL)),
        "gpuMemoryMiB": _text(labels.get(GPU_MEMORY_LABEL)),
        "resources": usage,
        "created": epoch(m.get("creationTimestamp")),
    }


def _waits_unschedulable(pod: Obj) -> Obj | None:
    """The pod's ``PodScheduled=False`` condition with reason Unschedulable, if it has one."""
    for raw in _list(_dict(pod.get("status")).get("conditions")):
        cond = _dict(raw)
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == UNSCHEDULABLE
        ):
            return cond
    return None


def view(nodes: list[Obj], pods: list[Obj], *, pods_known: bool = True) -> Obj:
    """The Nodes page: ``resources`` (the columns), ``nodes`` (rows by name), ``pending``
    (pods waiting Unschedulable: their count and the oldest one's name and message; None when
    none waits) and ``podsKnown`` (False: allocation unknown, only what nodes offer)."""
    bound: dict[str, list[Obj]] = {}
    waiting: list[tuple[float, str, Obj]] = []
    for pod in pods:
        status = _dict(pod.get("status"))
        if status.get("phase") in TERMINATED:
            continue
        node_name = _text(_dict(pod.get("spec")).get("nodeName"))
        if node_name:
            bound.setdefault(node_name, []).append(pod)
            continue
        cond = _waits_unschedulable(pod)
        if cond is not None:
            m = meta(pod)
            name = f"{_text(m.get('namespace'))}/{_text(m.get('name'))}"
            waiting.append((epoch(m.get("creationTimestamp")) or 0.0, name, cond))
    names = resource_names(nodes)
    rows = [
        node_row(node, bound.get(_text(meta(node).get("name")), []) if pods_known else None, names)
        for node in nodes
    ]
    rows.sort(key=lambda row: row["name"])
    pending = None
    if waiting:
        _, first, cond = min(waiting, key=lambda w: (w[0], w[1]))
        pending = {"count": len(waiting), "pod": first, "message": _text(cond.get("message"))}
    return {"resources": names, "nodes": rows, "pending": pending, "podsKnown": pods_known}


def update(before: Obj, after: Obj) -> tuple[str, Obj] | None:
    """What a page showing the view ``before`` needs to show ``after``: None when nothing
    changed; ``("nodes", after)`` (draw it all) when the columns changed; else ``("update",
    {pending, podsKnown, nodes: the rows that changed or are new, gone: the names of the rows
    that are no more})``, so a cluster of thousands of nodes sends only what moved."""
    if before == after:
        return None
    if before.get("resources") != after.get("resources"):
        return "nodes", after
    old = {row["name"]: row for row in before.get("nodes") or []}
    new = {row["name"]: row for row in after.get("nodes") or []}
    return "update", {
        "pending": after.get("pending"),
        "podsKnown": after.get("podsKnown"),
        "nodes": [row for name, row in new.items() if old.get(name) != row],
        "gone": sorted(name for name in old if name not in new),
    }
