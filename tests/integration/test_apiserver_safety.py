"""The embedded API server's safety options: loopback only, a given bearer token, body cap."""

from __future__ import annotations

import aiohttp
import pytest

from trainer.local.apiserver import APIServer


def test_it_refuses_to_listen_beyond_loopback() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        APIServer(host="0.0.0.0")


@pytest.mark.parametrize("token", ["", "two words", "line\nbreak"])
def test_a_token_that_cannot_be_sent_in_a_header_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="token"):
        APIServer(token=token)


async def test_a_given_bearer_token_is_required() -> None:
    server = APIServer(token="s3cret")
    await server.start()
    try:
        url = f"{server.url}/api/v1/namespaces/default/configmaps"
        connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get(url) as anonymous:
                assert anonymous.status == 401
                assert (await anonymous.json())["reason"] == "Unauthorized"
            async with session.get(url, headers={"Authorization": "Bearer wrong"}) as wrong:
                assert wrong.status == 401
            async with session.get(url, headers={"Authorization": "Bearer s3cret"}) as ok:
                assert ok.status == 200
        assert server.kubeconfig()["users"][0]["user"] == {"token": "s3cret"}
        assert server.auth_headers() == {"Authorization": "Bearer s3cret"}
    finally:
        await server.stop()


async def test_request_bodies_are_capped() -> None:
    server = APIServer(max_body=1024)
    await server.start()
    try:
        url = f"{server.url}/api/v1/namespaces/default/configmaps"
        big = {"metadata": {"name": "big"}, "data": {"k": "x" * 4096}}
        connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
        async with (
            aiohttp.ClientSession(connector=connector, headers=server.auth_headers()) as session,
            session.post(url, json=big) as resp,
        ):
            assert resp.status == 413
            assert (await resp.json())["reason"] == "RequestEntityTooLarge"
        assert server.storage.get_object("v1", "configmaps", "default", "big") is None
    finally:
        await server.stop()
