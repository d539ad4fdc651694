"""Request bodies in, JSON and Status bodies out: the encoding rules every handler shares.

A body is read within the server's size limit and decoded by its media type (JSON, YAML for
apply and ``application/yaml``, Kubernetes protobuf), through the safe loaders of
:mod:`trainer.machinery.safeload`; a body that cannot be decoded is a 400 naming the format. An
:class:`~trainer.local.apiserver.errors.APIError` is answered as a ``Status`` (with
``Retry-After`` on 429), and warnings as ``Warning: 299`` headers.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import yaml
from aiohttp import web
from multidict import CIMultiDict

from trainer.local.apiserver import protobuf
from trainer.local.apiserver.errors import APIError, PageNotFound, bad_request, too_large
from trainer.local.apiserver.patch import APPLY
from trainer.machinery.safeload import Limits, load_json, load_yaml


def manager_from_agent(agent: str) -> str:
    """Kubernetes defaults the field manager to the user agent's program name."""
    return agent.split("/", 1)[0] if agent else "unknown"


async def read_body(request: web.Request, max_body: int) -> Any:
    """The decoded body of a write (400 when empty or malformed, 413 when too large)."""
    if request.content_length is not None and request.content_length > max_body:
        raise too_large(max_body)
    raw = await request.read()
    if len(raw) > max_body:
        raise too_large(max_body)
    if not raw:
        raise bad_request("the request body is empty")
    if request.content_type == protobuf.CONTENT_TYPE:
        return protobuf.decode(raw)
    try:
        if request.content_type in (APPLY, "application/yaml"):
            return load_yaml(raw, "body", Limits(max_bytes=max_body))
        return load_json(raw, "body", Limits(max_bytes=max_body))
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(
            f"the request body is not valid "
            f"{'YAML' if request.content_type == APPLY else 'JSON'}: {exc}"
        ) from None


def json_or_empty(raw: bytes, content_type: str = "application/json") -> Any:
    """An optional JSON (or protobuf) body (DeleteOptions): ``{}`` when there is none."""
    if not raw:
        return {}
    if content_type == protobuf.CONTENT_TYPE:
        return protobuf.decode(raw)
    try:
        return load_json(raw, "body")
    except ValueError:
        raise bad_request("the request body is not valid JSON") from None


def warning_headers(warnings: list[str]) -> list[str]:
    """``Warning: 299 - "text"`` values, one header each, as kube-apiserver writes them
    (k8s.io/apimachinery/pkg/util/net.NewWarningHeader): a backslash before each ``"`` and
    ``\\`` (unescaped quotes make kubectl drop the warning), a repeated text once, and none
    for a text with a control character (a field named ``a\\nb``), which it cannot quote and
    so never sends."""
    out: list[str] = []
    for text in dict.fromkeys(warnings):
        if not text or any(unicodedata.category(c) == "Cc" for c in text):
            continue
        out.append('299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return out


def json_response(
    body: Any, *, status: int = 200, warnings: list[str] | None = None
) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict()
    for value in warning_headers(warnings or []):
        headers.add("Warning", value)
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def status_response(err: APIError) -> web.Response:
    """The Status of ``err``. ``Retry-After`` is its ``details.retryAfterSeconds`` when it has
    one, as kube-apiserver's ``ErrorNegotiated`` sets it; a bare 429 says 1 s."""
    if isinstance(err, PageNotFound):
        return web.Response(text=err.TEXT, status=404, content_type="text/plain")
    retry = err.details.get("retryAfterSeconds") if err.details else None
    headers = (
        {"Retry-After": str(retry)}
        if retry
        else {"Retry-After": "1"}
        if err.code == 429 and not err.details
        else {}
    )
    return web.Response(
        body=json.dumps(err.status()).encode(),
        status=err.code,
        content_type="application/json",
        headers=headers,
    )
