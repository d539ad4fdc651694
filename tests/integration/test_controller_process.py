"""The whole controller process against the embedded API server: the real webhook registered
through webhook configurations, probes and metrics, and two replicas under leader election."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.builders import trainjob
from tests.integration.harness import Plane, local_plane, report_jobset_status
from tests.integration.test_webhook_cluster import configurations
from trainer.cli.process import ProcessOptions, ProcessState, run_controller
from trainer.controller.config import parse_config
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def config(webhook_port: int, *, leader: bool = False) -> Any:
    text = f"""
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
webhook: {{port: {webhook_port}, host: 127.0.0.1}}
metrics: {{bindAddress: "127.0.0.1:0"}}
health: {{healthProbeBindAddress: "127.0.0.1:0"}}
"""
    if leader:
        text += """
leaderElection:
  leaderElect: true
  resourceNamespace: kubeflow-system
  leaseDuration: 2s
  renewDeadline: 1500ms
  retryPeriod: 200ms
"""
    return parse_config(text)


class Replica:
    def __init__(self, plane: Plane, cfg: Any, options: ProcessOptions) -> None:
        self.plane, self.cfg, self.options = plane, cfg, options
        self.stop = asyncio.Event()
        self.ready = asyncio.Event()
        self.state = ProcessState()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
            self.plane.server.write_kubeconfig(kubeconfig.name)
            self.api = await new_api_client(kubeconfig.name)
        self.task = asyncio.create_task(
            run_controller(
                self.api,
                self.cfg,
                self.stop,
                options=self.options,
                ready=self.ready,
                state=self.state,
            )
        )
        await asyncio.wait_for(self.ready.wait(), 30)

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await self.task
        await self.api.close()


@pytest.fixture
async def plane() -> AsyncIterator[Plane]:
    async with local_plane() as p:
        p.server.storage.create_unadmitted(
            "v1", "Namespace", {"metadata": {"name": "kubeflow-system"}}
        )
        yield p


async def test_controller_with_webhook_probes_and_metrics(plane: Plane) -> None:
    port = free_port()
    for cfg in configurations(port):
        plane.server.storage.create_unadmitted(cfg["apiVersion"], cfg["kind"], cfg)
    replica = Replica(
        plane, config(port), ProcessOptions(webhook=True, webhook_extra_hosts=("127.0.0.1",))
    )
    await replica.start()
    try:
        async with aiohttp.ClientSession() as http:
            readyz = f"{replica.state.health_url}/readyz"

            async def ready() -> bool:
                async with http.get(readyz) as resp:
                    return resp.status == 200

            # Ready once the webhook serves its certificate (the caches synced before start
            # returned).
            await asyncio.wait_for(replica.state.webhook_serving.wait(), 30)
            assert await ready()
            # The webhook denies an invalid TrainJob before the controller ever sees it.
            bad = trainjob("bad", trainer={"env": [{"name": "PET_NNODES", "value": "1"}]})
            with pytest.raises(APIError) as err:
                await plane.kube.create(bad)
            assert err.value.status == 403
            await plane.kube.create(trainjob("good", trainer={"numNodes": 2}))
            await report_jobset_status(plane, "default", "good")  # as JobSet would
            await plane.until(
                lambda: (plane.trainjob("default", "good") or {}).get("status"), what="status"
            )
            # metrics.secureServing (the default): HTTPS on the webhook's certificate.
            metrics_url = str(replica.state.metrics_url)
            assert metrics_url.startswith("https://127.0.0.1:")
            secret = plane.get("v1", "secrets", "kubeflow-system", "kubeflow-trainer-webhook-cert")
            assert secret is not None
            ca = ssl.create_default_context(
                cadata=base64.b64decode(secret["data"]["ca.crt"]).decode()
            )
            ca.check_hostname = False  # the certificate names the Service, not 127.0.0.1
            async with http.get(f"{metrics_url}/metrics", ssl=ca) as resp:
                text = await resp.text()
            with pytest.raises(aiohttp.ClientError):  # no plain HTTP on the metrics port
                async with http.get(metrics_url.replace("https://", "http://") + "/metrics"):
                    pass
            assert 'trainer_reconcile_total{controller="trainjob",result="success"}' in text
            assert "trainer_api_requests_total" in text
            assert "trainer_leader 1.0" in text
    finally:
        await replica.close()


async def test_two_replicas_only_the_leader_reconciles_and_hands_over(plane: Plane) -> None:
    opts = ProcessOptions(webhook=False)
    first = Replica(plane, config(free_port(), leader=True), opts)
    second = Replica(plane, config(free_port(), leader=True), opts)
    await first.start()
    await second.start()
    try:

        def holder() -> str:
            lease = plane.get(
                "coordination.k8s.io/v1", "leases", "kubeflow-system", "trainer.kubeflow.org"
            )
            return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

        leader_id = await plane.until(holder, what="a leader")
        leader, follower = (
            (first, second)
            if first.state.elector and first.state.elector.identity == leader_id
            else (second, first)
        )
        assert leader.state.elector is not None and follower.state.elector is not None
        # The Lease is written before the winner has read the answer: await its own view.
        await asyncio.wait_for(leader.state.elector.leading.wait(), 5)
        assert not follower.state.elector.is_leader
        await plane.kube.create(trainjob("one"))
        await plane.until(lambda: plane.jobset("default", "one"), what="JobSet from the leader")
        writers = {
            r.user_agent for r in plane.server.storage.hooks.writes() if r.resource == "jobsets"
        }
        assert len(writers) == 1
        # Stop the leader: the follower takes over (graceful release: at once).
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        await leader.close()
        new_id = await plane.until(
            lambda: (h := holder()) and h != leader_id and h, what="handover"
        )
        assert follower.state.elector is not None and new_id == follower.state.elector.identity
        await plane.kube.create(trainjob("two"))
        await plane.until(lambda: plane.jobset("default", "two"), what="JobSet from the new leader")
        assert loop.time() - stopped_at < 2.0  # within the lease duration
    finally:
        for replica in (first, second):
            if not replica.stop.is_set():
                await replica.close()


async def test_tls_settings_reach_the_webhook_and_metrics_servers(plane: Plane) -> None:
    """tls.minVersion, tls.cipherSuites and tls.nextProtos of the Configuration are what the
    webhook and the metrics server negotiate (our certificates use ECDSA keys)."""
    port = free_port()
    for cfg in configurations(port):
        plane.server.storage.create_unadmitted(cfg["apiVersion"], cfg["kind"], cfg)
    text = f"""
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
webhook: {{port: {port}, host: 127.0.0.1}}
metrics: {{bindAddress: "127.0.0.1:0"}}
health: {{healthProbeBindAddress: "127.0.0.1:0"}}
tls:
  minVersion: VersionTLS12
  cipherSuites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]
  nextProtos: [h2, http/1.1]
