"""The local scheduler keeps a pass's inputs from its watch handlers (docs/local-plane.md,
"Scheduling", Cost): only pods not yet finished are kept, and only a change that can alter a
decision asks for a pass."""

from __future__ import annotations

from typing import Any

from trainer.local.executor.scheduler import Scheduler


class _Kube:
    """Never called: the handlers do no I/O."""


def pod(*, node: str = "", phase: str = "Pending", note: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "uid": "u1",
            "name": "p",
            "namespace": "ns",
            "resourceVersion": "1",
            "annotations": {"note": note},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
        "status": {"phase": phase},
    }


def node(rv: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "resourceVersion": rv},
        "spec": {},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": gpus, "pods": "110"}},
    }


def woke(s: Scheduler) -> bool:
    was = s._wake.is_set()
    s._wake.clear()
    return was


def test_only_decision_changes_wake_a_pass_and_finished_pods_are_let_go() -> None:
    s = Scheduler(_Kube(), pods=None, jobsets=None)  # type: ignore[arg-type]
    s._on_pod("ADDED", pod(), None)
    assert woke(s) and s._waiting == {"u1"} and "u1" in s._views
    s._on_pod("MODIFIED", pod(note="x"), None)  # nothing the scheduler decides on
    assert not woke(s)
    s._on_pod("MODIFIED", pod(node="n1"), None)  # bound: takes room, waits no more
    assert woke(s) and not s._waiting and "u1" in s._views
    s._on_pod("MODIFIED", pod(node="n1", phase="Running"), None)
    assert not woke(s)
    s._on_pod("MODIFIED", pod(node="n1", phase="Succeeded"), None)  # room freed
    assert woke(s) and "u1" not in s._views and "u1" not in s._objects
    s._on_pod("MODIFIED", pod(node="n1", phase="Succeeded", note="y"), None)
    assert not woke(s) and "u1" not in s._views
    s._on_pod("DELETED", pod(node="n1", phase="Succeeded"), None)
    assert not woke(s)


def test_a_node_heartbeat_does_not_wake_a_pass_but_a_capacity_change_does() -> None:
    s = Scheduler(_Kube(), pods=None, jobsets=None)  # type: ignore[arg-type]
    s._on_node("ADDED", node("1"), None)
    assert woke(s)
    s._on_node("MODIFIED", node("2"), None)
    assert not woke(s)
    s._on_node("MODIFIED", node("3", gpus=4), None)
    assert woke(s)
    s._on_node("DELETED", node("3", gpus=4), None)
    assert woke(s) and not s._node_views


def test_a_waiting_pods_message_is_rewritten_after_kube_schedulers_back_off() -> None:
    s = Scheduler(_Kube(), pods=None, jobsets=None)  # type: ignore[arg-type]
    assert s._retry_at("u1") == 0.0  # never written: at once
    s._said_at["u1"] = (100.0, 1)
    assert s._retry_at("u1") == 101.0
    s._said_at["u1"] = (100.0, 3)
    assert s._retry_at("u1") == 104.0
    s._said_at["u1"] = (100.0, 9)
    assert s._retry_at("u1") == 110.0  # at most 10 s
