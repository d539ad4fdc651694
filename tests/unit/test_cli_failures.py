"""``trainer run``'s line per failed container: the reason a JobSet's condition leaves out."""

from __future__ import annotations

from typing import Any

from trainer.cli.failures import DeletedPods, failed_containers


def pod(name: str, jobset: str, *statuses: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": jobset}},
        "status": {"containerStatuses": list(statuses)},
    }


def test_failed_containers_give_their_last_message_line() -> None:
    failed = {
        "name": "cache-initializer",
        "state": {"terminated": {"exitCode": 1, "message": "loading\nerror: no such file\n"}},
    }
    restarted = {
        "name": "node",
        "state": {"running": {}},
        "lastState": {"terminated": {"exitCode": 137}},
    }
    ok = {"name": "ok", "state": {"terminated": {"exitCode": 0, "message": "fine"}}}
    pods = [
        pod("b-1", "job", failed, ok),
        pod("a-0", "job", restarted),
        pod("other-0", "other", failed),
    ]
    assert failed_containers(pods, "job") == [
        "pod a-0 container node exited 137",
        "pod b-1 container cache-initializer exited 1: error: no such file",
    ]
    assert failed_containers([], "job") == []


def test_a_container_killed_for_its_memory_is_named_oomkilled() -> None:
    oom = {
        "name": "node",
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "x\n"}},
    }
    error = {"name": "side", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
    assert failed_containers([pod("a-0", "job", oom, error)], "job") == [
        "pod a-0 container node exited 137 (OOMKilled): x",
        "pod a-0 container side exited 2",
    ]


def test_deleted_pods_keep_their_last_state() -> None:
    deleted = DeletedPods()
    gone = {"metadata": {"uid": "1", "name": "a-0", "namespace": "default"}, "status": {}}
    other = {"metadata": {"uid": "2", "name": "b-0", "namespace": "team"}}
    live = {"metadata": {"uid": "3", "name": "c-0", "namespace": "default"}}
    deleted("DELETED", gone, gone)
    deleted("DELETED", other, other)
    deleted("MODIFIED", live, live)
    assert deleted.list("default") == [gone]
    assert deleted.list("team") == [other]
