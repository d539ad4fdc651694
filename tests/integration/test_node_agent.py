"""The node agent (``trainer node``) against the local API server standing in for a cluster:
it runs the pods bound to its own node name and no others, reads its name through the
downward API, and keeps container logs as files (docs/local-plane.md, "A node of a real
cluster"). Against the real kube-apiserver: tests/cluster/test_node_agent.py."""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import until_written
from trainer.kube import resources as r
from trainer.kube.informer import DELETED
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer
from trainer.local.executor.api import executor_kube
from trainer.local.executor.nodeagent import NodeAgent, NodeAgentError, check_node_name
from trainer.local.executor.sandbox import sandbox
from trainer.local.executor.sandbox.podaddress import parse_network

NODE = "agent-1"


@dataclass
class Env:
    server: APIServer
    kube: Kube
    agent: NodeAgent

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
        """Wait until ``check()`` is truthy, re-checking after every write to the server."""
        return await until_written(self.server, check, what, timeout)

    def pod(self, name: str) -> dict[str, Any]:
        found = self.server.storage.get_object("v1", "pods", "default", name)
        assert found is not None, name
        return found


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    kube = await executor_kube(str(tmp_path / "kubeconfig"))
    agent = NodeAgent(kube, node_name=NODE, state_dir=tmp_path / "state", workdir=tmp_path)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield Env(server, kube, agent)
    finally:
        stop.set()
        await task
        await kube.api.close()
        await server.stop()


def pod(name: str, node: str, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": command,
                    "env": [
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                    ],
                }
            ],
        },
    }


async def test_runs_the_pods_of_its_node_and_keeps_their_logs_in_files(env: Env) -> None:
    node = await env.until(
        lambda: env.server.storage.get_object("v1", "nodes", "", NODE), "the Node"
    )
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    await env.kube.create(pod("elsewhere", "local", ["sh", "-c", "echo no"]), gvr=r.PODS)
    await env.kube.create(pod("mine", NODE, ["sh", "-c", 'echo "on $NODE"']), gvr=r.PODS)
    done = await env.until(
        lambda: (env.pod("mine").get("status") or {}).get("phase") == "Succeeded", "mine"
    )
    assert done
    uid = env.pod("mine")["metadata"]["uid"]
    log = env.agent.log_dir / f"default_mine_{uid}" / "main" / "0.log"
    assert log.read_text() == f"on {NODE}\n"
    # The pod bound to another node was left to it.
    assert env.pod("elsewhere")["status"] == {"phase": "Pending"}  # as the server created it
    assert not list(env.agent.log_dir.glob("default_elsewhere_*"))
    lease = env.server.storage.get_object(
        "coordination.k8s.io/v1", "leases", "kube-node-lease", NODE
    )
    assert lease is not None and lease["spec"]["holderIdentity"] == NODE


async def test_a_deleted_pod_takes_its_logs_with_it(env: Env) -> None:
    kubelet = env.agent.kubelet
    await env.kube.create(pod("gone", NODE, ["sh", "-c", "echo bye"]), gvr=r.PODS)
    await env.until(
        lambda: (env.pod("gone").get("status") or {}).get("phase") == "Succeeded", "gone"
    )
    assert list(env.agent.log_dir.glob("default_gone_*/main/0.log"))
    deleted = asyncio.Event()
    assert kubelet.informer is not None

    # After the kubelet's own handler, which starts the cleanup.
    def on_change(kind: str, _obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        if kind == DELETED:
            deleted.set()

    kubelet.informer.add_handler(on_change)
    await env.kube.delete(r.PODS, "default", "gone")
    async with asyncio.timeout(10):
        await deleted.wait()
        await kubelet.cleaned("default", "gone")
    assert not list(env.agent.log_dir.glob("default_gone_*"))


def test_node_names_are_checked() -> None:
    assert check_node_name("gpu-7.rack-2") == "gpu-7.rack-2"
    for bad in ("Agent_0", "-a", "a" * 254, ""):
        with pytest.raises(NodeAgentError, match="DNS-1123 subdomain"):
            check_node_name(bad)


def trainer_node(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "trainer.cli.main", "node", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_cli_refuses_a_bad_node_name_and_kubeconfig_in_one_line(tmp_path: Path) -> None:
    bad = trainer_node("--node-name", "Not_A_Name", "--kubeconfig", str(tmp_path / "none"))
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: --node-name: node name 'not_a_name' is not a DNS-1123")
    missing = trainer_node("--node-name", "n", "--kubeconfig", str(tmp_path / "none"))
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and str(tmp_path / "none") in missing.stderr


async def test_a_server_that_refuses_the_node_stops_the_agent_with_its_answer(
    tmp_path: Path,
) -> None:
    server = APIServer()
    await server.start()
    try:
        server.write_kubeconfig(str(tmp_path / "kubeconfig"))
        text = (tmp_path / "kubeconfig").read_text()
        token = server.token
        (tmp_path / "kubeconfig").write_text(text.replace(token, "not-the-token"))
        kube = await executor_kube(str(tmp_path / "kubeconfig"))
        try:
            agent = NodeAgent(kube, node_name=NODE, state_dir=tmp_path / "s", workdir=tmp_path)
            with pytest.raises(NodeAgentError, match=f"refused to register Node {NODE}: 401"):
                await agent.register()
        finally:
            await kube.api.close()
    finally:
        await server.stop()


async def test_with_a_pod_network_a_pod_is_reached_at_its_own_address(tmp_path: Path) -> None:
    """``--pod-cidr``: the pod reports an address of the network and its declared port is
    published there, carried into its sandbox (127.0.0.0/8 is this host's: no route needed)."""
    why = sandbox.available()
    if why:
        pytest.skip(f"no network sandbox here: {why}")
    server = APIServer()
    await server.start()
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    kube = await executor_kube(str(tmp_path / "kubeconfig"))
    network = parse_network("127.77.0.0/29")
    agent = NodeAgent(
        kube, node_name=NODE, state_dir=tmp_path / "s", workdir=tmp_path, pod_network=network
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    env = Env(server, kube, agent)
    try:
        body = pod("web", NODE, [sys.executable, "-m", "http.server", "8080"])
        container = body["spec"]["containers"][0]
        container["ports"] = [{"containerPort": 8080, "name": "http"}]
        container["readinessProbe"] = {"tcpSocket": {"port": "http"}, "periodSeconds": 1}
        await kube.create(body, gvr=r.PODS)

        def ready() -> bool:
            conditions = (env.pod("web").get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        await env.until(ready, "web Ready", timeout=30)
        status = env.pod("web")["status"]
        address = status["podIP"]
        assert ipaddress.ip_address(address) in network and status["podIPs"] == [{"ip": address}]
        reader, writer = await asyncio.open_connection(address, 8080)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.0 200")
        writer.close()
        # Only the published address: the port is not this host's.
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", 8080)
    finally:
        stop.set()
        await task
        await kube.api.close()
        await server.stop()
