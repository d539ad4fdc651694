"""The webhook over real HTTPS: uvicorn on 127.0.0.1 with a generated CA and serving
certificate, AdmissionReviews sent by aiohttp verifying against that CA, TLS version policy,
certificate hot reload without a restart, and graceful shutdown."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import jsonpatch
import pytest
import yaml
from cryptography import x509

from tests import builders as b
from trainer.api.load import parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime
from trainer.jobset.types import JobSet
from trainer.listeners.https_app import HttpsAppServer, serve
from trainer.machinery.sockets import bind_socket
from trainer.runtime.info import Runtime
from webhooks.app import (
    PATH_MUTATE_TRAINJOB,
    PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINJOB,
    create_app,
)
from webhooks.certs import (
    Action,
    CertBundle,
    CertRotator,
    SecretState,
    ServerTLS,
    generate_bundle,
    generate_serving_cert,
)
from webhooks.lookup import StaticLookup

NOW = "2026-11-22T10:00:00Z"
HOSTS = ["localhost", "127.0.0.1"]

RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            template:
              spec:
                containers: [{name: node, image: pytorch/pytorch}]
"""


def _runtimes() -> list[Runtime]:
    base = yaml.safe_load(RUNTIME)
    old = yaml.safe_load(RUNTIME)
    old["metadata"] = {"name": "old", "labels": {"trainer.kubeflow.org/support": "deprecated"}}
    out = [parse_object(base), parse_object(old)]
    assert all(isinstance(r, ClusterTrainingRuntime) for r in out)
    return out  # type: ignore[return-value]


def trainjob(**spec: Any) -> dict[str, Any]:
    """TrainJob ``team/job`` on ``torch`` with two nodes; ``spec`` entries replace."""
    return b.trainjob(namespace="team", runtime="torch", **{"trainer": {"numNodes": 2}, **spec})


def review(obj: dict[str, Any], uid: str = "uid-1", operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": obj["kind"]},
            "operation": operation,
            "namespace": obj["metadata"].get("namespace", ""),
            "name": obj["metadata"]["name"],
            "object": obj,
        },
    }


@dataclass
class Running:
    server: HttpsAppServer
    tls: ServerTLS
    certs: CertBundle
    client_ssl: ssl.SSLContext

    @property
    def port(self) -> int:
        return self.server.port

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"


def client_context(ca_pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem.decode())


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    certs = generate_bundle(HOSTS, datetime.now(UTC))
    tls = ServerTLS()
    tls.reload(certs.cert, certs.key)
    app = create_app(StaticLookup(runtimes=_runtimes()), now=lambda: NOW, ready=lambda: tls.loaded)
    async with HttpsAppServer(app, "127.0.0.1", 0, tls.context, graceful_timeout=5) as server:
        yield Running(server, tls, certs, client_context(certs.ca_cert))


async def post_review(run: Running, path: str, body: dict[str, Any]) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(ssl=run.client_ssl)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(run.url(path), json=body) as resp,
    ):
        assert resp.status == 200
        assert resp.content_type == "application/json"
        data: dict[str, Any] = await resp.json()
    assert data["apiVersion"] == "admission.k8s.io/v1"
    assert data["kind"] == "AdmissionReview"
    response: dict[str, Any] = data["response"]
    assert response["uid"] == body["request"]["uid"]
    return response


async def test_allow(running: Running) -> None:
    out = await post_review(running, PATH_VALIDATE_TRAINJOB, review(trainjob()))
    assert out == {"uid": "uid-1", "allowed": True}


