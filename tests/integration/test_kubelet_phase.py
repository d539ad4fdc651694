"""When a pod's phase becomes terminal: in the same status as its last regular container's
termination, as a kubelet reports it, never Running with every container terminated for good
(each such status made a Job's ready plus succeeded count dip, and the JobSet's and TrainJob's
ready counts, which ``trainer run`` prints, went 1, 0, 1, 0 as a Job's pods ended). A container
that will run again, or another still running, keeps the pod Running. Waits are on API writes."""

from __future__ import annotations

from typing import Any

from tests.integration.test_kubelet import PY, Env, env, pod
from trainer.local.apiserver.store import Event

__all__ = ["env"]  # the fixture, used by name


def record(env: Env, name: str) -> list[dict[str, Any]]:
    """Every status written for pod ``name`` from now on."""
    written: list[dict[str, Any]] = []

    def keep(ev: Event) -> None:
        if ev.obj.get("kind") == "Pod" and ev.obj["metadata"]["name"] == name:
            written.append(dict(ev.obj.get("status") or {}))

    env.server.storage.store.subscribe(keep)
    return written


def states(status: dict[str, Any]) -> list[str]:
    return [
        next(iter(s.get("state") or {"none": 0})) for s in status.get("containerStatuses") or []
    ]


async def test_the_last_container_ends_the_pod_in_the_same_status(env: Env) -> None:
    written = record(env, "one")
    await env.create(pod("one", [PY, "-c", "print('done')"]), "pods")
    await env.finished("one")
    seen = [(s.get("phase"), states(s)) for s in written]
    assert ("Running", ["terminated"]) not in seen, seen
    assert seen[-1] == ("Succeeded", ["terminated"]), seen


async def test_a_pod_runs_on_while_a_container_runs_or_restarts(env: Env) -> None:
    written = record(env, "two")
    spec = pod("two", [PY, "-c", "print('first')"])
    # The second container runs until the pod is deleted (SIGTERM).
    spec["spec"]["containers"].append(
        {
            "name": "second",
            "image": "python:3.11-slim",
            "command": [PY, "-c", "import signal; signal.pause()"],
        }
    )
    await env.create(spec, "pods")
    await env.line(lambda text: text == "first")
    await env.until(
        lambda: any(states(s) == ["terminated", "running"] for s in written), "first to end"
    )
    assert env.phase("two") == "Running"
    await env.delete("two")

    written = record(env, "again")
    await env.create(
        pod("again", [PY, "-c", "import sys; sys.exit(1)"], restartPolicy="OnFailure"), "pods"
    )
    await env.until(
        lambda: any(s.get("containerStatuses", [{}])[0].get("restartCount") for s in written),
        "a restart",
    )
    assert all(s.get("phase") in ("Pending", "Running") for s in written), written
    await env.delete("again")
