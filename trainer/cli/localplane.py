"""The local control plane of ``trainer run`` and ``trainer up``: the embedded API server with
the CRDs and built-in runtimes, the admission webhook registered through webhook
configurations (called over HTTPS with its caBundle), the controller, and the executor that
runs pods as local processes, the last three runnables of one manager. Everything talks
through the API, as on a cluster, the plane's own seeding included."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainer.api import constants as c
from trainer.cli.process import ProcessOptions, ProcessState, controller_manager
from trainer.cli.seed import install_basics, register_webhook, wait_webhook_ready
from trainer.controller.config import Configuration, parse_config
from trainer.kube.client import ApiClient, new_api_client
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer
from trainer.local.executor.api import executor_kube
from trainer.local.executor.node.config import NodeConfig
from trainer.local.executor.runner import Executor
from trainer.local.executor.sandbox.ports import PortAllocator
from trainer.local.executor.sandbox.ssh import private_parent
from trainer.local.executor.simulation.config import Simulation
from trainer.machinery.files import private_dir
from trainer.manager.manager import Manager
from trainer.manager.runnable import RunnableFunc, Stage

log = logging.getLogger(__name__)


def free_port() -> int:
    """A port for one of the plane's servers (webhook, status server): from below the kernel's
    ephemeral range, where no outgoing connection can take it before the server binds it
    (see :mod:`trainer.local.executor.sandbox.ports`)."""
    return PortAllocator().allocate("local-plane")


LOCAL_CLIENT_QPS = 0
"""The local controller's ``clientConnection.qps``: 0, no client-side rate limit (the cluster
default stays upstream's 50 qps / 100 burst). See docs/local-plane.md, "Throughput"."""
LOCAL_TRAINJOB_CONCURRENCY = 16
"""The local controller's TrainJob workers (a cluster's default stays upstream's 5): the bound
on the requests it has in flight at once. See docs/local-plane.md, "Throughput"."""


def local_config(
    webhook_port: int,
    status_server_port: int = c.DEFAULT_STATUS_SERVER_PORT,
    feature_gates: dict[str, bool] | None = None,
) -> Configuration:
    """The controller's Configuration in the local plane: loopback addresses, and limits fit
    for an API server that runs on the controller's own event loop (docs/local-plane.md,
    "Throughput"): no client-side qps/burst, and more workers than a cluster's default."""
    config = parse_config(
        f"""
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
webhook: {{port: {webhook_port}, host: 127.0.0.1}}
metrics: {{bindAddress: "127.0.0.1:0"}}
health: {{healthProbeBindAddress: "127.0.0.1:0"}}
controller:
  groupKindConcurrency: {{TrainJob.trainer.kubeflow.org: {LOCAL_TRAINJOB_CONCURRENCY}}}
clientConnection: {{qps: {LOCAL_CLIENT_QPS}}}
statusServer: {{port: {status_server_port}}}
""",
        "<local>",
    )
    return config.with_feature_gates(feature_gates or {})


@dataclass
class LocalPlane:
    server: APIServer
    api: ApiClient
    kube: Kube
    executor: Executor
    controller_state: ProcessState
    work_dir: Path
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to stop the plane; set by its manager too when it stops on its own."""
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    """The manager's run first, then what runs beside the plane (a dashboard)."""
    _tmp: Any = None

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.executor.kube.api.close()
        await self.api.close()
        await self.server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()


