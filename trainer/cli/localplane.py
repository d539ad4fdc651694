"""The local control plane of ``trainer run`` and ``trainer up``: the embedded API server with
the CRDs and built-in runtimes, the admission webhook registered through webhook
configurations (called over HTTPS with its caBundle), the controller, and the executor that
runs pods as local processes. Everything talks through the API, as on a cluster."""

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
from trainer.api import crds
from trainer.cli.process import ProcessOptions, ProcessState, run_controller
from trainer.controller.config import Configuration, parse_config
from trainer.kube.client import ApiClient, new_api_client
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer
from trainer.local.executor.api import executor_kube
from trainer.local.executor.nodeconfig import NodeConfig
from trainer.local.executor.ports import PortAllocator
from trainer.local.executor.runner import Executor
from trainer.local.executor.simulation import Simulation
from trainer.local.executor.ssh import private_parent
from trainer.machinery.files import private_dir
from trainer.runtime.builtin import builtin_runtime_documents

log = logging.getLogger(__name__)

SYSTEM_NAMESPACE = "kubeflow-system"
VALIDATING = "validator.trainer.kubeflow.org"
MUTATING = "defaulter.trainer.kubeflow.org"


def free_port() -> int:
    """A port for one of the plane's servers (webhook, status server): from below the kernel's
    ephemeral range, where no outgoing connection can take it before the server binds it
    (see :mod:`trainer.local.executor.ports`)."""
    return PortAllocator().allocate("local-plane")


def webhook_configurations(port: int) -> list[dict[str, Any]]:
    """upstream's two webhook configurations, pointing at ``https://127.0.0.1:<port>``
    (the caBundle is injected by the webhook's certificate rotator)."""
    base = f"https://127.0.0.1:{port}"

    def hook(kind: str, plural: str, mutate: bool = False) -> dict[str, Any]:
        path = f"/{'mutate' if mutate else 'validate'}-trainer-kubeflow-org-v1alpha1-{kind}"
        out: dict[str, Any] = {
            "name": f"{'defaulter' if mutate else 'validator'}.{kind}.trainer.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": base + path},
            "rules": [
                {
                    "apiGroups": [c.GROUP],
                    "apiVersions": [c.VERSION],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [plural],
                }
            ],
        }
        if kind != "trainjob":
            out["objectSelector"] = {
                "matchExpressions": [
                    {
                        "key": c.LABEL_WEBHOOK_VALIDATION,
                        "operator": "NotIn",
                        "values": [c.WEBHOOK_VALIDATION_DISABLED],
                    }
                ]
            }
        return out

    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": VALIDATING},
            "webhooks": [
                hook("clustertrainingruntime", c.PLURAL_CLUSTER_TRAINING_RUNTIMES),
                hook("trainingruntime", c.PLURAL_TRAINING_RUNTIMES),
                hook("trainjob", c.PLURAL_TRAINJOBS),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING},
            "webhooks": [hook("trainjob", c.PLURAL_TRAINJOBS, mutate=True)],
        },
    ]


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
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _tmp: Any = None

    async def close(self) -> None:
        self.stop.set()
        await self.executor.stop()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.executor.kube.api.close()
        await self.api.close()
        await self.server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()


def install_basics(server: APIServer, *, trainer: bool = True) -> None:
    """CRDs, the system namespace and the built-in runtimes (labelled to skip the runtime
    webhooks, as the runtimes overlay does), unless already present (a state file). Without
    ``trainer`` only JobSet's CRD (the executor plays JobSet's controller): the rest is the
    production install's to create (``trainer up --without-controller``)."""
    if not trainer:
        _create_crds(server, [crds.jobset_crd()])
        return
    _create_crds(server, [*crds.trainer_crds(), crds.jobset_crd()])
    if server.storage.get_object("v1", "namespaces", "", SYSTEM_NAMESPACE) is None:
        server.storage.create_unadmitted(
            "v1", "Namespace", {"metadata": {"name": SYSTEM_NAMESPACE}}
        )
    if server.storage.get_object("v1", "configmaps", SYSTEM_NAMESPACE, c.PUBLIC_CONFIG_MAP) is None:
        # What the Kubeflow SDK reads to learn the Trainer version (upstream's overlay ships it).
        server.storage.create_unadmitted(
            "v1",
            "ConfigMap",
            {
                "metadata": {"name": c.PUBLIC_CONFIG_MAP, "namespace": SYSTEM_NAMESPACE},
                "data": {c.PUBLIC_VERSION_KEY: c.TRAINER_RELEASE},
            },
        )
    for doc in builtin_runtime_documents():
        runtime = dict(doc)
        meta = dict(runtime.get("metadata") or {})  # type: ignore[call-overload]
        meta["labels"] = {
            **meta.get("labels", {}),
            c.LABEL_WEBHOOK_VALIDATION: c.WEBHOOK_VALIDATION_DISABLED,
        }
        runtime["metadata"] = meta
        if (
            server.storage.get_object(
                c.API_VERSION, c.PLURAL_CLUSTER_TRAINING_RUNTIMES, "", meta["name"]
            )
            is None
        ):
            server.storage.create_unadmitted(
                c.API_VERSION, c.KIND_CLUSTER_TRAINING_RUNTIME, runtime
            )


