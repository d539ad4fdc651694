"""The local kubelet against the embedded API server: pods created through the API (with the
labels and annotations a Job controller gives them) run as local processes; their status,
logs, volumes, env, DNS / port rewrites and deletion are checked through the API and the
processes themselves. Waits are on API writes (Store.subscribe), log lines or process exit
(pidfd), never on sleeps."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.podlogs import stream_log
from trainer.kube.rest import JSON_PATCH, APIError, Kube
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.store import Event
from trainer.local.executor.api import executor_kube
from trainer.local.executor.kubelet.kubelet import Kubelet
from trainer.local.executor.policy.podfields import LOCAL_PORTS
from trainer.local.executor.scheduler.scheduler import Scheduler

PY = sys.executable
NS = "default"
INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


@dataclass
class Env:
    server: APIServer
    kube: Kube
    kubelet: Kubelet
    state_dir: Path
    lines: list[tuple[str, str, str]] = field(default_factory=list)
    line_added: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
        """Wait until ``check()`` is truthy, re-checking after every API write."""
        changed = asyncio.Event()

        def wake(_ev: Event) -> None:
            changed.set()

        self.server.storage.store.subscribe(wake)
        try:
            async with asyncio.timeout(timeout):
                while not (result := check()):
                    changed.clear()
                    await changed.wait()
                return result
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}: {self.pod_now()}") from None
        finally:
            self.server.storage.store.unsubscribe(wake)

    def pod_now(self, name: str = "") -> Any:
        if not name:
            return [p.get("status") for p in self.server.storage.objects("v1", "Pod")]
        return self.server.storage.get_object("v1", "pods", NS, name)

    def phase(self, name: str) -> str:
        return str(((self.pod_now(name) or {}).get("status") or {}).get("phase"))

    async def finished(self, name: str) -> dict[str, Any]:
        await self.until(lambda: self.phase(name) in ("Succeeded", "Failed"), f"{name} to end")
        pod: dict[str, Any] = self.pod_now(name)
        return pod

    async def ready(self, name: str) -> dict[str, Any]:
        def check() -> bool:
            conditions = ((self.pod_now(name) or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        await self.until(check, f"{name} to be ready")
        pod: dict[str, Any] = self.pod_now(name)
        return pod

    async def line(self, match: Callable[[str], bool], timeout: float = 10.0) -> str:
        """The first log line (passed to on_log) that ``match`` accepts."""
        async with asyncio.timeout(timeout):
            while True:
                for _pod, _container, text in self.lines:
                    if match(text):
                        return text
                self.line_added.clear()
                await self.line_added.wait()

    async def log(self, name: str, container: str = "main", previous: bool = False) -> str:
        chunks = stream_log(self.kube, NS, name, container, previous=previous)
        async with contextlib.aclosing(chunks):
            return b"".join([chunk async for chunk in chunks]).decode()

    async def create(self, obj: dict[str, Any], plural: str) -> dict[str, Any]:
        gvr = {"pods": r.PODS, "configmaps": r.CONFIGMAPS, "secrets": r.SECRETS}[plural]
        return await self.kube.create(obj, gvr=gvr)

    async def delete(self, name: str) -> bool:
        """Delete pod ``name``."""
        return await self.kube.delete(r.PODS, NS, name)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    kube = await executor_kube(str(tmp_path / "kubeconfig"))
    (tmp_path / "work").mkdir()
    kubelet: Kubelet
    holder: list[Env] = []

    def on_log(pod: str, container: str, line: str) -> None:
        holder[0].lines.append((pod, container, line))
        holder[0].line_added.set()

    # The kubelet runs the pods the scheduler binds to its node, as on a cluster; these
    # pods are scheduled one by one (the server has no JobSet API).
    pods = Informer(kube, r.PODS)
    await pods.start()
    kubelet = Kubelet(
        kube, pods=pods, workdir=tmp_path / "work", state_dir=tmp_path / "state", on_log=on_log
    )
    scheduler = Scheduler(kube, pods)
    e = Env(server, kube, kubelet, tmp_path / "state")
    holder.append(e)
    tasks = [asyncio.create_task(kubelet.run()), asyncio.create_task(scheduler.run())]
    try:
        async with asyncio.timeout(5):
            await kubelet.synced.wait()
        yield e
    finally:
        await kubelet.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pods.stop()
        await kube.api.close()
        await server.stop()


def pod(
    name: str,
    command: list[str] | None,
    *,
    index: int = 0,
    subdomain: str = "",
    ports: dict[str, int] | None = None,
    container: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod as the executor's Job controller creates it."""
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "demo",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-name": "demo-node-0",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
    if ports:
        annotations[LOCAL_PORTS] = json.dumps(ports)
    main: dict[str, Any] = {"name": "main", "image": "python:3.11-slim", **(container or {})}
    if command is not None:
        main["command"] = command
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [main], **spec}
    if subdomain:
        pod_spec["subdomain"] = subdomain
        pod_spec.setdefault("hostname", f"demo-node-0-{index}")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": pod_spec,
    }


