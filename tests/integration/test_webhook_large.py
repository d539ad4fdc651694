"""Large and concurrent admission reviews, through the local API server and straight to the
webhook over HTTPS (docs/local-plane.md, "Admission webhook limits").

The webhook here is the real app on the real HTTPS server, registered with the embedded API
server by URL and caBundle, as a kube-apiserver would call it. What is checked is what a user
sees: a 1.44 MB TrainJob is created, labelled and patched (each UPDATE review carries the object
and the old object, about 2.9 MB); a review over the webhook's limit is a 413 naming the size,
not a 500; large reviews run off the event loop, so a small review finishes while they are still
in flight; beyond the worker queue a large review is denied 429; malformed and huge bodies
never get a 5xx.

Counts: 3 writes of a 1.44 MB TrainJob (6 large reviews through the API server), 1 create of
a 3 MiB one, 2 oversized creates, 4 concurrent 0.7 MB reviews plus 1 small one, 4 reviews
against a queue of 2, and 6 malformed or huge bodies sent straight to the webhook.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client

from tests import builders as b
from trainer.api import crds
from trainer.api.load import parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime
from trainer.kube.client import new_api_client
from trainer.listeners.https_app import HttpsAppServer
from trainer.local.apiserver import APIServer
from trainer.machinery.sockets import bind_socket
from webhooks.app import PATH_MUTATE_TRAINJOB, PATH_VALIDATE_TRAINJOB, create_app
from webhooks.certs import ServerTLS, generate_bundle
from webhooks.lookup import StaticLookup
from webhooks.offload import Offload

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
MIB = 1024 * 1024
MERGE_PATCH = "application/merge-patch+json"  # what kubectl label and kubectl patch send
#: A limit small enough to pass through the API server's own 3 MiB body limit.
SMALL_LIMIT = 1 * MIB


def configurations(base: str, ca: bytes) -> list[dict[str, Any]]:
    def hook(name: str, path: str) -> dict[str, Any]:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 30,
            "clientConfig": {"url": base + path, "caBundle": base64.b64encode(ca).decode()},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "apiVersions": [VERSION],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["trainjobs"],
                }
            ],
        }

    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validator.trainer.kubeflow.org"},
            "webhooks": [hook("validator.trainjob.trainer.kubeflow.org", PATH_VALIDATE_TRAINJOB)],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "defaulter.trainer.kubeflow.org"},
            "webhooks": [hook("defaulter.trainjob.trainer.kubeflow.org", PATH_MUTATE_TRAINJOB)],
        },
    ]


def runtime() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "runtimes/torch-distributed.yaml").read_text())
    return data


def trainjob(name: str, size: int, entries: int = 100) -> dict[str, Any]:
    """A suspended TrainJob on torch-distributed whose JSON is about ``size`` bytes, in
    ``entries`` env vars (the CRD allows 128; more make a review that is slower to decide)."""
    value = max(1, size // entries - 30)
    env = [
        {"name": f"LARGE_{i:06d}", "value": f"{i:06d}".ljust(value, "v")} for i in range(entries)
    ]
    return b.trainjob(name, namespace=None, suspend=True, trainer={"env": env})


def wire_size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def review(obj: dict[str, Any], uid: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": GROUP, "version": VERSION, "kind": "TrainJob"},
                "namespace": "default",
                "name": obj["metadata"]["name"],
                "operation": "CREATE",
                "object": {**obj, "metadata": {**obj["metadata"], "namespace": "default"}},
            },
        },
        separators=(",", ":"),
    ).encode()


@dataclass
class Env:
    server: APIServer
    custom: Any
    url: str
    ssl: ssl.SSLContext
    offload: Offload


async def start(max_body_bytes: int | None = None, offload: Offload | None = None) -> Any:
    """The API server with the CRDs and the runtime, and the webhook registered with it."""
    server = APIServer()
    await server.start()
    for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    server.storage.create_unadmitted(f"{GROUP}/{VERSION}", "ClusterTrainingRuntime", runtime())
    parsed = parse_object(runtime())
    assert isinstance(parsed, ClusterTrainingRuntime)
    bundle = generate_bundle(["localhost", "127.0.0.1"], datetime.now(UTC))
    tls = ServerTLS()
    tls.reload(bundle.cert, bundle.key)
    pool = offload or Offload()
    kw: dict[str, Any] = {} if max_body_bytes is None else {"max_body_bytes": max_body_bytes}
    app = create_app(StaticLookup(runtimes=[parsed]), offload=pool, **kw)
    webhook = HttpsAppServer(
        app, "127.0.0.1", 0, tls.context, sock=bind_socket("127.0.0.1", 0), graceful_timeout=5
    )
    base = f"https://127.0.0.1:{webhook.port}"
    for config in configurations(base, bundle.ca_cert):
        server.storage.create_unadmitted(config["apiVersion"], config["kind"], config)
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    ctx = ssl.create_default_context(cadata=bundle.ca_cert.decode())
    return server, api, webhook, Env(server, client.CustomObjectsApi(api), base, ctx, pool)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    server, api, webhook, out = await start()
    async with webhook:
        try:
            yield out
        finally:
            await api.close()
            await server.stop()
            await out.offload.close()


def status_of(err: client.ApiException) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(err.body or b"{}")
    return data


async def test_a_large_trainjob_is_created_labelled_and_patched(env: Env) -> None:
    job = trainjob("large", int(1.44 * 1e6))
    assert 1.40e6 < wire_size(job) < 1.50e6
    created = await env.custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", job
    )
    assert len(created["spec"]["trainer"]["env"]) == len(job["spec"]["trainer"]["env"])
    # kubectl label: an UPDATE whose review carries the object and the old object (~2.9 MB).
    labelled = await env.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        "trainjobs",
        "large",
        {"metadata": {"labels": {"team": "a"}}},
        _content_type=MERGE_PATCH,
    )
    assert labelled["metadata"]["labels"]["team"] == "a"
    # kubectl patch (resume): the same size, through both webhooks again.
    resumed = await env.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        "trainjobs",
        "large",
        {"spec": {"suspend": False}},
        _content_type=MERGE_PATCH,
    )
    assert resumed["spec"]["suspend"] is False
    assert env.offload.processes, "the large reviews ran in worker processes"


async def test_an_object_at_the_api_servers_3_mib_limit_is_admitted(env: Env) -> None:
    # kube-apiserver accepts request bodies up to 3 MiB; so must the local one and the webhook.
    job = trainjob("at-limit", 3 * MIB - 4096)
    assert 3 * MIB - 8192 < wire_size(job) < 3 * MIB
    created = await env.custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", job
    )
    assert created["metadata"]["name"] == "at-limit"


async def test_a_create_over_the_webhook_limit_is_a_413_naming_the_size() -> None:
    server, api, webhook, env = await start(max_body_bytes=SMALL_LIMIT)
    async with webhook:
        try:
            job = trainjob("too-large", int(1.1 * SMALL_LIMIT))
            with pytest.raises(client.ApiException) as err:
                await env.custom.create_namespaced_custom_object(
                    GROUP, VERSION, "default", "trainjobs", job
                )
            assert err.value.status == 413
            status = status_of(err.value)
            assert status["reason"] == "RequestEntityTooLarge"
            message = status["message"]
            assert message.startswith(
                'admission webhook "defaulter.trainjob.trainer.kubeflow.org" denied the request: '
                "the TrainJob is too large for the admission webhook"
            )
            assert f"over the webhook's limit of {SMALL_LIMIT} bytes" in message
            size = int(message.split("the API server sent is ")[1].split(" bytes")[0])
            assert size > SMALL_LIMIT
            assert "ConfigMap" in message
            # Over the API server's own limit (3 MiB, as kube-apiserver): 413 from it.
            with pytest.raises(client.ApiException) as err:
                await env.custom.create_namespaced_custom_object(
                    GROUP, VERSION, "default", "trainjobs", trainjob("huge", int(3.2 * MIB))
                )
            assert err.value.status == 413
            assert status_of(err.value)["reason"] == "RequestEntityTooLarge"
        finally:
            await api.close()
            await server.stop()
            await env.offload.close()


async def post(
    session: aiohttp.ClientSession, env: Env, path: str, body: bytes
) -> tuple[int, dict[str, Any]]:
    async with session.post(
        env.url + path, data=body, headers={"Content-Type": "application/json"}, ssl=env.ssl
    ) as resp:
        return resp.status, await resp.json(content_type=None)


class Watched(Offload):
    """Sets ``holding`` once ``count`` large reviews are admitted at once."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.holding = asyncio.Event()

    def try_enter(self) -> bool:
        entered = super().try_enter()
        if self.admitted >= self.count:
            self.holding.set()
        return entered


