"""One set of API probes, two servers (docs/local-plane.md, "Held to kube-apiserver"): the
probes of ``tests/conformance/test_api.py`` and ``test_api_wire.py`` run in the local tier
against the local API server, and here, unchanged, against the bed's kube-apiserver (with its
garbage collector, namespace controller and admission webhooks). What kube-apiserver answers
is the answer: a probe that fails here is a wrong expectation, and the local API server that
met it is wrong with it.

Probes that need the local server's own hooks (fault injection, its clock) skip here, saying
so. Every known difference between the two servers is in ``tests/conformance/differences.py``,
with its reason (its probe checks kube-apiserver's answer here, the local server's in the local
tier); :func:`test_the_differences_are_listed` prints the list."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests.conformance import test_api, test_api_wire
from tests.conformance.cluster import Cluster
from tests.conformance.differences import DIFFERENCES

PROBES: dict[str, Callable[..., Any]] = {
    name: value
    for module in (test_api, test_api_wire)
    for name, value in vars(module).items()
    if name.startswith("test_") and callable(value)
}

globals().update(PROBES)


@pytest.fixture(name="cluster")
async def kube_apiserver(bed: Any) -> AsyncIterator[Cluster]:
    """The bed's kube-apiserver, as its administrator, in a namespace of the probe's own."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(bed.kubeconfig), client_configuration=cfg)
    api = client.ApiClient(configuration=cfg)
    namespace = f"probe-{uuid.uuid4().hex[:8]}"
    core: Any = client.CoreV1Api(api)
    await core.create_namespace({"metadata": {"name": namespace}})
    try:
        yield Cluster(api, namespace, None)
    finally:
        with contextlib.suppress(client.ApiException):
            await core.delete_namespace(namespace)
        await api.close()


def test_the_differences_are_listed() -> None:
    """The list a reader of docs/local-plane.md is pointed to: printed, and each entry names a
    probe that exists."""
    print(f"{len(PROBES)} probes; differences from kube-apiserver: {len(DIFFERENCES)}")
    for name, reason in sorted(DIFFERENCES.items()):
        print(f"  {name}: {reason}")
    assert set(DIFFERENCES) <= set(PROBES)
