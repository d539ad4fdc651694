"""Sending the cases of :mod:`tests.jobset_webhook_cases` to an API server over HTTP: a create
is a ``POST ...?dryRun=All``; an update creates the case's JobSet for real, ``PUT``s what the
server stored, edited, back over it with ``dryRun=All``, and deletes it. The answer is the HTTP
status, the ``Status`` message of a refusal and, for an accepted write, the object as the
server would store it."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp

from tests.jobset_webhook_cases import CASES, CREATED, GROUP_VERSION, Case


@dataclass(frozen=True)
class Endpoint:
    """Where an API server listens, how to authenticate to it, and the namespace to use."""

    url: str
    ssl_context: ssl.SSLContext
    namespace: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    code: int
    message: str = ""
    stored: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.code < 300


def _path(endpoint: Endpoint, name: str = "") -> str:
    base = f"{endpoint.url}/apis/{GROUP_VERSION}/namespaces/{endpoint.namespace}/jobsets"
    return f"{base}/{quote(name)}" if name else base


async def _request(
    http: aiohttp.ClientSession,
    endpoint: Endpoint,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    headers = {"Accept": "application/json", **endpoint.headers}
    async with http.request(
        method, url, json=body, headers=headers, ssl=endpoint.ssl_context
    ) as resp:
        decoded: dict[str, Any] = json.loads(await resp.read() or b"{}")
        return resp.status, decoded


async def send(http: aiohttp.ClientSession, endpoint: Endpoint, case: Case) -> Answer:
    """The server's answer to ``case`` (nothing it stores outlives the call)."""
    dry_run = "?dryRun=All"
    if case.change is None:
        code, body = await _request(http, endpoint, "POST", _path(endpoint) + dry_run, case.obj)
    else:
        name = case.obj["metadata"]["name"]
        code, stored = await _request(http, endpoint, "POST", _path(endpoint), case.obj)
        if code != CREATED:
            raise AssertionError(f"{case.id}: creating the old JobSet: {code} {stored}")
        try:
            case.change(stored)
            url = _path(endpoint, name) + dry_run
            code, body = await _request(http, endpoint, "PUT", url, stored)
        finally:
            await _request(http, endpoint, "DELETE", _path(endpoint, name))
    if code >= 300:
        return Answer(code, str(body.get("message", "")))
    return Answer(code, stored=body)


async def answers(
    endpoint: Endpoint, cases: Sequence[Case] = CASES, parallel: int = 8
) -> dict[str, Answer]:
    """Every case's answer, by case id, ``parallel`` requests at a time."""
    gate = asyncio.Semaphore(parallel)
    async with aiohttp.ClientSession() as http:

        async def one(case: Case) -> tuple[str, Answer]:
            async with gate:
                return case.id, await send(http, endpoint, case)

        return dict(await asyncio.gather(*(one(c) for c in cases)))
