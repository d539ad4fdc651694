"""The local scheduler keeps a pass's inputs from its watch handlers (docs/local-plane.md,
"Scheduling", Cost): only pods not yet finished are kept, and only a change that can alter a
decision asks for a pass."""

from __future__ import annotations

from typing import Any

from trainer.jobset import contract as jc
from trainer.local.executor.scheduler.scheduler import Scheduler

GPU = "nvidia.com/gpu"


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
    assert woke(s) and s._waiting == {"u1": "pod:u1"} and "u1" in s._views
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


class _Writes:
    """Records what a pass writes."""

    def __init__(self) -> None:
        self.binds: list[str] = []
        self.statuses: list[str] = []

    async def bind(self, _namespace: str, name: str, node: str, *, uid: str) -> None:
        self.binds.append(f"{name}->{node}")

    async def patch_status(self, _gvr: Any, _namespace: str, name: str, body: Any) -> None:
        self.statuses.append(body["status"]["conditions"][-1]["message"])

    async def create(self, body: Any, *, gvr: Any) -> None:
        pass


def gpu_pod(uid: str, gpus: int, *, node: str = "") -> dict[str, Any]:
    body = pod(node=node)
    body["metadata"].update(uid=uid, name=uid)
    body["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return body


async def test_a_pod_that_does_not_fit_is_tried_again_after_kube_schedulers_back_off() -> None:
    kube = _Writes()
    s = Scheduler(kube, pods=None, jobsets=None)  # type: ignore[arg-type]
    s._on_node("ADDED", node("1", gpus=8), None)
    s._on_pod("ADDED", gpu_pod("big", 16), None)
    first = await s.pass_once()
    assert set(first.waiting) == {"big"}
    assert kube.statuses == ["0/1 nodes are available: 1 Insufficient nvidia.com/gpu."]
    when, attempts = s._backoff["pod:big"]
    assert attempts == 1 and s._retry_at("pod:big") == when + 1.0

    # A change during the back-off: the pod is not tried, a pass is due when it ends.
    s._on_pod("ADDED", gpu_pod("small", 2), None)
    second = await s.pass_once()
    assert [v.name for v, _ in second.binds] == ["small"] and "big" not in second.waiting
    assert s._timer is not None and s._timer.when() == when + 1.0
    s._on_pod("MODIFIED", gpu_pod("small", 2, node="n1"), None)  # the bind, as watched

    s._backoff["pod:big"] = (when - 10.0, 1)  # its back-off is over
    third = await s.pass_once()
    assert set(third.waiting) == {"big"}
    assert s._backoff["pod:big"][1] == 2 and len(kube.statuses) == 1  # same message: no write
    for attempts, seconds in ((3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)):  # at most 10 s
        s._backoff["pod:big"] = (100.0, attempts)
        assert s._retry_at("pod:big") == 100.0 + seconds
    s._on_pod("DELETED", gpu_pod("big", 16), None)
    assert "pod:big" not in s._backoff  # a unit with no pod left is forgotten
    assert kube.binds == ["small->n1"]


def gang_pod(name: str, jobset: str, *, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    body = gpu_pod(f"uid-{name}", 1, node=node)
    body["metadata"].update(
        name=name,
        labels={jc.LABEL_JOBSET_NAME: jobset, jc.LABEL_JOBSET_UID: f"uid-{jobset}"},
        creationTimestamp=f"2026-01-01T00:00:0{len(jobset)}Z",
    )
    body["status"]["phase"] = phase
    return body


def gang_jobset(name: str, pods: int = 2) -> dict[str, Any]:
    job = {
        "parallelism": pods,
        "completions": pods,
        "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: 1}}}]}},
    }
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job}}]},
        "status": {},
    }


async def test_a_gangs_room_is_let_go_once_all_its_pods_succeeded_before_its_jobset_says_so() -> (
    None
):
    kube = _Writes()
    s = Scheduler(kube, pods=None, jobsets=None)  # type: ignore[arg-type]
    s.all_or_nothing = True
    s._on_node("ADDED", node("1", gpus=2), None)
    s._on_jobset("ADDED", gang_jobset("one"), None)
    s._on_jobset("ADDED", gang_jobset("three"), None)  # created later: waits for "one"
    for name in ("one-0", "one-1"):
        s._on_pod("ADDED", gang_pod(name, "one"), None)
    await s.pass_once()
    assert kube.binds == ["one-0->n1", "one-1->n1"]
    for name in ("one-0", "one-1"):
        s._on_pod("MODIFIED", gang_pod(name, "one", node="n1", phase="Running"), None)
    for name in ("three-0", "three-1"):
        s._on_pod("ADDED", gang_pod(name, "three"), None)
    await s.pass_once()
    assert kube.binds == ["one-0->n1", "one-1->n1"]  # "one" holds both GPUs

    # One of its pods succeeded: the room stays held (the other may still need it).
    s._on_pod("MODIFIED", gang_pod("one-0", "one", node="n1", phase="Succeeded"), None)
    s._backoff.clear()
    await s.pass_once()
    assert len(kube.binds) == 2
    # Both succeeded; the JobSet's status still says nothing: the room is free.
    s._on_pod("MODIFIED", gang_pod("one-1", "one", node="n1", phase="Succeeded"), None)
    s._backoff.clear()
    await s.pass_once()
    assert kube.binds[2:] == ["three-0->n1", "three-1->n1"]
    assert "ns/one/uid-one" not in s.admitted
    # The JobSet finishes: what was kept for it is forgotten.
    finished = gang_jobset("one")
    finished["metadata"]["resourceVersion"] = "2"
    finished["status"] = {"terminalState": "Completed"}
    s._on_jobset("MODIFIED", finished, None)
    assert "ns/one/uid-one" not in s._succeeded