async def test_a_small_review_is_not_held_behind_large_ones() -> None:
    watched = Watched(4)
    server, api, webhook, env = await start(offload=watched)
    # Many small env vars: the slowest kind of review to decide, per byte.
    large = [
        review(trainjob(f"large-{i}", 700_000, entries=15_000), f"large-{i}") for i in range(4)
    ]
    small = review(trainjob("small", 2000), "small")
    async with webhook, aiohttp.ClientSession() as session:
        try:
            # Warm: the workers start with the first large review.
            status, _ = await post(session, env, PATH_MUTATE_TRAINJOB, large[0])
            assert status == 200
            in_flight = [
                asyncio.create_task(post(session, env, PATH_MUTATE_TRAINJOB, body))
                for body in large
            ]
            await asyncio.wait_for(watched.holding.wait(), 30)  # the server holds all four
            sent = time.perf_counter()
            status, answer = await post(session, env, PATH_VALIDATE_TRAINJOB, small)
            latency = time.perf_counter() - sent
            still_running = sum(not t.done() for t in in_flight)
            results = await asyncio.gather(*in_flight)
        finally:
            await api.close()
            await server.stop()
            await env.offload.close()
    assert status == 200 and answer["response"]["allowed"] is True
    # The small review finished while large ones were still being reviewed, and fast.
    assert still_running >= 1
    assert latency < 1.0, latency
    assert all(s == 200 and a["response"]["allowed"] for s, a in results)


