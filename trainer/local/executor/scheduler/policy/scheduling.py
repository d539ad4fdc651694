"""The local scheduler's decisions, as pure functions: which pending pods are bound to which
node, and why the others wait, in kube-scheduler's words (docs/local-plane.md, "Scheduling").
What it decides on (nodes, pods and JobSet gangs as views, requests in integer thousandths) is
:mod:`~trainer.local.executor.scheduler.policy.views`; its names are re-exported here.

Filters, as kube-scheduler's plugins of the same names apply them to each node:

- ``NodeUnschedulable``: a node with ``spec.unschedulable`` takes no pod ("node(s) were
  unschedulable").
- ``NodeAffinity``: ``nodeSelector`` and the required node affinity's terms against the node's
  labels (and ``metadata.name`` for ``matchFields``) ("node(s) didn't match Pod's node
  affinity/selector").
- ``TaintToleration``: a ``NoSchedule`` or ``NoExecute`` taint the pod does not tolerate
  ("node(s) had untolerated taint {key: value}").
- ``NodeResourcesFit``: the pod's requests (:func:`pod_requests`: the sum of its containers and
  sidecars or its largest init container, whichever is more, plus overhead; a container's limit
  is its request where it sets none) against what the node's allocatable leaves once the pods
  bound to it are counted ("Insufficient cpu", "Too many pods").

A pod that no node passes waits with kube-scheduler's message, "0/1 nodes are available:
1 Insufficient nvidia.com/gpu." (one count per reason, reasons sorted, as ``FitError`` writes
it), and is ``never`` when it could not pass even on empty nodes: no capacity freed later makes
it fit.

Gangs: the pods of a gang (a JobSet's, see :func:`gang_key`) are admitted all or none. A gang is
admitted when its whole demand (:class:`Gang`: one slot per pod its JobSet runs, from the
replicated jobs' templates, phase by phase) can be placed on the nodes; the place is then held
for it (a reservation, until its JobSet finishes), so its pods bind as the Job controller creates
them, and no other pod takes the room meanwhile. Units wait in creation order; one that does not fit
does not hold back a later one that does, as with kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.local.executor.scheduler.policy.views import (
    MILLI,
    POD_GROUP_LABEL,
    PODS,
    Gang,
    NodeView,
    Placement,
    PodView,
    Resources,
    _add,
    _floor0,
    _minus,
    format_amount,
    gang_key,
    insufficient,
    jobset_gang,
    jobset_gang_key,
    node_view,
    pod_requests,
    pod_view,
)

__all__ = [  # the views' names, for the scheduler and its readers in one place
    "MILLI",
    "PODS",
    "POD_GROUP_LABEL",
    "Decision",
    "Gang",
    "NodeView",
    "Placement",
    "PodView",
    "Resources",
    "Waiting",
    "fits_empty",
    "format_amount",
    "free_on",
    "gang_key",
    "jobset_gang",
    "jobset_gang_key",
    "node_view",
    "pod_requests",
    "pod_view",
    "schedule",
    "shortfall",
]

_ZERO = 0
UNSCHEDULABLE_NODE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NO_NODES = "no nodes available to schedule pods"
SCHEDULING_GATED = "Scheduling is blocked due to non-empty scheduling gates"
_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")


# --- filters ----------------------------------------------------------------------------------
def _expression_matches(expr: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
    wanted = [str(v) for v in expr.get("values") or []]
    have = values.get(key)
    if op == "In":
        return have is not None and have in wanted
    if op == "NotIn":
        return have is None or have not in wanted
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(wanted) == 1:
        try:
            a, b = int(have), int(wanted[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term_matches(term: Mapping[str, Any], node: NodeView) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node
    return all(_expression_matches(e, node.labels) for e in expressions) and all(
        _expression_matches(f, {"metadata.name": node.name}) for f in fields
    )


def affinity_matches(place: Placement, node: NodeView) -> bool:
    """``nodeSelector`` and the required node affinity (terms ORed, expressions ANDed)."""
    if any(node.labels.get(k) != v for k, v in place.node_selector.items()):
        return False
    required = (
        (place.affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(_term_matches(t, node) for t in terms)


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def static_reasons(place: Placement, node: NodeView) -> list[str]:
    """Why ``place`` can never go to ``node``, whatever runs there (empty: it may)."""
    if node.unschedulable:
        return [UNSCHEDULABLE_NODE]
    if not affinity_matches(place, node):
        return [AFFINITY_MISMATCH]
    for taint in node.taints:
        if taint.get("effect") in _SCHEDULE_EFFECTS and not tolerates(place.tolerations, taint):
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
            ]
    return []


def fit_message(reasons: Sequence[Sequence[str]], nodes: int) -> str:
    """kube-scheduler's ``FitError`` message from each node's reasons."""
    if not nodes:
        return NO_NODES
    counts: dict[str, int] = {}
    for node_reasons in reasons:
        for reason in node_reasons:
            counts[reason] = counts.get(reason, 0) + 1
    parts = sorted(f"{n} {reason}" for reason, n in counts.items())
    return f"0/{nodes} nodes are available: {', '.join(parts)}."


# --- a scheduling pass ------------------------------------------------------------------------
@dataclass(frozen=True)
class Waiting:
    """Why a pod is not bound: kube-scheduler's message, and whether it can never fit."""

    message: str
    never: bool
    shortfall: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Resource -> (needed, free) for what is short on the best node."""


@dataclass
class Decision:
    binds: list[tuple[PodView, str]] = field(default_factory=list)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    """Pod uid -> why it waits."""
    gated: list[PodView] = field(default_factory=list)


def fits(requests: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """Whether every resource asked for (above zero) is within ``free``."""
    return all(want <= 0 or want <= free.get(name, _ZERO) for name, want in requests.items())


@dataclass
class _Cluster:
    """What is free on each node during a pass. A trial (:meth:`trial`) shares the node maps
    and copies one only when it takes from it, so trying a gang costs what it places, not the
    number of nodes."""

    nodes: list[NodeView]
    free: dict[str, Resources]
    own: dict[str, dict[str, Resources]]
    """Gang -> node -> the part of its reservation its pods do not use yet."""
    copied: set[str] | None = None
    """For a trial: the nodes whose map is its own already (None: every map is)."""
    static: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    """(a placement's filters, node) -> whether the node lets it in: a pass asks often."""
    hints: dict[tuple[Any, ...], int] = field(default_factory=dict)
    """A placement's shape (requests and filters) -> the index of the first node that may
    still take it: free room only shrinks during a pass, so the nodes before it cannot."""
    shapes: dict[int, tuple[Placement, tuple[Any, ...]]] = field(default_factory=dict)
    by_name: dict[str, NodeView] = field(default_factory=dict)
    changes: int = 0
    """How many times the free room changed in this pass."""

    def __post_init__(self) -> None:
        if not self.by_name:
            self.by_name = {n.name: n for n in self.nodes}

    def shape(self, place: Placement) -> tuple[Any, ...]:
        known = self.shapes.get(id(place))
        if known is None or known[0] is not place:
            shape = (
                tuple(sorted(place.requests.items())),
                repr(place.node_selector),
                repr(place.affinity),
                repr(place.tolerations),
            )
            known = self.shapes[id(place)] = (place, shape)
        return known[1]

    def trial(self) -> _Cluster:
        return _Cluster(
            self.nodes,
            dict(self.free),
            {},
            set(),
            self.static,
            dict(self.hints),
            self.shapes,
            self.by_name,
        )

    def allowed(self, place: Placement, node: NodeView) -> bool:
        """The node's filters (``static_reasons``), once per pass for each node and shape of
        placement."""
        key = (self.shape(place)[1:], node.name)
        ok = self.static.get(key)
        if ok is None:
            ok = self.static[key] = not static_reasons(place, node)
        return ok

    def room(self, node: str, gang: str) -> Resources:
        """What a pod of ``gang`` may take on ``node``: the free part and its own held part."""
        own = self.own.get(gang, {}).get(node)
        free = self.free[node]
        if not own:
            return free
        return {k: free.get(k, _ZERO) + own.get(k, _ZERO) for k in {*free, *own}}

    def take(self, node: str, gang: str, requests: Mapping[str, int]) -> None:
        own = self.own.get(gang, {}).get(node)
        rest = dict(requests)
        if own is not None:
            for name, want in requests.items():
                used = min(want, max(own.get(name, _ZERO), _ZERO))
                own[name] = own.get(name, _ZERO) - used
                rest[name] = want - used
        self.changes += 1
        if self.copied is not None and node not in self.copied:
            self.free[node] = dict(self.free[node])
            self.copied.add(node)
        free = self.free[node]
        for name, want in rest.items():
            free[name] = free.get(name, _ZERO) - want


def _waiting(place: Placement, cluster: _Cluster, gang: str, nodes: Sequence[NodeView]) -> Waiting:
    reasons = []
    never = True
    best: dict[str, tuple[int, int]] = {}
    for node in nodes:
        static = static_reasons(place, node)
        if static:
            reasons.append(static)
            continue
        room = cluster.room(node.name, gang)
        short = insufficient(place.requests, room)
        reasons.append(short)
        if not insufficient(place.requests, node.allocatable):
            never = False
        if short and not best:
            best = {
                n: (place.requests[n], room.get(n, 0))
                for n in place.requests
                if place.requests[n] > room.get(n, 0)
            }
    return Waiting(fit_message(reasons, len(nodes)), never, best)


def _first_fit(place: Placement, cluster: _Cluster, gang: str) -> str | None:
    """The first node that takes ``place``: for a pod of an admitted gang the nodes held for
    it first, then every node in order from where the same shape last fitted."""
    own = cluster.own.get(gang)
    if own:
        for name in own:
            node = cluster.by_name.get(name)
            if (
                node is not None
                and cluster.allowed(place, node)
                and fits(place.requests, cluster.room(name, gang))
            ):
                return name
    key = cluster.shape(place)
    nodes = cluster.nodes
    for index in range(cluster.hints.get(key, 0), len(nodes)):
        node = nodes[index]
        if cluster.allowed(place, node) and fits(place.requests, cluster.free[node.name]):
            cluster.hints[key] = index
            return node.name
    cluster.hints[key] = len(nodes)
    return None


def _total(slots: Iterable[Placement]) -> Placement:
    total: Resources = {}
    for slot in slots:
        _add(total, slot.requests)
    return Placement(total)


def schedule(
    nodes: Sequence[NodeView],
    pods: Iterable[PodView],
    gangs: Mapping[str, Gang],
    admitted: dict[str, dict[str, Resources]],
) -> Decision:
    """One pass over every pod: bind what fits, say why the rest waits. ``admitted`` (gang ->
    node -> the room held for it) is the scheduler's memory of admitted gangs; it is updated in
    place (gangs admitted now are added, gangs no longer in ``gangs`` dropped)."""
    for key in [k for k in admitted if k not in gangs]:
        del admitted[key]
    nodes = sorted(nodes, key=lambda n: n.name)
    free: dict[str, Resources] = {n.name: dict(n.allocatable) for n in nodes}
    bound_of_gang: dict[str, dict[str, Resources]] = {}
    pending: list[PodView] = []
    decision = Decision()
    for pod in pods:
        if pod.terminal:
            continue
        if pod.node_name:
            if pod.node_name in free:
                _add(free[pod.node_name], {k: -v for k, v in pod.place.requests.items()})
                if pod.gang:
                    _add(
                        bound_of_gang.setdefault(pod.gang, {}).setdefault(pod.node_name, {}),
                        pod.place.requests,
                    )
            continue
        if pod.gated and not pod.deleting:
            decision.gated.append(pod)
        elif pod.pending:
            pending.append(pod)
    own: dict[str, dict[str, Resources]] = {}
    for gang, by_node in admitted.items():
        for node, held in by_node.items():
            if node not in free:
                continue
            left = _floor0(_minus(held, bound_of_gang.get(gang, {}).get(node, {})))
            own.setdefault(gang, {})[node] = left
            _add(free[node], {k: -v for k, v in left.items()})
    cluster = _Cluster(nodes, free, own)
    pending.sort(key=lambda p: (p.gang not in admitted, p.created, p.key))
    failed: dict[tuple[Any, ...], Waiting] = {}
    units: dict[str, list[PodView]] = {}
    for pod in pending:
        units.setdefault(pod.gang or f"pod:{pod.uid}", []).append(pod)
    for unit, members in units.items():
        gang = members[0].gang
        if gang and gang not in admitted:
            spec = gangs.get(gang)
            if spec is None:
                continue  # its JobSet is not seen yet: the next pass decides
            # Gangs made from the same templates fare alike until the free room changes.
            shape = (cluster.changes, tuple(tuple(map(cluster.shape, p)) for p in spec.phases))
            why = failed.get(shape)
            plan = _place_gang(spec, cluster) if why is None else None
            if plan is None:
                if why is None:
                    why = failed[shape] = _gang_waiting(spec, cluster)
                for pod in members:
                    decision.waiting[pod.uid] = why
                continue
            cluster.changes += 1
            admitted[gang] = plan
            cluster.own[gang] = {n: dict(r) for n, r in plan.items()}
            for node, held in plan.items():
                _add(cluster.free[node], {k: -v for k, v in held.items()})
        for pod in members:
            target = _first_fit(pod.place, cluster, gang or unit)
            if target is None:
                decision.waiting[pod.uid] = _waiting(pod.place, cluster, gang or unit, nodes)
                continue
            cluster.take(target, gang or unit, pod.place.requests)
            decision.binds.append((pod, target))
    return decision


def _place_slots(slots: Sequence[Placement], cluster: _Cluster) -> dict[str, Resources] | None:
    """Where every one of ``slots`` would go on what is free now (first fit, largest first);
    None when one does not fit."""
    trial = cluster.trial()
    plan: dict[str, Resources] = {}
    names = sorted({n for s in slots for n in s.requests})
    ordered = sorted(slots, key=lambda s: tuple(s.requests.get(n, 0) for n in names), reverse=True)
    for slot in ordered:
        node = _first_fit(slot, trial, "")
        if node is None:
            return None
        trial.take(node, "", slot.requests)
        _add(plan.setdefault(node, {}), slot.requests)
    return plan


def _place_gang(gang: Gang, cluster: _Cluster) -> dict[str, Resources] | None:
    """The room to hold for ``gang`` on each node: every phase placed on what is free now,
    and per node the most any phase takes of each resource; None when a phase does not fit."""
    plan: dict[str, Resources] = {}
    for phase in gang.phases:
        placed = _place_slots(phase, cluster)
        if placed is None:
            return None
        for node, used in placed.items():
            held = plan.setdefault(node, {})
            for name, value in used.items():
                held[name] = max(held.get(name, 0), value)
    return plan


def _first_short_phase(gang: Gang, cluster: _Cluster) -> tuple[Placement, ...]:
    for phase in gang.phases:
        if _place_slots(phase, cluster) is None:
            return phase
    return gang.phases[0] if gang.phases else ()


def _gang_waiting(gang: Gang, cluster: _Cluster) -> Waiting:
    """Why a gang waits: for one node, the demand of its first phase that does not fit
    against what is free there (the message names every resource it is short of); otherwise
    why the first slot of that phase that does not fit waits."""
    nodes = cluster.nodes
    phase = _first_short_phase(gang, cluster)
    empty = _Cluster(list(nodes), {n.name: dict(n.allocatable) for n in nodes}, {})
    never = _place_gang(gang, empty) is None
    if len(nodes) == 1 or not phase:
        statics = [s for s in phase if static_reasons(s, nodes[0])] if nodes else []
        place = statics[0] if statics else _total(phase)
        why = _waiting(place, cluster, "", nodes)
        return Waiting(why.message, never, why.shortfall)
    trial = cluster.trial()
    for slot in phase:
        node = _first_fit(slot, trial, "")
        if node is None:
            why = _waiting(slot, trial, "", nodes)
            return Waiting(why.message, never, why.shortfall)
        trial.take(node, "", slot.requests)
    return Waiting(fit_message([], len(nodes)), never)


# --- for people: what a waiting JobSet needs ---------------------------------------------------
def free_on(node: NodeView, pods: Iterable[PodView]) -> Resources:
    """What ``node``'s allocatable leaves once the pods bound to it and alive are counted."""
    free = dict(node.allocatable)
    for pod in pods:
        if pod.node_name == node.name and not pod.terminal:
            _add(free, {k: -v for k, v in pod.place.requests.items()})
    return free


def fits_empty(gang: Gang, nodes: Sequence[NodeView]) -> bool:
    """Whether ``gang`` could run on ``nodes`` with nothing else on them."""
    empty = _Cluster(list(nodes), {n.name: dict(n.allocatable) for n in nodes}, {})
    return _place_gang(gang, empty) is not None


def shortfall(gang: Gang, node: NodeView, free: Mapping[str, int]) -> str:
    """``needs 2 nvidia.com/gpu, 1 free`` for each resource the gang's first phase that does
    not fit wants beyond ``free`` on ``node`` (``pods`` left out: it is rarely what a person
    waits for)."""
    cluster = _Cluster([node], {node.name: dict(free)}, {})
    total = _total(_first_short_phase(gang, cluster)).requests
    parts = [
        f"needs {format_amount(name, want)} {name}, "
        f"{format_amount(name, max(free.get(name, 0), 0))} free"
        for name, want in sorted(total.items())
        if name != PODS and want > 0 and want > free.get(name, 0)
    ]
    return "; ".join(parts)