async def start_local_plane(
    *,
    work_dir: Path,
    state_file: str | None = None,
    port: int = 0,
    on_log: Callable[[str, str, str], None] | None = None,
    state_dir: Path | None = None,
    feature_gates: dict[str, bool] | None = None,
    reset_damaged_state: bool = False,
    ready_timeout: float | None = None,
    allow_exposed_ports: bool = False,
    node_config: NodeConfig | None = None,
    simulation: Simulation | None = None,
    with_controller: bool = True,
    without: frozenset[str] = frozenset(),
) -> LocalPlane:
    """Start the local plane: the API server, then, through its API, the built-in objects
    (:mod:`trainer.cli.seed`), then one manager (docs/design.md, "The manager") running the
    controller process's runnables and the executor. With ``feature_gates`` TrainJobStatus=true
    the status server runs too, on 127.0.0.1 (its certificate covers 127.0.0.1), and pods are
    told ``https://127.0.0.1:<port>`` as its base URL. ``allow_exposed_ports`` lets elastic
    TrainJobs run where pods cannot get a network sandbox. Without ``with_controller`` the
    plane runs no controller or webhook of its own and installs nothing of Trainer's
    (docs/local-plane.md, "Without the built-in controller"). ``without`` names the
    executor's roles left to the real programs (:mod:`trainer.local.executor.roles`)."""
    server = APIServer(port=port, state_file=state_file, reset_damaged_state=reset_damaged_state)
    await server.start()
    tmp = None
    if state_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="trainer-local-", dir=private_parent())
        state_dir = Path(tmp.name)
    state_dir.mkdir(parents=True, exist_ok=True)
    cert_dir = private_dir(state_dir / "webhook-certs")
    kubeconfig = state_dir / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    # The plane's own client, with the administrator's token: it seeds the built-in objects
    # as any client would, and the controller uses it.
    api = await new_api_client(str(kubeconfig))
    kube = Kube(api)
    await install_basics(kube, trainer=with_controller)
    webhook_port = free_port()
    if with_controller:
        await register_webhook(kube, webhook_port)
    stop = asyncio.Event()
    ready = asyncio.Event()
    controller_state = ProcessState()
    status_port = free_port()
    config = local_config(webhook_port, status_port, feature_gates)
    status_gate = config.feature_enabled(c.FEATURE_TRAINJOB_STATUS) and with_controller
    manager = (
        controller_manager(
            api,
            config,
            ProcessOptions(
                webhook=True,
                webhook_extra_hosts=("127.0.0.1",),
                status_server_url=f"https://127.0.0.1:{status_port}",
                status_server_host="127.0.0.1",
                webhook_cert_dir=str(cert_dir),
            ),
            controller_state,
        )
        if with_controller
        else Manager()
    )
    executor = Executor(
        # Its own client of the plane (user agent trainer-executor), as a kubelet has.
        await executor_kube(str(kubeconfig)),
        workdir=work_dir,
        state_dir=state_dir,
        on_log=on_log,
        ready_timeout=ready_timeout,
        # What the pods' network sandboxes forward in (docs/local-plane.md, "The network
        # sandbox"): the status server and, for in-cluster clients, the API server.
        plane_ports=(status_port, urlsplit(server.url).port or 0),
        allow_exposed_ports=allow_exposed_ports,
        node_config=node_config,
        simulation=simulation,
        without=without,
    )
    manager.add(_executor_runnable(executor))
    running = asyncio.create_task(manager.start(stop, ready=ready), name="local-plane")
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if running.done():
        await running  # raises why it stopped
    server.attach_pods()
    plane = LocalPlane(
        server, api, kube, executor, controller_state, work_dir, stop, [running], tmp
    )
    if with_controller:
        await asyncio.wait_for(controller_state.webhook_serving.wait(), 30)
        await wait_webhook_ready(kube)
    if status_gate:
        await asyncio.wait_for(controller_state.status_server_serving.wait(), 30)
    return plane


def _executor_runnable(executor: Executor) -> RunnableFunc:
    """The executor (JobSet and Job controllers, scheduler, kubelet), on every replica: the
    plane has one."""
    started = asyncio.Event()

    async def run(stop: asyncio.Event) -> None:
        try:
            await executor.start()
            started.set()
            await stop.wait()
        finally:
            await executor.stop()

    return RunnableFunc("executor", Stage.OTHERS, run, started=started)
