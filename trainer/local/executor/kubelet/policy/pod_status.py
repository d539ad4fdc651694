"""The pod status the local kubelet reports, as pure functions of its containers' states.

The kubelet (:mod:`trainer.local.executor.kubelet.kubelet`) and the pod it runs
(:mod:`trainer.local.executor.kubelet.pod`) keep mutable runtime state: processes, events, timers.
What they write to ``pods/status`` is derived from that state here, without I/O or a clock of
its own (the caller passes ``now``), so the rules a kubelet follows (which conditions are True
when, which phase a finished pod ends in, which conditions of other writers are kept) can be
read in one place and tested with plain values.

A container is reported through a :class:`ContainerReport` (its name, whether it is a sidecar,
started, ready, succeeded, and its ``containerStatus``); conditions are carried from one report
to the next in a ``type -> condition`` mapping so that ``lastTransitionTime`` only moves when a
condition's status changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.local.executor.kubelet.policy.termination import limit_pod_messages
from trainer.local.executor.policy.podfields import LOOPBACK

OWN_CONDITIONS = ("PodScheduled", "Initialized", "ContainersReady", "Ready")
"""The conditions this kubelet writes; any other condition type belongs to another writer."""


@dataclass(frozen=True)
class ContainerReport:
    """What the pod status needs to know about one container at one moment."""

    name: str
    status: dict[str, Any]
    """The ``containerStatus`` entry (name, image, state, lastState, ready, ...)."""
    sidecar: bool = False
    started: bool = False
    ready: bool = False
    succeeded: bool = False


@dataclass(frozen=True)
class PodState:
    """The pod-level facts the status is computed from (besides its containers)."""

    phase: str
    start_time: str
    initialized: bool
    finished: bool = False
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class PodStatus:
    """A computed status and the conditions to carry into the next computation."""

    status: dict[str, Any]
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)


def condition(
    previous: Mapping[str, dict[str, Any]],
    type_: str,
    ok: bool,
    *,
    now: str,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    """A condition, keeping the previous ``lastTransitionTime`` while its status is unchanged."""
    status = "True" if ok else "False"
    before = previous.get(type_)
    since = (
        before.get("lastTransitionTime")
        if before is not None and before.get("status") == status
        else None
    )
    cond: dict[str, Any] = {"type": type_, "status": status, "lastTransitionTime": since or now}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def final_phase(*, failed: bool, reason: str, main: Sequence[ContainerReport]) -> str:
    """The phase a pod ends in: Succeeded only when every regular container succeeded and
    nothing (a deadline, a mount failure, a container that cannot run) failed it."""
    if failed or reason:
        return "Failed"
    if main and all(c.succeeded for c in main):
        return "Succeeded"
    return "Failed"


def pod_conditions(
    pod: Mapping[str, Any],
    state: PodState,
    *,
    init: Sequence[ContainerReport],
    main: Sequence[ContainerReport],
    previous: Mapping[str, dict[str, Any]],
    now: str,
) -> dict[str, dict[str, Any]]:
    """This kubelet's four conditions (``type -> condition``) for ``pod`` in ``state``.

    Initialized once every init container succeeded (a sidecar: started); ContainersReady and
    Ready once every sidecar and regular container is ready, Ready also waiting for the pod's
    readinessGates; both False with ``PodCompleted`` once the pod finished."""
    out: dict[str, dict[str, Any]] = {}

    def put(type_: str, ok: bool, reason: str = "", message: str = "") -> None:
        out[type_] = condition(previous, type_, ok, now=now, reason=reason, message=message)

    put("PodScheduled", True)
    pending_init = [c.name for c in init if not (c.succeeded or (c.sidecar and c.started))]
    if state.initialized or not pending_init:
        put("Initialized", True)
    else:
        put(
            "Initialized",
            False,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_init)}]",
        )
    unready = [c.name for c in [*(c for c in init if c.sidecar), *main] if not c.ready]
    if state.finished or state.phase in ("Succeeded", "Failed"):
        put("ContainersReady", False, "PodCompleted")
        put("Ready", False, "PodCompleted")
    elif unready:
        message = f"containers with unready status: [{' '.join(unready)}]"
        put("ContainersReady", False, "ContainersNotReady", message)
        put("Ready", False, "ContainersNotReady", message)
    else:
        put("ContainersReady", True)
        gates = [
            g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []
        ]
        current = {
            c.get("type"): c.get("status")
            for c in (pod.get("status") or {}).get("conditions") or []
        }
        missing = [g for g in gates if current.get(g) != "True"]
        if missing:
            put(
                "Ready",
                False,
                "ReadinessGatesNotReady",
                f"corresponding condition of pod readiness gate {missing[0]!r} is not True",
            )
        else:
            put("Ready", True)
    return out


def pod_status(
    pod: Mapping[str, Any],
    state: PodState,
    *,
    init: Sequence[ContainerReport],
    main: Sequence[ContainerReport],
    previous: Mapping[str, dict[str, Any]],
    now: str,
    pod_ip: str = LOOPBACK,
) -> PodStatus:
    """The ``status`` this kubelet writes for ``pod`` (every list complete: a merge patch
    replaces lists), with the conditions to pass as ``previous`` next time.

    Conditions of other writers found in ``pod.status.conditions`` come first, unchanged."""
    own = {
        **previous,
        **pod_conditions(pod, state, init=init, main=main, previous=previous, now=now),
    }
    foreign = [
        c
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") not in OWN_CONDITIONS
    ]
    status: dict[str, Any] = {
        "phase": state.phase,
        "conditions": [
            *foreign,
            *(own[t] for t in ("Initialized", "Ready", "ContainersReady")),
            own["PodScheduled"],
        ],
        "hostIP": LOOPBACK,
        "hostIPs": [{"ip": LOOPBACK}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": state.start_time,
        "containerStatuses": [c.status for c in main],
    }
    if init:
        status["initContainerStatuses"] = [c.status for c in init]
    limit_pod_messages([*status.get("initContainerStatuses", []), *status["containerStatuses"]])
    if state.reason:
        status["reason"] = state.reason
    if state.message:
        status["message"] = state.message
    return PodStatus(status=status, conditions=own)
