"""When a container ends: at its main process's exit, as when a container's PID 1 exits, even
while a process it started still holds its output open; that process is killed with the
rest of the group. And :meth:`Kubelet.stop` waits no grace period for processes that are gone
(docs/local-plane.md, "Stopping"). Waits are on API writes and process exit (pidfd), bounded
far above what each takes (well under a second)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trainer.kube import resources as r
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.store import Event
from trainer.local.executor.api import executor_kube
from trainer.local.executor.kubelet.kubelet import Kubelet
from trainer.local.executor.kubelet.podhost import GRACE_CAP
from trainer.local.executor.policy.podfields import NODE_NAME

PY = sys.executable
NS = "default"
CHILD_SLEEPS = 300
"""How long the child a container leaves behind would live: far beyond every bound here."""


@dataclass
class Env:
    server: APIServer
    kube: Kube
    kubelet: Kubelet
    lines: list[str] = field(default_factory=list)
    line_added: asyncio.Event = field(default_factory=asyncio.Event)

    def pod(self, name: str) -> dict[str, Any]:
        return self.server.storage.get_object("v1", "pods", NS, name) or {}

    def pods(self) -> list[Any]:
        return [p.get("status") for p in self.server.storage.objects("v1", "Pod")]

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
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
            raise AssertionError(f"timed out waiting for {what}: {self.pods()}") from None
        finally:
            self.server.storage.store.unsubscribe(wake)

    async def line(self, prefix: str, timeout: float = 15.0) -> str:
        async with asyncio.timeout(timeout):
            while True:
                for text in self.lines:
                    if text.startswith(prefix):
                        return text
                self.line_added.clear()
                await self.line_added.wait()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    kube = await executor_kube(str(tmp_path / "kubeconfig"))
    (tmp_path / "work").mkdir()
    holder: list[Env] = []

    def on_log(_pod: str, _container: str, line: str) -> None:
        holder[0].lines.append(line)
        holder[0].line_added.set()

    kubelet = Kubelet(kube, workdir=tmp_path / "work", state_dir=tmp_path / "state", on_log=on_log)
    e = Env(server, kube, kubelet)
    holder.append(e)
    task = asyncio.create_task(kubelet.run())
    try:
        async with asyncio.timeout(5):
            await kubelet.synced.wait()
        yield e
    finally:
        await kubelet.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.api.close()
        await server.stop()


def pod(name: str, code: str, **spec: Any) -> dict[str, Any]:
    """A pod bound to the kubelet's node from the start (no scheduler runs here)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": NODE_NAME,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "python", "command": [PY, "-c", code]}],
            **spec,
        },
    }


def leaves_a_child(child: str, then: str) -> str:
    """A main process that starts a child sharing its stdout (running ``child``, then
    sleeping CHILD_SLEEPS s), prints ``child PID``, then runs ``then``."""
    body = f"{child}\nimport time\ntime.sleep({CHILD_SLEEPS})"
    return (
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {body!r}])\n"
        "print('child', child.pid, flush=True)\n" + then
    )


async def wait_gone(pid: int, timeout: float = 15.0) -> None:
    """Until process ``pid`` has exited (pidfd readable), or fail."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    exited = asyncio.Event()
    loop.add_reader(fd, exited.set)
    try:
        async with asyncio.timeout(timeout):
            await exited.wait()
    except TimeoutError:
        raise AssertionError(f"process {pid} still runs") from None
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase"))


async def test_a_container_ends_when_its_main_process_exits_though_a_child_holds_its_output(
    env: Env,
) -> None:
    # The main process exits 0 at once: the pod is over, as on a cluster where the container
    # ends with its PID 1, and the child dies with the rest of its group.
    await env.kube.create(pod("leaves", leaves_a_child("", "")), gvr=r.PODS)
    child = int((await env.line("child ")).split()[1])
    await env.until(lambda: phase(env.pod("leaves")) == "Succeeded", "the pod to succeed")
    await wait_gone(child)
    status = env.pod("leaves")["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 0


async def test_stop_waits_for_the_main_process_not_the_grace_period(env: Env) -> None:
    # As a kubelet's grace period covers the container's PID 1: the main process exits at
    # SIGTERM, and the child it left (ignoring SIGTERM, holding the container's output) is
    # killed with the rest of the group at once, not after the pod's grace period (30 s, 5 s
    # here). Bounded by GRACE_CAP - 1 s, far above the tens of milliseconds it takes.
    code = leaves_a_child(
        "import signal\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('child ready', flush=True)",
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "time.sleep(300)\n",
    )
    await env.kube.create(pod("stops", code, terminationGracePeriodSeconds=30), gvr=r.PODS)
    child = int((await env.line("child ")).split()[1])
    await env.line("child ready")
    async with asyncio.timeout(GRACE_CAP - 1):
        await env.kubelet.stop()
    await wait_gone(child)
    assert env.kubelet.process_groups() == frozenset()