def status_of(p: dict[str, Any], container: str = "main") -> dict[str, Any]:
    statuses = [
        *(p["status"].get("initContainerStatuses") or []),
        *(p["status"].get("containerStatuses") or []),
    ]
    found: dict[str, Any] = next(s for s in statuses if s["name"] == container)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_exit(pid: int, timeout: float = 10.0) -> None:
    """Wait for a process to end (pidfd: readable once it has exited), then check it is gone
    or a zombie (a reparented orphan may be reaped late by PID 1)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await asyncio.wait_for(exited, timeout)
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return
    assert state in ("Z", "X"), f"process {pid} still runs (state {state})"


async def test_pod_succeeds_and_its_log_is_served(env: Env) -> None:
    await env.create(pod("hello", [PY, "-c", "print('hi'); print('there')"]), "pods")
    p = await env.finished("hello")
    status = p["status"]
    assert status["phase"] == "Succeeded"
    assert status["podIP"] == status["hostIP"] == "127.0.0.1"
    assert status["startTime"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "False",
        "Ready": "False",
    }
    main = status_of(p)
    assert main["restartCount"] == 0
    terminated = main["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert terminated["reason"] == "Completed"
    assert terminated["startedAt"] and terminated["finishedAt"]
    assert main["containerID"].startswith("local://")
    assert await env.log("hello") == "hi\nthere\n"
    assert ("hello", "main", "hi") in env.lines


async def test_failing_command_fails_the_pod_with_its_exit_code(env: Env) -> None:
    code = "import sys; print('about to fail', file=sys.stderr); sys.exit(3)"
    await env.create(
        pod(
            "bad", [PY, "-c", code], container={"terminationMessagePolicy": "FallbackToLogsOnError"}
        ),
        "pods",
    )
    p = await env.finished("bad")
    assert p["status"]["phase"] == "Failed"
    terminated = status_of(p)["state"]["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    # The log's tail as the kubelet reads it: each line with its newline.
    assert terminated["message"] == "about to fail\n"
    assert await env.log("bad") == "about to fail\n"


@pytest.mark.parametrize(
    ("command", "container", "expected"),
    [
        (
            ["no-such-tool-xyz", "--epochs", "2"],
            {},
            'exec: "no-such-tool-xyz": executable file not found in $PATH '
            "(command: no-such-tool-xyz --epochs 2)",
        ),
        (None, {}, "container 'main' has neither command nor args"),
    ],
)
async def test_a_command_that_cannot_run_fails_the_pod_clearly(
    env: Env, command: list[str] | None, container: dict[str, Any], expected: str
) -> None:
    # OnFailure would restart a failing process; a missing executable fails at once.
    await env.create(pod("cannot", command, container=container, restartPolicy="OnFailure"), "pods")
    p = await env.finished("cannot")
    assert p["status"]["phase"] == "Failed"
    terminated = status_of(p)["state"]["terminated"]
    assert terminated["reason"] == "ContainerCannotRun"
    assert expected in terminated["message"]
    assert "python:3.11-slim" in terminated["message"]
    assert expected in await env.log("cannot")


async def test_config_map_volume_is_readable_at_its_mount_path(env: Env) -> None:
    await env.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": NS},
            "data": {"train.yaml": "lr: 0.1\n", "other": "x"},
        },
        "configmaps",
    )
    code = (
        "import os, stat, sys; p = sys.argv[1]; "
        "print(open(p).read().strip(), oct(stat.S_IMODE(os.stat(p).st_mode)), "
        "os.environ['CONFIG'] == p, os.environ['TRAINER_LOCAL_MOUNT_CONFIG'] in p)"
    )
    spec = pod(
        "reads-config",
        [PY, "-c", code, "/etc/trainer/conf/train.yaml"],
        container={
            "env": [{"name": "CONFIG", "value": "/etc/trainer/conf/train.yaml"}],
            "volumeMounts": [{"name": "config", "mountPath": "/etc/trainer"}],
        },
        volumes=[
            {
                "name": "config",
                "configMap": {
                    "name": "settings",
                    "items": [{"key": "train.yaml", "path": "conf/train.yaml", "mode": 0o440}],
                },
            }
        ],
    )
    await env.create(spec, "pods")
    p = await env.finished("reads-config")
    assert p["status"]["phase"] == "Succeeded", await env.log("reads-config")
    assert await env.log("reads-config") == "lr: 0.1 0o440 True True\n"


async def test_env_from_a_secret(env: Env) -> None:
    await env.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": NS},
            "data": {
                "token": base64.b64encode(b"s3cr3t").decode(),
                "USER": base64.b64encode(b"alice").decode(),
            },
        },
        "secrets",
    )
    code = (
        "import os; print(os.environ['TOKEN'], os.environ['HF_USER'], os.environ['RANK'], "
        "os.environ['HOSTNAME'], os.environ['SHOWN'])"
    )
    container = {
        "envFrom": [{"secretRef": {"name": "creds"}, "prefix": "HF_"}],
        "env": [
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {
                "name": "RANK",
                "valueFrom": {"fieldRef": {"fieldPath": INDEX_PATH}},
            },
            {"name": "SHOWN", "value": "user=$(HF_USER)"},
        ],
    }
    await env.create(
        pod("secret-env", [PY, "-c", code], index=1, subdomain="demo", container=container),
        "pods",
    )
    p = await env.finished("secret-env")
    assert p["status"]["phase"] == "Succeeded", await env.log("secret-env")
    assert await env.log("secret-env") == "s3cr3t alice 1 demo-node-0-1 user=alice\n"


async def test_init_container_and_restart_on_failure(env: Env) -> None:
    # The init container writes into an emptyDir; the main container fails once (no marker
    # yet), is restarted in place and then succeeds.
    init = {
        "name": "prepare",
        "image": "busybox",
        "command": [PY, "-c", "open('/scratch/data.txt', 'w').write('ready')"],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    }
    code = (
        "import os, sys; m = '/scratch/marker'; print(open('/scratch/data.txt').read()); "
        "done = os.path.exists(m); print('second run' if done else 'first run'); "
        "open(m, 'w').close(); sys.exit(0 if done else 1)"
    )
    spec = pod(
        "restarts",
        [PY, "-c", code],
        container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
        restartPolicy="OnFailure",
        initContainers=[init],
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    await env.create(spec, "pods")
    p = await env.finished("restarts")
    assert p["status"]["phase"] == "Succeeded"
    main = status_of(p)
    assert main["restartCount"] == 1
    assert main["lastState"]["terminated"]["exitCode"] == 1
    assert status_of(p, "prepare")["state"]["terminated"]["reason"] == "Completed"
    # As a kubelet serves them: the current run's log, and the run before with previous=true.
    assert await env.log("restarts") == "ready\nsecond run\n"
    assert await env.log("restarts", previous=True) == "ready\nfirst run\n"
    with pytest.raises(APIError) as never:
        await env.log("restarts", "prepare", previous=True)
    assert 'previous terminated container "prepare" in pod "restarts" not found' in str(never.value)


async def test_deleting_a_pod_kills_its_processes(env: Env) -> None:
    code = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('child', child.pid, flush=True); time.sleep(60)"
    )
    await env.create(pod("long", [PY, "-c", code], terminationGracePeriodSeconds=1), "pods")
    line = await env.line(lambda text: text.startswith("child "))
    child = int(line.split()[1])
    running = await env.ready("long")
    assert running["status"]["phase"] == "Running"
    main = status_of(running)
    assert "running" in main["state"]
    leader = int(main["containerID"].removeprefix("local://"))
    assert os.getpgid(child) == leader
    assert await env.delete("long")
    await asyncio.gather(wait_exit(leader), wait_exit(child))


async def test_stop_ends_every_process(env: Env) -> None:
    await env.create(pod("sleeper", [PY, "-c", "import time; time.sleep(60)"]), "pods")
    p = await env.ready("sleeper")
    leader = int(status_of(p)["containerID"].removeprefix("local://"))
    await env.kubelet.stop()
    await wait_exit(leader)
    assert env.kubelet.process_groups() == frozenset()


async def test_pods_of_one_subdomain_talk_over_rewritten_names(env: Env) -> None:
    host_port = free_port()
    ports = {"29500": host_port}
    listener = (
        "import os, socket\n"
        "port = int(os.environ['PORT'])\n"
        "print('listening on', port, flush=True)\n"
        "srv = socket.create_server(('127.0.0.1', port))\n"
        "while True:\n"
        "    conn, _ = srv.accept()\n"
        "    data = conn.recv(100)\n"
        "    if data:\n"
        "        print('got', data.decode(), flush=True)\n"
        "        conn.sendall(b'ack')\n"
        "        break\n"
    )
    await env.create(
        pod(
            "server",
            [PY, "-c", listener],
            subdomain="demo",
            ports=ports,
            container={
                "env": [{"name": "PORT", "value": "29500"}],
                "ports": [{"containerPort": 29500, "name": "rdzv"}],
                "readinessProbe": {"tcpSocket": {"port": "rdzv"}, "periodSeconds": 1},
            },
        ),
        "pods",
    )
    await env.ready("server")
    connector = (
        "import socket, sys\n"
        "host, port = sys.argv[1].rsplit(':', 1)\n"
        "print('connecting to', host, port, flush=True)\n"
        "s = socket.create_connection((host, int(port)), timeout=5)\n"
        "s.sendall(sys.argv[2].encode())\n"
        "print(s.recv(10).decode())\n"
    )
    await env.create(
        pod(
            "client",
            [PY, "-c", connector, "demo-node-0-0.demo.default.svc.cluster.local:29500"],
            index=1,
            subdomain="demo",
            ports=ports,
            container={"args": ["hello-from-$(HOSTNAME)"]},
        ),
        "pods",
    )
    client = await env.finished("client")
    server = await env.finished("server")
    assert client["status"]["phase"] == "Succeeded", await env.log("client")
    assert server["status"]["phase"] == "Succeeded", await env.log("server")
    assert await env.log("client") == f"connecting to 127.0.0.1 {host_port}\nack\n"
    assert await env.log("server") == (f"listening on {host_port}\ngot hello-from-$(HOSTNAME)\n")


async def test_a_deletion_timestamp_ends_the_pod_and_reports_it(env: Env) -> None:
    # A finalizer keeps the deleted pod in the API: the kubelet ends its processes (SIGTERM)
    # and reports the final status.
    spec = pod("kept", [PY, "-c", "import time; time.sleep(60)"])
    spec["metadata"]["finalizers"] = ["example.com/keep"]
    await env.create(spec, "pods")
    leader = int(status_of(await env.ready("kept"))["containerID"].removeprefix("local://"))
    await env.delete("kept")
    p = await env.finished("kept")
    await wait_exit(leader)
    assert p["status"]["phase"] == "Failed"
    terminated = status_of(p)["state"]["terminated"]
    assert (terminated["exitCode"], terminated.get("signal")) == (143, 15)


async def test_pods_of_other_nodes_are_ignored(env: Env) -> None:
    await env.create(pod("elsewhere", [PY, "-c", "print(1)"], nodeName="node-b"), "pods")
    await env.create(pod("here", [PY, "-c", "print(2)"], nodeName="local"), "pods")
    await env.finished("here")  # events arrive in order: "elsewhere" was seen first
    assert env.pod_now("elsewhere")["status"] == {"phase": "Pending"}


async def test_large_output_arrives_complete_and_in_order(env: Env) -> None:
    code = "import sys\nfor i in range(20000): print('line', i, 'x' * 20)\n"
    await env.create(pod("chatty", [PY, "-c", code]), "pods")
    await env.finished("chatty")
    expected = "".join(f"line {i} {'x' * 20}\n" for i in range(20000))
    assert await env.log("chatty") == expected
    assert sum(1 for p, _c, _l in env.lines if p == "chatty") == 20000


def pod_events(env: Env, name: str) -> list[tuple[str, str, str, str]]:
    """(type, reason, message, source component) of the Events about pod ``name``."""
    return [
        (e["type"], e["reason"], e["message"], e["source"]["component"])
        for e in env.server.storage.objects("v1", "events", NS)
        if e["involvedObject"]["kind"] == "Pod" and e["involvedObject"]["name"] == name
    ]


async def test_events_tell_what_happened_to_the_pod(env: Env) -> None:
    """As ``kubectl describe pod`` shows on a cluster: the scheduler's assignment, each start
    of the container, the back-off before a restart; a command that cannot run is a Warning
    with the reason; a deleted pod's container is stopped."""
    code = (
        "import os, sys; m = os.path.join(os.environ['TMPDIR_X'], 'marker'); "
        "done = os.path.exists(m); open(m, 'w').close(); sys.exit(0 if done else 1)"
    )
    marker_dir = env.state_dir.parent / "markers"
    marker_dir.mkdir()
    container = {"env": [{"name": "TMPDIR_X", "value": str(marker_dir)}]}
    await env.create(
        pod("twice", [PY, "-c", code], container=container, restartPolicy="OnFailure"), "pods"
    )
    await env.finished("twice")
    events = await env.until(
        lambda: len(pod_events(env, "twice")) >= 4 and pod_events(env, "twice"), "events"
    )
    reasons = [(t, r, src) for t, r, _, src in events]
    assert reasons.count(("Normal", "Started", "kubelet")) == 2
    assert ("Normal", "Scheduled", "default-scheduler") in reasons
    assert ("Warning", "BackOff", "kubelet") in reasons
    scheduled = next(m for _, r, m, _ in events if r == "Scheduled")
    assert scheduled == f"Successfully assigned {NS}/twice to local"

    await env.create(pod("missing", ["no-such-tool-xyz"]), "pods")
    await env.finished("missing")
    failed = await env.until(
        lambda: [e for e in pod_events(env, "missing") if e[0] == "Warning"], "Warning"
    )
    assert failed[0][1] == "Failed"
    assert 'exec: "no-such-tool-xyz": executable file not found in $PATH' in failed[0][2]

    await env.create(
        pod("stopped", [PY, "-c", "import time; time.sleep(60)"], terminationGracePeriodSeconds=1),
        "pods",
    )
    await env.ready("stopped")
    await env.delete("stopped")
    killing = await env.until(
        lambda: [e for e in pod_events(env, "stopped") if e[1] == "Killing"], "Killing"
    )
    assert killing == [("Normal", "Killing", "Stopping container main", "kubelet")]


