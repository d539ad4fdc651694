"""The executor's node role alone, as a Node of any cluster (``trainer node``; docs/local-plane.md,
"A node of a real cluster"): the kubelet (:mod:`~trainer.local.executor.kubelet.kubelet`) with its
sandboxes, devices and cgroups, registered under a name of its own against the API server a
kubeconfig names, running the pods that cluster's scheduler binds to it.

What differs from the node of the local plane, and why:

- It watches only the pods bound to its node (``fieldSelector=spec.nodeName=<name>``), as a
  kubelet does: a node's credentials may read no more under the Node authorizer.
- Container logs are kept as files under ``<state_dir>/logs`` in the kubelet's layout
  (``<namespace>_<pod>_<uid>/<container>/<restartCount>.log``): appending them through
  ``pods/log`` is an extension of the local API server, which kube-apiserver lacks (it reads
  logs from the kubelet's own HTTPS endpoint, which this agent does not serve).
- Pods report 127.0.0.1 as their IP unless the node is given a pod network (``--pod-cidr``,
  :mod:`~trainer.local.executor.sandbox.podaddress`): then each pod in a sandbox gets an address of
  it, where its declared TCP ports are published, so that kube-apiserver can call a webhook
  it serves through an EndpointSlice.
- The API server's port is forwarded into the sandboxes and ``KUBERNETES_SERVICE_HOST`` is
  127.0.0.1, so in-cluster clients reach the server the kubeconfig names (its certificate must
  name 127.0.0.1, as the test bed's does).
"""

from __future__ import annotations

import asyncio
import logging
import re
from ipaddress import IPv4Network
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from trainer.kube.rest import APIError, Kube
from trainer.local.executor.api import TRANSIENT
from trainer.local.executor.kubelet.kubelet import Kubelet
from trainer.local.executor.kubelet.logsink import LogCallback
from trainer.local.executor.node.config import NodeConfig

log = logging.getLogger(__name__)

LOG_DIR: Final = "logs"
"""Under the state directory: the containers' logs (see the module docstring)."""
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class NodeAgentError(Exception):
    """The agent cannot start: one line saying why."""


def check_node_name(name: str) -> str:
    """``name`` if it can name a Node (a DNS-1123 subdomain), else :class:`NodeAgentError`."""
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        raise NodeAgentError(
            f"node name {name!r} is not a DNS-1123 subdomain (lower-case letters, digits, '-' "
            "and '.', starting and ending with a letter or digit, at most 253 characters)"
        )
    return name


class NodeAgent:
    """The kubelet of node ``node_name`` on ``kube`` (the caller closes the client)."""

    def __init__(
        self,
        kube: Kube,
        *,
        node_name: str,
        state_dir: Path,
        workdir: Path,
        node_config: NodeConfig | None = None,
        on_log: LogCallback | None = None,
        allow_exposed_ports: bool = False,
        pod_network: IPv4Network | None = None,
    ) -> None:
        self.kube = kube
        self.server = str(kube.api.configuration.host)
        port = urlsplit(self.server).port or 443
        self.kubelet = Kubelet(
            kube,
            workdir=workdir,
            state_dir=state_dir,
            on_log=on_log,
            node_config=node_config,
            plane_ports=(port,),
            allow_exposed_ports=allow_exposed_ports,
            node_name=check_node_name(node_name),
            log_dir=Path(state_dir) / LOG_DIR,
            pod_network=pod_network,
        )

    @property
    def log_dir(self) -> Path:
        assert self.kubelet.log_dir is not None
        return self.kubelet.log_dir

    async def register(self) -> None:
        """Write the Node once before anything else, so that a server that refuses it (wrong
        credentials, NodeRestriction) stops the agent with its answer rather than a warning
        per heartbeat."""
        name = self.kubelet.node_name
        try:
            await self.kubelet.heartbeat.register()
        except APIError as exc:
            raise NodeAgentError(f"{self.server} refused to register Node {name}: {exc}") from None
        except TRANSIENT as exc:
            raise NodeAgentError(
                f"cannot register Node {name} at {self.server}: {exc or type(exc).__name__}"
            ) from None

    async def run(self, stop: asyncio.Event) -> None:
        """Register (unless :meth:`register` did), then run the node's pods until ``stop`` is
        set; their processes are ended on the way out (the Node is left registered, as a
        stopped kubelet leaves it: the cluster's node lifecycle controller marks it NotReady
        once its Lease expires)."""
        if not self.kubelet.heartbeat.registered.is_set():
            await self.register()
        task = asyncio.get_running_loop().create_task(self.kubelet.run(), name="node-agent")
        stopped = asyncio.get_running_loop().create_task(stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await self.kubelet.stop()
            for t in (task, stopped):
                t.cancel()
            await asyncio.gather(task, stopped, return_exceptions=True)