def _create_crds(server: APIServer, documents: list[dict[str, Any]]) -> None:
    for crd in documents:
        name = crd["metadata"]["name"]
        if (
            server.storage.get_object(
                "apiextensions.k8s.io/v1", "customresourcedefinitions", "", name
            )
            is None
        ):
            server.storage.create_unadmitted(
                "apiextensions.k8s.io/v1", "CustomResourceDefinition", crd
            )


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
    """Start the local plane. With ``feature_gates`` TrainJobStatus=true the status server
    runs too, on 127.0.0.1 (its certificate covers 127.0.0.1), and pods are told
    ``https://127.0.0.1:<port>`` as its base URL. ``allow_exposed_ports`` lets elastic
    TrainJobs run where pods cannot get a network sandbox. Without ``with_controller`` the
    plane runs no controller or webhook of its own and installs nothing of Trainer's: an
    admin applies the production install to it (docs/install.md, "Rehearsing an install
    locally"). ``without`` names the executor's roles left to the real programs
    (:mod:`trainer.local.executor.roles`)."""
    server = APIServer(port=port, state_file=state_file, reset_damaged_state=reset_damaged_state)
    await server.start()
    install_basics(server, trainer=with_controller)
    webhook_port = free_port()
    for hook_config in webhook_configurations(webhook_port) if with_controller else []:
        # (Re)registered at every start: the webhook's port is new each time.
        server.storage.create_unadmitted(
            hook_config["apiVersion"], hook_config["kind"], hook_config
        )
    tmp = None
    if state_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="trainer-local-", dir=private_parent())
        state_dir = Path(tmp.name)
    state_dir.mkdir(parents=True, exist_ok=True)
    cert_dir = private_dir(state_dir / "webhook-certs")
    kubeconfig = state_dir / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    api = await new_api_client(str(kubeconfig))
    kube = Kube(api)
    stop = asyncio.Event()
    ready = asyncio.Event()
    controller_state = ProcessState()
    status_port = free_port()
    config = local_config(webhook_port, status_port, feature_gates)
    status_gate = config.feature_enabled(c.FEATURE_TRAINJOB_STATUS) and with_controller
    tasks: list[asyncio.Task[Any]] = []
    if with_controller:
        controller = asyncio.create_task(
            run_controller(
                api,
                config,
                stop,
                options=ProcessOptions(
                    webhook=True,
                    webhook_extra_hosts=("127.0.0.1",),
                    status_server_url=f"https://127.0.0.1:{status_port}",
                    status_server_host="127.0.0.1",
                    webhook_cert_dir=str(cert_dir),
                ),
                ready=ready,
                state=controller_state,
            ),
            name="controller",
        )
        tasks.append(controller)
    else:
        ready.set()
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
    await executor.start()
    server.attach_pods(executor.dial)
    await asyncio.wait(
        {*tasks, asyncio.create_task(ready.wait())}, return_when=asyncio.FIRST_COMPLETED
    )
    for task in tasks:
        if task.done():
            await task  # raises why it stopped
    plane = LocalPlane(server, api, kube, executor, controller_state, work_dir, stop, tasks, tmp)
    if with_controller:
        await asyncio.wait_for(controller_state.webhook_serving.wait(), 30)
        await _wait_webhook_ready(plane)
    if status_gate:
        await asyncio.wait_for(controller_state.status_server_serving.wait(), 30)
    return plane


async def _wait_webhook_ready(plane: LocalPlane, timeout: float = 30.0) -> None:
    """Until the caBundle is injected, the API server cannot call the webhook."""

    def injected() -> bool:
        for kind, name in (
            ("validatingwebhookconfigurations", VALIDATING),
            ("mutatingwebhookconfigurations", MUTATING),
        ):
            config = plane.server.storage.get_object(
                "admissionregistration.k8s.io/v1", kind, "", name
            )
            hooks = (config or {}).get("webhooks") or []
            if not hooks or not all(h.get("clientConfig", {}).get("caBundle") for h in hooks):
                return False
        return True

    changed = asyncio.Event()
    plane.server.storage.store.subscribe(lambda _ev: changed.set())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not injected():
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError("the admission webhook did not become ready")
        changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), remaining)
