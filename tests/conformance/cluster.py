"""A Kubernetes endpoint for conformance tests: the embedded API server by default, or the
real cluster ``KUBECONFIG`` points at (then tests that need the local server's hooks skip)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient

from trainer.api import crds
from trainer.local.apiserver import APIServer

REAL = bool(os.environ.get("KUBECONFIG"))


@dataclass
class Cluster:
    api: ApiClient
    namespace: str
    server: APIServer | None

    # Typed as Any: the tests pass plain dicts as bodies, which the client accepts.
    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> Any:
        return client.CustomObjectsApi(self.api)

    def local(self) -> APIServer:
        """The embedded server, or skip (the test needs its hooks)."""
        if self.server is None:
            pytest.skip("needs the embedded API server's test hooks")
        return self.server


async def install_crds(api: ApiClient) -> None:
    ext: Any = client.ApiextensionsV1Api(api)
    for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
        try:
            await ext.create_custom_resource_definition(crd)
        except client.ApiException as exc:
            if exc.status != 409:
                raise


@pytest.fixture(name="cluster")
async def cluster_fixture() -> AsyncIterator[Cluster]:
    server: APIServer | None = None
    if REAL:
        cfg = client.Configuration()
        await config.load_kube_config(client_configuration=cfg)
    else:
        server = APIServer()
        await server.start()
        path = tempfile.mktemp(suffix=".kubeconfig")
        server.write_kubeconfig(path)
        cfg = client.Configuration()
        await config.load_kube_config(config_file=path, client_configuration=cfg)
        os.unlink(path)
    api = ApiClient(configuration=cfg)
    namespace = f"conf-{uuid.uuid4().hex[:8]}"
    core: Any = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": namespace}})
    try:
        yield Cluster(api, namespace, server)
    finally:
        with contextlib.suppress(client.ApiException):
            await core.delete_namespace(namespace)
        await api.close()
        if server is not None:
            await server.stop()


def body(obj: Any) -> dict[str, Any]:
    """The JSON body of an ApiException."""
    data: dict[str, Any] = json.loads(obj.body)
    return data
