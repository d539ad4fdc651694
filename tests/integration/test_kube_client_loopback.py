"""A client of a loopback API server ignores proxy variables, as client-go does; a cluster
client keeps honouring them (trainer/kube/client.py, docs/local-plane.md "Throughput").

The "proxy" is a listener on 127.0.0.1 that counts the connections it gets and drops them:
with HTTP_PROXY / HTTPS_PROXY pointing at it and no NO_PROXY, requests to the local API
server must still succeed and the proxy must see nothing."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from trainer.kube import resources as r
from trainer.kube.client import is_loopback, new_api_client
from trainer.kube.rest import APIError, Kube
from trainer.local.apiserver import APIServer

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture
async def proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[int]]:
    """A proxy every proxy variable points at; yields the list of connections it got."""
    hits: list[int] = []

    async def drop(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append(1)
        writer.close()

    server = await asyncio.start_server(drop, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    for var in PROXY_VARS:
        monkeypatch.setenv(var, f"http://127.0.0.1:{port}")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    try:
        yield hits
    finally:
        server.close()
        await server.wait_closed()


async def test_local_api_server_is_reached_directly_despite_proxy_variables(
    proxy: list[int],
) -> None:
    server = APIServer()
    await server.start()
    try:
        with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
            server.write_kubeconfig(kubeconfig.name)
            api = await new_api_client(kubeconfig.name)
        try:
            kube = Kube(api, timeout=5.0)
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "direct", "namespace": "default"},
                "data": {"k": "v"},
            }
            created = await kube.create(body)
            assert created["data"] == {"k": "v"}
            items, _ = await kube.list(r.CONFIGMAPS, "default")
            assert [i["metadata"]["name"] for i in items] == ["direct"]
        finally:
            await api.close()
    finally:
        await server.stop()
    assert proxy == []


async def test_a_cluster_client_still_goes_through_the_proxy(
    proxy: list[int], tmp_path: Path
) -> None:
    # 10.255.255.1 is never reached: the proxy answers first, by dropping the connection.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://10.255.255.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    api = await new_api_client(str(kubeconfig))
    try:
        with pytest.raises(APIError) as failed:
            await Kube(api, timeout=5.0).list(r.CONFIGMAPS, "default")
        assert failed.value.status == 0  # no HTTP answer: the proxy dropped the connection
    finally:
        await api.close()
    assert proxy  # (aiohttp may retry a dropped connection once)


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("https://127.0.0.1:6443", True),
        ("http://127.3.4.5", True),
        ("https://localhost:6443", True),
        ("https://[::1]:6443", True),
        ("https://10.0.0.1:6443", False),
        ("https://kubernetes.default.svc", False),
        ("https://[2001:db8::1]:443", False),
        ("", False),
    ],
)
def test_is_loopback(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback
