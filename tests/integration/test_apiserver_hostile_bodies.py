"""Hostile request bodies to the embedded API server: refused fast with a 400 Status naming
the problem, nothing stored, and the server keeps answering (docs/input-limits.md)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.e2e.hostile import billion_laughs
from trainer.local.apiserver import APIServer

APPLY = "application/apply-patch+yaml"
CM = "/api/v1/namespaces/default/configmaps"


def _configmap_yaml(name: str, extra: str = "") -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{extra}"


BOMB = _configmap_yaml("bomb") + "data:\n  k: x\n" + billion_laughs().split("spec:\n", 1)[1]

# name -> (content type, body, words the Status message must contain)
BODIES: dict[str, tuple[str, bytes, str]] = {
    "alias-bomb": (APPLY, BOMB.encode(), "aliases expand"),
    "recursive-alias": (APPLY, (_configmap_yaml("rec") + "x: &a [*a]\n").encode(), "alias"),
    "deep-yaml": (APPLY, (_configmap_yaml("deep") + "x: " + "[" * 50_000).encode(), "deeper"),
    "duplicate-key": (APPLY, (_configmap_yaml("dup") + "data: {}\ndata: {}\n").encode(), "dup"),
    "yaml-int-5000": (APPLY, (_configmap_yaml("i") + "x: " + "9" * 5000 + "\n").encode(), "64"),
    "yaml-non-utf8": (
        APPLY,
        (_configmap_yaml("u") + "data: {k: \xff}\n").encode("latin-1"),
        "UTF-8",
    ),
    "deep-json": ("application/json", b'{"a":' * 20_000 + b"1" + b"}" * 20_000, "deeper"),
    "json-int-5000": (
        "application/json",
        b'{"metadata": {"name": "' + b'j"}, "x": ' + b"9" * 5000 + b"}",
        "64",
    ),
    "json-nan": ("application/json", b'{"metadata": {"name": "n"}, "x": NaN}', "NaN"),
    "json-utf16": ("application/json", '{"metadata": {"name": "w"}}'.encode("utf-16"), "UTF-8"),
    "json-nul": ("application/json", b'{"metadata": {"name": "z\x00"}}', "NUL"),
}


@pytest.fixture
async def server() -> AsyncIterator[APIServer]:
    srv = APIServer()
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.mark.parametrize("name", list(BODIES))
async def test_hostile_body_is_refused_fast_and_nothing_is_stored(
    server: APIServer, name: str
) -> None:
    content_type, body, words = BODIES[name]
    connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
    async with aiohttp.ClientSession(connector=connector, headers=server.auth_headers()) as session:
        started = time.monotonic()
        if content_type == APPLY:
            url = f"{server.url}{CM}/{name}?fieldManager=test"
            request = session.patch(url, data=body, headers={"Content-Type": content_type})
        else:
            request = session.post(
                f"{server.url}{CM}", data=body, headers={"Content-Type": content_type}
            )
        async with request as resp:
            status = await resp.json()
            elapsed = time.monotonic() - started
            assert resp.status in (400, 413, 422), status
        assert status["kind"] == "Status" and status["status"] == "Failure"
        assert words.lower() in status["message"].lower(), status["message"]
        assert elapsed < 2.0, f"{elapsed:.2f}s"
        async with session.get(f"{server.url}{CM}") as listing:
            names = [o["metadata"]["name"] for o in (await listing.json())["items"]]
            assert names == [], names
        # The server still answers and still applies a normal YAML body.
        good = _configmap_yaml("fine", "data: {k: v}\n").encode()
        async with session.patch(
            f"{server.url}{CM}/fine?fieldManager=test",
            data=good,
            headers={"Content-Type": APPLY},
        ) as ok:
            assert ok.status in (200, 201), await ok.text()
            assert (await ok.json())["data"] == {"k": "v"}