async def test_deny_lists_every_error_with_403(running: Running) -> None:
    obj = trainjob(
        trainer={"numNodes": 2, "env": [{"name": "PET_NNODES", "value": "1"}]},
        runtimePatches=[{"manager": "kueue.k8s.io/"}],
    )
    out = await post_review(running, PATH_VALIDATE_TRAINJOB, review(obj, uid="deny-1"))
    assert out["allowed"] is False
    status = out["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    message = status["message"]
    assert message.startswith("[") and message.endswith("]")
    assert (
        'spec.trainer.env: Invalid value: [{"name":"PET_NNODES","value":"1"}]: must not have '
        "reserved envs, invalid envs configured: [PET_NNODES]" in message
    )
    assert (
        'spec.runtimePatches[0].manager: Invalid value: "kueue.k8s.io/": must be a '
        'domain-prefixed path (such as "acme.io/foo")' in message
    )


async def test_warnings(running: Running) -> None:
    out = await post_review(
        running, PATH_VALIDATE_TRAINJOB, review(trainjob(runtimeRef={"name": "old"}))
    )
    assert out["allowed"] is True
    assert out["warnings"][0].startswith('Referenced ClusterTrainingRuntime "old" is deprecated')
    runtime = yaml.safe_load(RUNTIME)
    runtime["metadata"]["labels"] = {"trainer.kubeflow.org/support": "deprecated"}
    out = await post_review(running, PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME, review(runtime))
    assert out["warnings"][0].startswith('ClusterTrainingRuntime "torch" is deprecated')


async def test_mutation_patch(running: Running) -> None:
    obj = trainjob(runtimePatches=[{"manager": "acme.io/team"}])
    out = await post_review(running, PATH_MUTATE_TRAINJOB, review(obj))
    assert out["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(out["patch"]))
    patched = jsonpatch.apply_patch(obj, patch)
    assert patched["spec"]["runtimePatches"] == [{"manager": "acme.io/team", "time": NOW}]


async def test_probes_and_hostname_verification(running: Running) -> None:
    connector = aiohttp.TCPConnector(ssl=running.client_ssl)
    async with aiohttp.ClientSession(connector=connector) as session:
        for host in HOSTS:  # the DNS SAN and the IP SAN both verify
            async with session.get(running.url("/readyz", host)) as resp:
                assert (resp.status, await resp.text()) == (200, "ok")
        async with session.get(running.url("/healthz")) as resp:
            assert resp.status == 200
    # A client that trusts another CA refuses the server.
    stranger = client_context(generate_bundle(HOSTS, datetime.now(UTC)).ca_cert)
    connector = aiohttp.TCPConnector(ssl=stranger)
    async with aiohttp.ClientSession(connector=connector) as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(running.url("/healthz"))


def _legacy_client(max_version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = max_version
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client really offer TLS 1.0/1.1
    return ctx


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
async def test_tls_1_1_refused_tls_1_2_accepted(running: Running) -> None:
    # The server aborts the handshake (a protocol_version alert, then the connection is
    # closed: the client sees an SSL error or a reset depending on timing).
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        await asyncio.open_connection(
            "127.0.0.1", running.port, ssl=_legacy_client(ssl.TLSVersion.TLSv1_1)
        )
    _, writer = await asyncio.open_connection(
        "127.0.0.1", running.port, ssl=_legacy_client(ssl.TLSVersion.TLSv1_2)
    )
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.2"
    writer.close()
    await writer.wait_closed()


async def _open(run: Running) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """A verified TLS connection and the serial number of the certificate it was served."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", run.port, ssl=run.client_ssl, server_hostname="localhost"
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return reader, writer, x509.load_der_x509_certificate(der).serial_number


async def _raw_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: bytes, headers: str = ""
) -> tuple[int, dict[str, str], bytes]:
    writer.write(
        (
            f"POST {PATH_VALIDATE_TRAINJOB} HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: application/json\r\n{headers or f'Content-Length: {len(body)}'}\r\n\r\n"
        ).encode()
        + body
    )
    await writer.drain()
    status_line = await reader.readline()
    fields: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode().partition(":")
        fields[key.strip().lower()] = value.strip()
    data = await reader.readexactly(int(fields["content-length"]))
    return int(status_line.split()[1]), fields, data


async def test_certificate_hot_reload_without_restart(running: Running) -> None:
    old_reader, old_writer, first_serial = await _open(running)
    assert first_serial == running.tls.serial
    # Rotate: a new serving certificate from the same CA, loaded into the live context.
    cert, key = generate_serving_cert(
        running.certs.ca_cert, running.certs.ca_key, HOSTS, datetime.now(UTC)
    )
    assert running.tls.reload(cert, key) is True
    new_serial = x509.load_pem_x509_certificate(cert).serial_number
    assert new_serial != first_serial
    # A new handshake sees the new certificate...
    reader, writer, serial = await _open(running)
    assert serial == new_serial == running.tls.serial
    status, _, data = await _raw_request(reader, writer, json.dumps(review(trainjob())).encode())
    assert status == 200 and json.loads(data)["response"]["allowed"] is True
    # ...and the connection opened before the reload keeps working on the old one.
    status, _, data = await _raw_request(
        old_reader, old_writer, json.dumps(review(trainjob(), uid="old-conn")).encode()
    )
    assert status == 200 and json.loads(data)["response"]["uid"] == "old-conn"
    for w in (writer, old_writer):
        w.close()
        await w.wait_closed()
    # aiohttp, verifying against the CA, is happy with the new certificate.
    out = await post_review(running, PATH_VALIDATE_TRAINJOB, review(trainjob(), uid="after"))
    assert out["allowed"] is True


async def test_rotator_rotates_the_served_certificate(running: Running) -> None:
    """The rotator drives the same live context: the Secret holds a serving certificate that is
    due (issued 300 days ago), so the rotator signs a new one with the same CA, stores it and
    loads it; the next handshake sees it, and the client (trusting the CA) accepts it."""
    now = datetime.now(UTC)
    ca, ca_key = running.certs.ca_cert, running.certs.ca_key
    stale_cert, stale_key = generate_serving_cert(ca, ca_key, HOSTS, now - timedelta(days=300))
    secret: dict[str, bytes] = dict(CertBundle(ca, ca_key, stale_cert, stale_key).secret_data())

    async def read_secret() -> SecretState:
        return SecretState(dict(secret), "1")

    async def write_secret(data: Mapping[str, bytes], version: str | None) -> bool:
        secret.clear()
        secret.update(data)
        return True

    rotator = CertRotator(
        hosts=HOSTS,
        reload=running.tls.reload,
        now=lambda: now,
        read_secret=read_secret,
        write_secret=write_secret,
    )
    *_, before = await _open(running)
    assert await rotator.sync() is Action.NEW_CERT
    assert secret["ca.crt"] == ca and secret["tls.crt"] != stale_cert
    reader, writer, after = await _open(running)
    assert after != before
    assert after == x509.load_pem_x509_certificate(secret["tls.crt"]).serial_number
    status, _, _ = await _raw_request(reader, writer, json.dumps(review(trainjob())).encode())
    assert status == 200
    writer.close()
    await writer.wait_closed()
    assert await rotator.sync() is Action.REUSE


async def test_oversized_body_answered_before_it_is_sent(running: Running) -> None:
    reader, writer, _ = await _open(running)
    # Only the headers go out: the server must answer without waiting for 10 MB.
    status, fields, data = await asyncio.wait_for(
        _raw_request(reader, writer, b"", headers="Content-Length: 10000000"), 10
    )
    assert status == 413
    assert fields["connection"] == "close"
    body = json.loads(data)
    assert body["reason"] == "RequestEntityTooLarge"
    writer.close()
    await writer.wait_closed()


class GatedLookup(StaticLookup):
    """Holds runtime lookups until released, to have a request in flight."""

    def __init__(self, runtimes: list[Runtime]) -> None:
        super().__init__(runtimes=runtimes)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def runtime(
        self, kind: str, namespace: str, name: str
    ) -> tuple[Runtime | None, str | None]:
        self.entered.set()
        await self.release.wait()
        return await super().runtime(kind, namespace, name)

    async def jobset(self, namespace: str, name: str) -> JobSet | None:
        return None


async def test_graceful_shutdown_finishes_in_flight_requests() -> None:
    certs = generate_bundle(HOSTS, datetime.now(UTC))
    tls = ServerTLS()
    tls.reload(certs.cert, certs.key)
    lookup = GatedLookup(_runtimes())
    app = create_app(lookup, now=lambda: NOW)
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    ready, stop = asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(
        serve(
            app,
            "127.0.0.1",
            port,
            tls.context,
            ready=ready,
            stop=stop,
            sock=sock,
            handle_signals=False,
        )
    )
    await asyncio.wait_for(ready.wait(), 10)
    run = Running(None, tls, certs, client_context(certs.ca_cert))  # type: ignore[arg-type]
    connector = aiohttp.TCPConnector(ssl=run.client_ssl)
    async with aiohttp.ClientSession(connector=connector) as session:
        request = asyncio.create_task(
            session.post(
                f"https://127.0.0.1:{port}{PATH_VALIDATE_TRAINJOB}", json=review(trainjob())
            )
        )
        await asyncio.wait_for(lookup.entered.wait(), 10)
        stop.set()  # shutdown starts with the request in flight
        lookup.release.set()
        resp = await asyncio.wait_for(request, 10)
        assert resp.status == 200
        assert (await resp.json())["response"]["allowed"] is True
        resp.release()
    await asyncio.wait_for(server, 10)
    # The port is closed: new connections are refused.
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
