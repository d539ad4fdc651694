"""A local control plane for integration tests: the embedded API server with our CRDs and
built-in runtimes, a Kube client, and waiting on API state without sleeping (every store
write wakes the waiters)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from trainer.api import crds
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.store import Event
from trainer.runtime.builtin import builtin_runtime_documents

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


@dataclass
class Plane:
    server: APIServer
    kube: Kube

    async def until(
        self, check: Callable[[], Any], timeout: float = 10.0, what: str = "condition"
    ) -> Any:
        """Wait until ``check()`` returns something truthy, re-checking after every write."""
        changed = asyncio.Event()

        def wake(_ev: Event) -> None:
            changed.set()

        self.server.storage.store.on_write.append(wake)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                result = check()
                if result:
                    return result
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"timed out waiting for {what}")
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    continue
        finally:
            self.server.storage.store.on_write.remove(wake)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.server.storage.get_object(api_version, kind, namespace, name)

    def trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(f"{GROUP}/{VERSION}", "trainjobs", namespace, name)

    def jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("jobset.x-k8s.io/v1alpha2", "jobsets", namespace, name)

    def writes(self, *, manager: str | None = None) -> list[Any]:
        return [
            r
            for r in self.server.storage.hooks.writes()
            if manager is None or r.field_manager == manager or r.user_agent.startswith(manager)
        ]


@asynccontextmanager
async def local_plane(*, runtimes: bool = True) -> AsyncIterator[Plane]:
    server = APIServer()
    await server.start()
    for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
        server.storage.create_direct("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    if runtimes:
        for doc in builtin_runtime_documents():
            server.storage.create_direct(f"{GROUP}/{VERSION}", "ClusterTrainingRuntime", dict(doc))
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    try:
        yield Plane(server, Kube(api))
    finally:
        await api.close()
        await server.stop()