async def test_large_reviews_beyond_the_queue_are_denied_429() -> None:
    server, api, webhook, env = await start(offload=Offload(workers=1, queue=1))
    async with webhook:
        try:
            bodies = [review(trainjob(f"q-{i}", 200_000), f"q-{i}") for i in range(4)]
            async with aiohttp.ClientSession() as session:
                results = await asyncio.gather(
                    *(post(session, env, PATH_MUTATE_TRAINJOB, b) for b in bodies)
                )
        finally:
            await api.close()
            await server.stop()
            await env.offload.close()
    codes = sorted(
        (a["response"].get("status") or {}).get("code", 200) for s, a in results if s == 200
    )
    assert len(codes) == 4
    assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) <= {200, 429}
    busy = next(a["response"] for _, a in results if not a["response"]["allowed"])
    assert busy["status"]["reason"] == "TooManyRequests"
    assert "the admission webhook is busy" in busy["status"]["message"]


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("garbage over the limit", b"\x00\xff" * (5 * MIB)),
        (
            "review over the limit",
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
            b'"request":{"uid":"u-big","object":"' + b"x" * (9 * MIB) + b'"}}',
        ),
        ("truncated large review", review(trainjob("t", 100_000), "u-t")[:-1000]),
        ("deep nesting", b'{"a":' + b"[" * 60_000 + b"]" * 60_000 + b"}"),
        ("not UTF-8", b'{"request":{"uid":"u","object":"' + b"\xff\xfe" * 40_000 + b'"}}'),
        ("wrong kind, large", review(trainjob("w", 100_000), "u-w").replace(b"TrainJob", b"Pod")),
    ],
)
async def test_malformed_and_huge_bodies_never_get_a_5xx(env: Env, name: str, body: bytes) -> None:
    async with aiohttp.ClientSession() as session:
        status, answer = await post(session, env, PATH_VALIDATE_TRAINJOB, body)
    assert status < 500, (name, answer)
    if status == 200:
        assert answer["response"]["allowed"] is False
        assert 400 <= answer["response"]["status"]["code"] < 500, answer
    else:
        assert answer["kind"] == "Status" and answer["code"] == status
