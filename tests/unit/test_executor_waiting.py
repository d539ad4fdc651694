"""Which pods a JobSet still waits on (trainer.local.executor.controllers.policy.waiting)."""

from __future__ import annotations

from typing import Any

from trainer.jobset import contract as jsc
from trainer.local.executor.controllers.policy.waiting import not_ready


def pod(name: str, jobset: str, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {jsc.LABEL_JOBSET_NAME: jobset}},
        "spec": {"containers": [{"name": "node", "readinessProbe": {"tcpSocket": {"port": 2222}}}]},
        "status": status,
    }


RUNNING = {"running": {"startedAt": "t"}}


def test_pods_not_ready_are_named_with_the_probe_that_holds_them() -> None:
    waiting = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "node", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}
        ],
    }
    pods = [
        pod(
            "j-node-0-1-b",
            "j",
            {
                "phase": "Running",
                "containerStatuses": [{"name": "node", "ready": False, "state": RUNNING}],
            },
        ),
        pod(
            "j-node-0-0-a",
            "j",
            {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        ),
        pod("j-node-0-2-c", "j", waiting),
        pod("j-launcher-0-0-d", "j", {"phase": "Succeeded"}),
        pod("other-node-0-0-e", "other", {"phase": "Running"}),
    ]
    assert not_ready(pods, "j") == [
        "pod ns/j-node-0-1-b: Running, not Ready (container node: readinessProbe tcpSocket "
        "port 2222 has not passed)",
        "pod ns/j-node-0-2-c: Pending, not Ready (container node waiting: ContainerCreating)",
    ]