async def test_a_gated_pod_waits_until_its_gates_are_removed(env: Env) -> None:
    spec = pod("gated", [PY, "-c", "print('ran')"], schedulingGates=[{"name": "example.com/g"}])
    await env.create(spec, "pods")

    def gated() -> bool:
        conditions = ((env.pod_now("gated") or {}).get("status") or {}).get("conditions") or []
        return any(c.get("reason") == "SchedulingGated" for c in conditions)

    await env.until(gated, "SchedulingGated")
    assert env.phase("gated") == "Pending"
    assert not env.lines  # nothing ran
    await env.kube.patch(
        r.PODS, NS, "gated", [{"op": "remove", "path": "/spec/schedulingGates"}], JSON_PATCH
    )
    p = await env.finished("gated")
    assert p["status"]["phase"] == "Succeeded"
    scheduled = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "True"
    assert await env.log("gated") == "ran\n"


async def test_without_a_sandbox_an_elastic_rendezvous_is_refused_unless_allowed(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Where pods cannot be sandboxed (here: turned off), torchrun's c10d store would be open
    to everyone: such a pod fails, naming the option that accepts it (docs/local-plane.md,
    "The network sandbox")."""
    env.kubelet.sandboxes = None
    elastic = {"env": [{"name": "PET_RDZV_BACKEND", "value": "c10d"}]}
    await env.create(pod("elastic", [PY, "-c", "print('ran')"], container=elastic), "pods")
    p = await env.finished("elastic")
    assert p["status"]["phase"] == "Failed"
    assert p["status"]["reason"] == "NetworkSandboxUnavailable"
    assert "--allow-exposed-ports" in p["status"]["message"]
    assert "ran" not in await env.log("elastic")
    warnings = [
        r.getMessage() for r in caplog.records if "without a network sandbox" in r.getMessage()
    ]
    assert len(warnings) == 1 and "torchrun's TCPStore" in warnings[0]

    env.kubelet.allow_exposed_ports = True
    await env.create(pod("allowed", [PY, "-c", "print('ran')"], container=elastic), "pods")
    p = await env.finished("allowed")
    assert p["status"]["phase"] == "Succeeded"
    assert await env.log("allowed") == "ran\n"
