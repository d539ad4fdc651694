"""Sending the cases of :mod:`tests.crd_cases` to an API server over HTTP, the same requests to
the local API server and to a real kube-apiserver (tests/cluster/test_crd_validation.py).

A create is a ``POST ...?dryRun=All``; an update first creates the case's old object for real,
then ``PUT``s the new one over it (to ``/status`` for a status case) with ``dryRun=All``, and
deletes the old one. The answer is the HTTP status, the ``Status`` message of a refusal, the
``Warning`` headers and, for an accepted write, the object as the server would store it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp

from tests.crd_cases import Case
from trainer.api import crds
from trainer.local.apiserver import APIServer

GROUP = "trainer.kubeflow.org"
PLURALS = {
    "TrainJob": "trainjobs",
    "TrainingRuntime": "trainingruntimes",
    "ClusterTrainingRuntime": "clustertrainingruntimes",
}
# Set by the server on every write, never by the case: left out when two answers are compared.
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


@dataclass(frozen=True)
class Endpoint:
    """Where an API server listens and how to authenticate to it."""

    url: str
    ssl_context: ssl.SSLContext
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """What an API server answered to a case: ``causes`` are a 422's ``details.causes`` as
    ``field: message``."""

    code: int
    message: str = ""
    warnings: tuple[str, ...] = ()
    stored: dict[str, Any] | None = None
    causes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code < 300

    def sorted_message(self) -> str:
        """The message with its errors in sorted order, when it is made of its causes as
        kube-apiserver makes it (``[a, b]``, a repeated one once): kube-apiserver lists the
        errors of sibling fields in Go's map order, which changes from one request to the
        next. Any other message as it is."""
        rendered = list(dict.fromkeys(self.causes))
        if len(rendered) < 2:
            return self.message
        body = "[" + ", ".join(rendered) + "]"
        if not self.message.endswith(body):
            return self.message
        return self.message[: -len(body)] + "[" + ", ".join(sorted(rendered)) + "]"


def object_path(obj: dict[str, Any], name: str = "") -> str:
    plural = PLURALS[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    base = f"/apis/{GROUP}/v1alpha1"
    base += f"/namespaces/{namespace}/{plural}" if namespace else f"/{plural}"
    return f"{base}/{quote(name)}" if name else base


def comparable(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored object without what the server sets on every write."""
    if stored is None:
        return None
    out = copy.deepcopy(stored)
    for key in SERVER_SET:
        out.get("metadata", {}).pop(key, None)
    return out


async def _request(
    http: aiohttp.ClientSession,
    endpoint: Endpoint,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    query: str = "",
) -> tuple[int, dict[str, Any], tuple[str, ...]]:
    url = endpoint.url + path + (f"?{query}" if query else "")
    headers = {"Accept": "application/json", **endpoint.headers}
    data = None if body is None else json.dumps(body)
    if data is not None:
        headers["Content-Type"] = "application/json"
    async with http.request(
        method, url, data=data, headers=headers, ssl=endpoint.ssl_context
    ) as resp:
        decoded: dict[str, Any] = json.loads(await resp.read() or b"{}")
        return resp.status, decoded, tuple(resp.headers.getall("Warning", []))


def _answer(code: int, body: dict[str, Any], warnings: tuple[str, ...]) -> Answer:
    if code >= 300:
        causes = (body.get("details") or {}).get("causes") or []
        shown = tuple(f"{c.get('field')}: {c.get('message')}" for c in causes)
        return Answer(code, str(body.get("message", "")), warnings, causes=shown)
    return Answer(code, "", warnings, comparable(body))


async def send(http: aiohttp.ClientSession, endpoint: Endpoint, case: Case) -> Answer:
    """The server's answer to ``case`` (nothing it stores outlives the call)."""
    query = f"dryRun=All&fieldValidation={case.field_validation}"
    if case.old is None:
        code, body, warnings = await _request(
            http, endpoint, "POST", object_path(case.obj), case.obj, query
        )
        return _answer(code, body, warnings)
    name = case.old["metadata"]["name"]
    path = object_path(case.old, name)
    code, old, _ = await _request(http, endpoint, "POST", object_path(case.old), case.old)
    if code != 201:
        raise AssertionError(f"{case.id}: creating the old object: {code} {old.get('message')}")
    try:
        new = copy.deepcopy(case.obj)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if case.status:
            path += "/status"
        code, body, warnings = await _request(http, endpoint, "PUT", path, new, query)
        return _answer(code, body, warnings)
    finally:
        await _request(http, endpoint, "DELETE", object_path(case.old, name))


async def answers(
    endpoint: Endpoint, cases: Sequence[Case], parallel: int = 8
) -> dict[str, Answer]:
    """Every case's answer, by case id, ``parallel`` requests at a time."""
    gate = asyncio.Semaphore(parallel)
    async with aiohttp.ClientSession() as http:

        async def one(case: Case) -> tuple[str, Answer]:
            async with gate:
                return case.id, await send(http, endpoint, case)

        return dict(await asyncio.gather(*(one(c) for c in cases)))


@contextlib.asynccontextmanager
async def local_api_server() -> AsyncIterator[Endpoint]:
    """The local API server with our CRDs installed (and no webhook), in this event loop."""
    server = APIServer()
    for crd in crds.trainer_crds():
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    await server.start()
    try:
        yield Endpoint(server.url, server.client_ssl_context(), server.auth_headers())
    finally:
        await server.stop()
