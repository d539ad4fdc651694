"""What a mutating webhook returns is checked like a request: a JSONPatch that gives a
ConfigMap an invalid label makes the create a 422 naming ``metadata.labels``, and nothing is
stored. The webhook is a real HTTPS server on loopback, registered by URL and caBundle, as a
kube-apiserver would call it.

Counts: 1 create through the API server, 1 admission review."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from trainer.local.apiserver import APIServer
from trainer.local.apiserver.errors import APIError
from webhooks.certs import ServerTLS, generate_bundle

BAD_LABEL = [{"op": "add", "path": "/metadata/labels", "value": {"a b": "x"}}]


REVIEWS: list[str] = []


async def mutate(request: web.Request) -> web.Response:
    review = await request.json()
    REVIEWS.append(review["request"]["operation"])
    patch = base64.b64encode(json.dumps(BAD_LABEL).encode()).decode()
    response = {
        "uid": review["request"]["uid"],
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": patch,
    }
    return web.json_response({**review, "response": response})


def configuration(url: str, ca: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "bad-labels"},
        "webhooks": [
            {
                "name": "bad-labels.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca).decode()},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ],
            }
        ],
    }


async def test_what_a_mutating_webhook_returns_is_checked_like_a_request() -> None:
    bundle = generate_bundle(["localhost", "127.0.0.1"], datetime.now(UTC))
    tls = ServerTLS()
    tls.reload(bundle.cert, bundle.key)
    app = web.Application()
    app.router.add_post("/mutate", mutate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
    await site.start()
    port = runner.addresses[0][1]
    server = APIServer()
    await server.start()
    try:
        server.storage.create_unadmitted(
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration",
            configuration(f"https://127.0.0.1:{port}/mutate", bundle.ca_cert),
        )
        cms = server.storage.resource("v1", "configmaps")
        with pytest.raises(APIError) as err:
            await server.storage.create(
                cms,
                "default",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hooked"}},
            )
        assert REVIEWS == ["CREATE"]
        cause = err.value.details["causes"][0]
        assert (err.value.code, cause["field"]) == (422, "metadata.labels")
        assert server.storage.get_object("v1", "configmaps", "default", "hooked") is None
    finally:
        await server.stop()
        await runner.cleanup()
