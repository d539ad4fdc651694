"""A namespace being deleted takes no new objects: the local API server refuses them as
kube-apiserver's NamespaceLifecycle admission does (message and NamespaceTerminating cause, as
the test bed's kube-apiserver answered our controller: docs/testbed.md, "Found by the real
programs"), and the controller treats it as nothing to do, not as a failure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.builders import trainjob
from tests.integration.harness import local_plane
from tests.integration.test_controller import Clock
from tests.integration.test_controller_lifecycle import Env, idle
from trainer.kube import resources as r
from trainer.kube.rest import APIError

NAMESPACES = r.GVR("", "v1", "namespaces", False, "Namespace")


async def test_creating_in_a_terminating_namespace_is_refused_as_kube_apiserver_does() -> None:
    async with local_plane(runtimes=False) as plane:
        plane.server.storage.create_unadmitted(
            "v1", "Namespace", {"metadata": {"name": "going", "finalizers": ["example.com/hold"]}}
        )
        await plane.kube.delete(NAMESPACES, None, "going")
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "late", "namespace": "going"},
        }
        with pytest.raises(APIError) as caught:
            await plane.kube.create(body, gvr=r.CONFIGMAPS)
        exc = caught.value
        assert exc.status == 403 and exc.reason == "Forbidden"
        assert exc.message == (
            'configmaps "late" is forbidden: unable to create new content in namespace going '
            "because it is being terminated"
        )
        assert exc.is_namespace_terminating
        assert isinstance(exc.body, dict)
        assert exc.body["details"]["causes"] == [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace going is being terminated",
                "field": "metadata.namespace",
            }
        ]


async def test_the_controller_takes_a_terminating_namespace_as_nothing_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On kube-apiserver the controller can reconcile a TrainJob in the moment between its
    namespace's deletion and the namespace controller deleting the TrainJob: every write it
    makes is refused so. Nothing is a failure then: no BuildFailed, nothing retried."""
    async with local_plane() as plane:
        refused = APIError(
            403,
            "Forbidden",
            'configmaps "tj-runtime-snapshot" is forbidden: unable to create new content in '
            "namespace default because it is being terminated",
            {"details": {"causes": [{"reason": "NamespaceTerminating"}]}},
        )
        applies: list[str] = []

        async def apply(obj: dict[str, Any], *_: Any, **__: Any) -> dict[str, Any]:
            applies.append(obj["kind"])
            raise refused

        monkeypatch.setattr(plane.kube, "apply", apply)
        env = Env(plane, Clock())
        await env.start_controller()
        try:
            await plane.kube.create(trainjob("tj"), gvr=r.TRAINJOBS)
            for _ in range(500):  # the refused apply writes nothing a waiter could wake on
                if applies:
                    break
                await asyncio.sleep(0.02)
            await idle(env)
            job = plane.trainjob("default", "tj")
            assert job is not None
            conditions = (job.get("status") or {}).get("conditions") or []
            assert [c for c in conditions if c["type"] == "BuildFailed"] == []
            assert len(applies) == 1, applies  # not retried
        finally:
            await env.stop_controller()
