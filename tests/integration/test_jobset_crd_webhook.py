"""The local plane's JobSet CRD, as JobSet v0.12.0 has it: the CRD's defaults are applied on
create. What JobSet's webhooks check and default is the table of tests/jobset_webhook_cases.py
(tests/integration/test_jobset_webhook_cases.py)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from trainer.api import crds
from trainer.local.apiserver import APIServer

URL = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
MOUNTS_DATA = {
    "name": "c",
    "image": "busybox",
    "volumeMounts": [{"name": "data", "mountPath": "/d"}],
}
POD = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
BASE: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "js"},
    "spec": {
        "replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": POD}}},
            {"name": "launcher", "template": {"spec": {"template": POD}}},
        ]
    },
}


@pytest.fixture
async def post() -> AsyncIterator[Any]:
    server = APIServer()
    await server.start()
    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", crds.jobset_crd()
    )
    connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
    async with aiohttp.ClientSession(connector=connector, headers=server.auth_headers()) as session:

        async def send(spec: dict[str, Any], name: str = "js") -> tuple[int, dict[str, Any]]:
            body = copy.deepcopy(BASE)
            body["metadata"]["name"] = name
            body["spec"].update(spec)
            async with session.post(server.url + URL, json=body) as resp:
                return resp.status, await resp.json()

        try:
            yield send
        finally:
            await server.stop()


async def test_the_crd_defaults_restart_strategy_and_claim_retention(post: Any) -> None:
    status, stored = await post(
        {
            "replicatedJobs": [
                {
                    "name": "node",
                    "template": {"spec": {"template": {"spec": {"containers": [MOUNTS_DATA]}}}},
                }
            ],
            "failurePolicy": {"maxRestarts": 2},
            "volumeClaimPolicies": [
                {"templates": [{"metadata": {"name": "data"}}], "retentionPolicy": {}}
            ],
        }
    )
    assert status == 201, stored
    assert stored["spec"]["failurePolicy"] == {"maxRestarts": 2, "restartStrategy": "Recreate"}
    assert stored["spec"]["volumeClaimPolicies"][0]["retentionPolicy"] == {"whenDeleted": "Delete"}
