"""Non-resource endpoints: version, API discovery, OpenAPI documents and health checks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from trainer.local.apiserver.http import openapi

if TYPE_CHECKING:
    from trainer.local.apiserver.resources import Registry

KUBE_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-trainer-local"}


def version() -> dict[str, Any]:
    return {
        **KUBE_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23 (python)",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _server_address(address: str) -> list[dict[str, str]]:
    return [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]


def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": _server_address(address),
    }


def _group(address: str, group: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
        "serverAddressByClientCIDRs": _server_address(address),
    }


def api_groups(registry: Registry, address: str) -> dict[str, Any]:
    groups = [_group(address, g, vs) for g, vs in sorted(registry.group_versions().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [rt for rt in registry if (rt.group, rt.version) == (group, version)]
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        resources.extend(rt.discovery())
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def non_resource(
    registry: Registry, address: str, request: web.Request
) -> dict[str, Any] | web.StreamResponse | None:
    parts = [p for p in request.path.split("/") if p]
    if parts in (["version"],):
        return version()
    if parts in (["healthz"], ["readyz"], ["livez"]):
        return web.Response(text="ok", content_type="text/plain")
    if parts == ["api"]:
        return api_versions(address)
    if parts == ["apis"]:
        return api_groups(registry, address)
    if len(parts) == 2 and parts[0] == "api":
        return resource_list(registry, "", parts[1])
    if len(parts) == 2 and parts[0] == "apis":
        versions = registry.group_versions().get(parts[1])
        return _group(address, parts[1], versions) if versions else None
    if len(parts) == 3 and parts[0] == "apis":
        return resource_list(registry, parts[1], parts[2])
    if parts and parts[0] == "openapi":
        return openapi.serve(registry, parts[1:], request)
    return None
