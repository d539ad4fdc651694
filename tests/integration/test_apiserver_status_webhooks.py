"""Admission webhooks and the status subresource, as kube-apiserver matches them: a rule for
``trainjobs`` is not called for writes to ``trainjobs/status``; a rule naming
``trainjobs/status`` (or ``trainjobs/*``) is.

The webhooks point at a closed port with ``failurePolicy: Fail``, so every write a webhook is
called for answers 500 "failed calling webhook" and every write none is called for succeeds:
what is asserted is the HTTP answer a client gets. (The local plane's controller patches each
TrainJob's status once or twice; calling the TrainJob webhooks for those patches doubled the
reviews per TrainJob: docs/local-plane.md, "Throughput".)"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests import builders as b
from trainer.api import crds
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError, Kube
from trainer.local.apiserver import APIServer

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def configuration(kind: str, resources: list[str], port: int) -> dict[str, Any]:
    mutating = kind == "MutatingWebhookConfiguration"
    slug = "-".join(resources).replace("/", "-").replace("*", "all")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": f"{'m' if mutating else 'v'}-{slug}"},
        "webhooks": [
            {
                "name": f"{'defaulter' if mutating else 'validator'}.trainjob.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"url": f"https://127.0.0.1:{port}/hook"},
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["UPDATE"],
                        "resources": resources,
                    }
                ],
            }
        ],
    }


@pytest.fixture
async def server() -> AsyncIterator[APIServer]:
    """An API server with the Trainer CRDs and one TrainJob (created through the API, before
    any webhook is registered)."""
    srv = APIServer()
    await srv.start()
    for crd in crds.trainer_crds():
        srv.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    api, kube = await client_of(srv)
    try:
        await kube.create(b.trainjob())
    finally:
        await api.close()
    try:
        yield srv
    finally:
        await srv.stop()


async def client_of(srv: APIServer) -> tuple[Any, Kube]:
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        srv.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    return api, Kube(api, timeout=10.0)


STATUS = {
    "status": {
        "conditions": [
            {
                "type": "Suspended",
                "status": "True",
                "reason": "Suspended",
                "message": "TrainJob is suspended",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
}


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
async def test_a_trainjobs_rule_is_not_called_for_status_writes(
    server: APIServer, kind: str
) -> None:
    config = configuration(kind, ["trainjobs"], closed_port())
    server.storage.create_unadmitted(config["apiVersion"], config["kind"], config)
    api, kube = await client_of(server)
    try:
        patched = await kube.patch_status(r.TRAINJOBS, "default", "job", STATUS)
        assert patched["status"]["conditions"][0]["type"] == "Suspended"
        with pytest.raises(APIError) as failed:
            await kube.patch(r.TRAINJOBS, "default", "job", {"metadata": {"labels": {"a": "b"}}})
        assert failed.value.status == 500
        assert "failed calling webhook" in failed.value.message
    finally:
        await api.close()


@pytest.mark.parametrize("resource", ["trainjobs/status", "trainjobs/*"])
async def test_a_rule_naming_the_status_subresource_is_called_for_status_writes(
    server: APIServer, resource: str
) -> None:
    config = configuration("ValidatingWebhookConfiguration", [resource], closed_port())
    server.storage.create_unadmitted(config["apiVersion"], config["kind"], config)
    api, kube = await client_of(server)
    try:
        with pytest.raises(APIError) as failed:
            await kube.patch_status(r.TRAINJOBS, "default", "job", STATUS)
        assert failed.value.status == 500
        assert "failed calling webhook" in failed.value.message
        # ... and not for the main resource.
        patched = await kube.patch(
            r.TRAINJOBS, "default", "job", {"metadata": {"labels": {"a": "b"}}}
        )
        assert patched["metadata"]["labels"] == {"a": "b"}
    finally:
        await api.close()
