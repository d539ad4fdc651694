"""The local kubelet's pod status as a pure function of its containers' states, and the other
pure decisions of the kubelet's parts (restarts, exit states, probe timing)."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.local.executor.kubelet.containers import should_restart, terminated_state
from trainer.local.executor.kubelet.policy.pod_status import (
    ContainerReport,
    PodState,
    final_phase,
    pod_status,
)
from trainer.local.executor.kubelet.probes import probe_timing
from trainer.local.executor.scheduler.scheduler import scheduling_gated_status

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def report(name: str, **kw: Any) -> ContainerReport:
    return ContainerReport(name=name, status={"name": name}, **kw)


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def pending(**kw: Any) -> PodState:
    return PodState(phase="Pending", start_time=T0, initialized=False, **kw)


def test_waiting_init_container_keeps_pod_uninitialized_and_unready() -> None:
    out = pod_status(
        {},
        pending(),
        init=[report("setup")],
        main=[report("node")],
        previous={},
        now=T0,
    )
    got = conditions(out.status)
    assert got["PodScheduled"]["status"] == "True"
    assert got["Initialized"] == {
        "type": "Initialized",
        "status": "False",
        "lastTransitionTime": T0,
        "reason": "ContainersNotInitialized",
        "message": "containers with incomplete status: [setup]",
    }
    assert got["Ready"]["reason"] == "ContainersNotReady"
    assert got["Ready"]["message"] == "containers with unready status: [node]"
    assert out.status["initContainerStatuses"] == [{"name": "setup"}]
    assert out.status["containerStatuses"] == [{"name": "node"}]
    assert out.status["podIP"] == "127.0.0.1"


def test_started_sidecar_counts_as_initialized_but_must_be_ready() -> None:
    out = pod_status(
        {},
        pending(),
        init=[report("proxy", sidecar=True, started=True, ready=False)],
        main=[report("node", ready=True)],
        previous={},
        now=T0,
    )
    got = conditions(out.status)
    assert got["Initialized"]["status"] == "True"
    assert got["ContainersReady"]["message"] == "containers with unready status: [proxy]"


def test_ready_waits_for_readiness_gates_of_other_writers() -> None:
    pod = {
        "spec": {"readinessGates": [{"conditionType": "example.com/Gate"}]},
        "status": {"conditions": [{"type": "example.com/Gate", "status": "False"}]},
    }
    state = PodState(phase="Running", start_time=T0, initialized=True)
    out = pod_status(pod, state, init=[], main=[report("node", ready=True)], previous={}, now=T0)
    got = conditions(out.status)
    assert got["ContainersReady"]["status"] == "True"
    assert got["Ready"]["reason"] == "ReadinessGatesNotReady"
    assert out.status["conditions"][0] == {"type": "example.com/Gate", "status": "False"}
    assert "initContainerStatuses" not in out.status


def test_transition_time_moves_only_when_status_changes() -> None:
    state = PodState(phase="Running", start_time=T0, initialized=True)
    first = pod_status({}, state, init=[], main=[report("node")], previous={}, now=T0)
    same = pod_status({}, state, init=[], main=[report("node")], previous=first.conditions, now=T1)
    assert conditions(same.status)["Ready"]["lastTransitionTime"] == T0
    flipped = pod_status(
        {}, state, init=[], main=[report("node", ready=True)], previous=same.conditions, now=T1
    )
    assert conditions(flipped.status)["Ready"] == {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": T1,
    }
    assert conditions(flipped.status)["PodScheduled"]["lastTransitionTime"] == T0


def test_finished_pod_is_not_ready_and_carries_reason() -> None:
    state = PodState(
        phase="Failed",
        start_time=T0,
        initialized=True,
        finished=True,
        reason="DeadlineExceeded",
        message="too long",
    )
    out = pod_status({}, state, init=[], main=[report("node", ready=True)], previous={}, now=T0)
    assert conditions(out.status)["Ready"]["reason"] == "PodCompleted"
    assert (out.status["phase"], out.status["reason"], out.status["message"]) == (
        "Failed",
        "DeadlineExceeded",
        "too long",
    )


@pytest.mark.parametrize(
    ("failed", "reason", "succeeded", "phase"),
    [
        (False, "", [True, True], "Succeeded"),
        (False, "", [True, False], "Failed"),
        (False, "", [], "Failed"),
        (True, "", [True], "Failed"),
        (False, "DeadlineExceeded", [True], "Failed"),
    ],
)
def test_final_phase(failed: bool, reason: str, succeeded: list[bool], phase: str) -> None:
    main = [report(f"c{i}", succeeded=ok) for i, ok in enumerate(succeeded)]
    assert final_phase(failed=failed, reason=reason, main=main) == phase


def test_scheduling_gated_status_once() -> None:
    pod: dict[str, Any] = {"status": {"conditions": [{"type": "Other", "status": "True"}]}}
    status = scheduling_gated_status(pod, now=T0)
    assert status is not None
    assert status["conditions"][1]["reason"] == "SchedulingGated"
    assert scheduling_gated_status({"status": status}, now=T1) is None


@pytest.mark.parametrize(
    ("code", "policy", "init", "sidecar", "restart"),
    [
        (0, "Never", True, True, True),
        (1, "OnFailure", True, False, True),
        (1, "Never", True, False, False),
        (0, "Always", True, False, False),
        (0, "Always", False, False, True),
        (0, "OnFailure", False, False, False),
        (2, "OnFailure", False, False, True),
        (2, "Never", False, False, False),
    ],
)
def test_should_restart(code: int, policy: str, init: bool, sidecar: bool, restart: bool) -> None:
    assert should_restart(code=code, policy=policy, init=init, sidecar=sidecar) is restart


def test_terminated_state_of_signal_and_message() -> None:
    killed = terminated_state(
        -9, started_at=T0, finished_at=T1, container_id="local://1", message="oom"
    )
    assert killed == {
        "exitCode": 137,
        "reason": "Error",
        "startedAt": T0,
        "finishedAt": T1,
        "containerID": "local://1",
        "signal": 9,
        "message": "oom",
    }
    # A message the container wrote itself is kept on success too; none is left out.
    ok = terminated_state(0, started_at=T0, finished_at=T1, container_id="local://2", message="x")
    assert ok["reason"] == "Completed" and ok["message"] == "x" and "signal" not in ok
    empty = terminated_state(0, started_at=T0, finished_at=T1, container_id="local://3")
    assert "message" not in empty


def test_probe_timing_is_bounded_for_a_local_run() -> None:
    timing = probe_timing({"initialDelaySeconds": 600, "periodSeconds": 60, "timeoutSeconds": "x"})
    assert (timing.initial_delay, timing.period, timing.timeout) == (30.0, 5.0, 1.0)
    assert (timing.success_threshold, timing.failure_threshold) == (1, 3)
    assert probe_timing({"periodSeconds": 0, "failureThreshold": 0}).period == 0.1
