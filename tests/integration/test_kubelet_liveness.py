"""Liveness probes in the local kubelet, against the embedded API server (the fixture of
tests/integration/test_kubelet.py): a container whose liveness probe fails is killed as the
kubelet kills it and restarted as its pod's restartPolicy says, with the kubelet's Events.
Waits are on API writes (Store.subscribe), never on sleeps."""

from __future__ import annotations

from typing import Any

from tests.integration import test_kubelet as tk
from tests.integration.test_kubelet import PY, Env, free_port, pod, pod_events, status_of

env = tk.env  # the fixture: an API server, a scheduler and a kubelet

SERVER = (
    "import http.server, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(500 if self.path == '/healthz' else 200)\n"
    "        self.end_headers()\n"
    "    def log_message(self, *args):\n"
    "        pass\n"
    "print('serving', flush=True)\n"
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), H).serve_forever()\n"
)


def events_of(env: Env, name: str, reason: str) -> list[tuple[str, str]]:
    return [(t, m) for t, r, m, _ in pod_events(env, name) if r == reason]


async def test_a_failing_http_liveness_probe_restarts_the_container(env: Env) -> None:
    host_port = free_port()
    container = {
        "env": [{"name": "PORT", "value": "8080"}],
        "ports": [{"containerPort": 8080, "name": "http"}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 1,
            "failureThreshold": 2,
        },
    }
    await env.create(
        pod(
            "sick-web",
            [PY, "-c", SERVER],
            ports={"8080": host_port},
            container=container,
            restartPolicy="Always",
            terminationGracePeriodSeconds=3,
        ),
        "pods",
    )

    def restarted() -> Any:
        p = env.pod_now("sick-web")
        statuses = (p or {}).get("status", {}).get("containerStatuses") or []
        return p if statuses and statuses[0].get("restartCount", 0) >= 1 else None

    p = await env.until(restarted, "a restart after the liveness probe failed", timeout=30)
    main = status_of(p)
    terminated = main["lastState"]["terminated"]
    # SIGTERM ended the server (143, as the runtime reports a SIGTERM'd main process).
    assert (terminated["exitCode"], terminated["reason"]) == (143, "Error")
    assert terminated["startedAt"] and terminated["finishedAt"]

    failed_500 = ("Warning", "Liveness probe failed: HTTP probe failed with statuscode: 500")
    unhealthy = await env.until(
        lambda: (
            failed_500 in events_of(env, "sick-web", "Unhealthy")
            and events_of(env, "sick-web", "Unhealthy")
        ),
        "an Unhealthy event for the 500",
    )
    # A probe sent before the server listened says so, as the kubelet's would.
    refused = (
        "Warning",
        f'Liveness probe failed: Get "http://127.0.0.1:{host_port}/healthz": dial tcp '
        f"127.0.0.1:{host_port}: connect: connection refused",
    )
    assert set(unhealthy) <= {failed_500, refused}
    killing = await env.until(lambda: events_of(env, "sick-web", "Killing"), "Killing")
    assert killing[0] == ("Normal", "Container main failed liveness probe, will be restarted")
    await env.delete("sick-web")


async def test_under_never_the_killed_container_stays_terminated(env: Env) -> None:
    """A process that ignores SIGTERM is killed once the grace period is over (at least 2 s,
    as the kubelet gives): 137, and with restartPolicy Never the pod fails. The exec probe
    fails once the process has written its mark (after it ignores SIGTERM), and its output
    is the Event's detail."""
    mark = env.state_dir.parent / "deaf-mark"
    code = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "pathlib.Path(sys.argv[1]).touch()\n"
        "time.sleep(120)\n"
    )
    probe = (
        "import os, sys\n"
        "if os.path.exists(sys.argv[1]):\n"
        "    print('wedged', file=sys.stderr)\n"
        "    sys.exit(1)\n"
    )
    container = {
        "args": [str(mark)],
        "livenessProbe": {
            "exec": {"command": [PY, "-c", probe, str(mark)]},
            "periodSeconds": 1,
            "failureThreshold": 1,
            "terminationGracePeriodSeconds": 1,
        },
    }
    await env.create(pod("deaf", [PY, "-c", code], container=container), "pods")
    p = await env.finished("deaf")
    assert p["status"]["phase"] == "Failed"
    main = status_of(p)
    assert main["restartCount"] == 0
    assert main["state"]["terminated"]["exitCode"] == 137
    assert main["lastState"] == {}
    killing = await env.until(lambda: events_of(env, "deaf", "Killing"), "Killing")
    assert killing == [("Normal", "Container main failed liveness probe")]
    unhealthy = await env.until(lambda: events_of(env, "deaf", "Unhealthy"), "Unhealthy")
    assert unhealthy == [("Warning", "Liveness probe failed: wedged\n")]


async def test_a_passing_liveness_probe_leaves_the_container_alone(env: Env) -> None:
    """An exec probe that passes, behind a startup probe, never kills the container: the
    pod runs to its end."""
    code = "import time; print('up', flush=True); time.sleep(1.5); print('done')"
    container = {
        "startupProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
        "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 1},
    }
    await env.create(pod("healthy", [PY, "-c", code], container=container), "pods")
    p = await env.finished("healthy")
    assert p["status"]["phase"] == "Succeeded"
    assert status_of(p)["restartCount"] == 0
    assert events_of(env, "healthy", "Killing") == []
    assert events_of(env, "healthy", "Unhealthy") == []