"""
    replica = Replica(
        plane, parse_config(text), ProcessOptions(webhook=True, webhook_extra_hosts=("127.0.0.1",))
    )
    await replica.start()
    try:
        await asyncio.wait_for(replica.state.webhook_serving.wait(), 30)
        metrics_port = await plane.until(
            lambda: replica.state.metrics_url and int(replica.state.metrics_url.rsplit(":", 1)[1]),
            what="metrics served",
        )

        async def handshake(target: int, cipher: str) -> tuple[str | None, str | None]:
            client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
            client.maximum_version = ssl.TLSVersion.TLSv1_2  # cipher lists apply up to 1.2
            client.set_ciphers(cipher)
            client.set_alpn_protocols(["h2", "http/1.1"])
            _reader, writer = await asyncio.open_connection("127.0.0.1", target, ssl=client)
            try:
                tls = writer.get_extra_info("ssl_object")
                return tls.cipher()[0], tls.selected_alpn_protocol()
            finally:
                writer.close()

        for target in (port, metrics_port):
            # The allowed suite, and HTTP/1.1 (h2 is not offered: the servers do not speak it).
            assert await handshake(target, "ECDHE-ECDSA-AES128-GCM-SHA256") == (
                "ECDHE-ECDSA-AES128-GCM-SHA256",
                "http/1.1",
            )
            with pytest.raises((ssl.SSLError, ConnectionError)):  # no shared cipher
                await handshake(target, "ECDHE-ECDSA-AES256-GCM-SHA384")
    finally:
        await replica.close()


async def test_metrics_auth_lets_only_authorized_service_accounts_scrape(plane: Plane) -> None:
    """metrics.auth.enabled: the bearer token is authenticated (TokenReview) and its user
    authorized for ``get /metrics`` (SubjectAccessReview, answered by RBAC)."""
    kube = plane.kube
    namespaces = r.GVR("", "v1", "namespaces", False, "Namespace")
    accounts = r.GVR("", "v1", "serviceaccounts", True, "ServiceAccount")
    await kube.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mon"}}, gvr=namespaces
    )
    for name in ("scraper", "nosy"):
        await kube.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": "mon"},
            },
            gvr=accounts,
        )
    rbac = "rbac.authorization.k8s.io/v1"
    plane.server.storage.create_unadmitted(
        rbac,
        "ClusterRole",
        {
            "metadata": {"name": "metrics-reader"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        },
    )
    plane.server.storage.create_unadmitted(
        rbac,
        "ClusterRoleBinding",
        {
            "metadata": {"name": "scraper-reads-metrics"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "metrics-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "mon"}],
        },
    )

    async def token(account: str) -> str:
        answer = await kube.request(
            "create",
            "serviceaccounts/token",
            "POST",
            f"/api/v1/namespaces/mon/serviceaccounts/{account}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        return str(answer["status"]["token"])

    text = """
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
metrics: {bindAddress: "127.0.0.1:0", secureServing: false, auth: {enabled: true}}
health: {healthProbeBindAddress: "127.0.0.1:0"}
"""
    replica = Replica(plane, parse_config(text), ProcessOptions(webhook=False))
    await replica.start()
    try:
        url = f"{replica.state.metrics_url}/metrics"
        async with aiohttp.ClientSession() as http:

            async def scrape(headers: dict[str, str]) -> tuple[int, str]:
                async with http.get(url, headers=headers) as resp:
                    return resp.status, await resp.text()

            assert (await scrape({}))[0] == 401
            assert (await scrape({"Authorization": "Bearer not-a-token"}))[0] == 401
            status, body = await scrape({"Authorization": f"Bearer {await token('nosy')}"})
            assert status == 403
            assert 'user "system:serviceaccount:mon:nosy" cannot get path "/metrics"' in body
            status, body = await scrape({"Authorization": f"Bearer {await token('scraper')}"})
            assert status == 200 and "trainer_reconcile_total" in body
    finally:
        await replica.close()
