"""OpenAPI documents (v2 and v3) describing the served resources, for kubectl."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from trainer.local.apiserver.server import APIServer


def serve(server: APIServer, parts: list[str], request: web.Request) -> dict[str, Any] | None:
    if parts == ["v2"]:
        return {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": {},
            "definitions": {},
        }
    if parts == ["v3"]:
        return {"paths": {}}
    return None
