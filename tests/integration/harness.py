"""A local control plane for integration tests: the embedded API server with our CRDs and
built-in runtimes, a Kube client, waiting on API state without sleeping (every store write
wakes the waiters), and a stand-in for JobSet's first status report (no JobSet controller
runs here)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from trainer.api import crds
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError, Kube
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.store import Event
from trainer.runtime.builtin import builtin_runtime_documents

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


async def until_written(
    server: APIServer, check: Callable[[], Any], what: str, timeout: float = 10.0
) -> Any:
    """Wait until ``check()`` is truthy, re-checking after every write to ``server``;
    AssertionError naming ``what`` after ``timeout`` seconds."""
    changed = asyncio.Event()

    def wake(_ev: Event) -> None:
        changed.set()

    server.storage.store.subscribe(wake)
    try:
        async with asyncio.timeout(timeout):
            while not (result := check()):
                changed.clear()
                await changed.wait()
            return result
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
    finally:
        server.storage.store.unsubscribe(wake)


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

        self.server.storage.store.subscribe(wake)
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
            self.server.storage.store.unsubscribe(wake)

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


def created_jobset_status(jobset: dict[str, Any]) -> dict[str, Any]:
    """The status JobSet's controller reports for a JobSet whose Jobs it has just created and
    whose pods do not exist yet: each replicated job counted, nothing ready or finished (JobSet
    lists them by name, descending)."""
    suspended = bool((jobset.get("spec") or {}).get("suspend"))
    jobs = sorted(
        (rj for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []),
        key=lambda rj: str(rj.get("name")),
        reverse=True,
    )
    return {
        "replicatedJobsStatus": [
            {
                "name": rj["name"],
                "ready": 0,
                "succeeded": 0,
                "failed": 0,
                "active": 0,
                "suspended": int(rj.get("replicas", 1)) if suspended else 0,
            }
            for rj in jobs
        ]
    }


async def report_jobset_status(plane: Plane, namespace: str, name: str) -> dict[str, Any]:
    """Wait for the JobSet ``namespace/name`` and give it the status JobSet reports once it made
    its Jobs (:func:`created_jobset_status`): the TrainJob controller writes a TrainJob's first
    status only with something of upstream's to say, such as ``jobsStatus`` (as upstream's
    controller does)."""
    jobset = await plane.until(lambda: plane.jobset(namespace, name), what=f"JobSet {name}")
    patched: dict[str, Any] = await plane.kube.patch_status(
        r.JOBSETS, namespace, name, {"status": created_jobset_status(jobset)}
    )
    return patched


@asynccontextmanager
async def jobsets_report_status(plane: Plane) -> AsyncIterator[None]:
    """While in the block, every JobSet created gets :func:`created_jobset_status` at once,
    as JobSet's controller would give it (a JobSet deleted meanwhile is skipped)."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def report(namespace: str, name: str, jobset: dict[str, Any]) -> None:
        try:
            await plane.kube.patch_status(
                r.JOBSETS, namespace, name, {"status": created_jobset_status(jobset)}
            )
        except APIError as exc:
            if not exc.is_not_found:
                raise

    def on_write(ev: Event) -> None:
        if ev.type != "ADDED" or ev.key != (r.JOBSETS.group, r.JOBSETS.plural):
            return
        meta = ev.obj.get("metadata") or {}
        task = loop.create_task(report(ev.namespace, meta["name"], ev.obj))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    plane.server.storage.store.subscribe(on_write)
    try:
        yield
    finally:
        plane.server.storage.store.unsubscribe(on_write)
        await asyncio.gather(*tasks, return_exceptions=True)


@asynccontextmanager
async def local_plane(*, runtimes: bool = True) -> AsyncIterator[Plane]:
    server = APIServer()
    await server.start()
    for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    if runtimes:
        for doc in builtin_runtime_documents():
            server.storage.create_unadmitted(
                f"{GROUP}/{VERSION}", "ClusterTrainingRuntime", dict(doc)
            )
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    try:
        yield Plane(server, Kube(api))
    finally:
        await api.close()
        await server.stop()
