"""A small JSON REST client for the embedded API server (the executor talks to it only through
the API, like a real controller; it does not use the controller's client). It connects over
HTTPS trusting the server's CA (``ssl_context``) and sends the plane's bearer token."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
API_TIMEOUT = 10.0
"""How long one call of the executor's parts may take before it counts as failed."""


class ClientError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"{status}: {message}")


TRANSIENT = (ClientError, aiohttp.ClientError, OSError, TimeoutError, ValueError)
"""Errors of one API call that a later attempt may not meet again (logged, then retried or
dropped by the caller)."""


def path(
    api_version: str, plural: str, namespace: str | None = None, name: str = "", sub: str = ""
) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
    if sub:
        base += f"/{sub}"
    return base


class LocalClient:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        user_agent: str = "trainer-executor",
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"User-Agent": user_agent}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        connector = aiohttp.TCPConnector(ssl=ssl_context) if ssl_context is not None else None
        self.session = aiohttp.ClientSession(headers=headers, connector=connector)

    async def close(self) -> None:
        await self.session.close()

    async def request(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> Any:
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body).encode())
        )
        async with self.session.request(
            method,
            self.url + url_path,
            data=data,
            params=params,
            headers={"Content-Type": content_type},
        ) as resp:
            raw = await resp.read()
            try:
                decoded = json.loads(raw) if raw else None
            except ValueError:
                decoded = raw.decode(errors="replace")
            if resp.status >= 400:
                raise ClientError(resp.status, decoded)
            return decoded

    async def get(
        self, api_version: str, plural: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self.request(
                "GET", path(api_version, plural, namespace, name)
            )
            return result
        except ClientError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self,
        api_version: str,
        plural: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        params = {"labelSelector": label_selector} if label_selector else None
        result = await self.request("GET", path(api_version, plural, namespace), params=params)
        return list(result.get("items") or []), str(result["metadata"]["resourceVersion"])

    async def create(self, obj: dict[str, Any], plural: str) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        result: dict[str, Any] = await self.request(
            "POST", path(obj["apiVersion"], plural, meta.get("namespace")), obj
        )
        return result

    async def apply(self, obj: dict[str, Any], plural: str, manager: str) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        result: dict[str, Any] = await self.request(
            "PATCH",
            path(obj["apiVersion"], plural, meta.get("namespace"), meta["name"]),
            obj,
            content_type=APPLY,
            params={"fieldManager": manager, "force": "true"},
        )
        return result

    async def patch(
        self,
        api_version: str,
        plural: str,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        *,
        sub: str = "",
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            "PATCH", path(api_version, plural, namespace, name, sub), patch, content_type=MERGE
        )
        return result

    async def delete(
        self,
        api_version: str,
        plural: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
    ) -> bool:
        try:
            await self.request(
                "DELETE",
                path(api_version, plural, namespace, name),
                {"propagationPolicy": propagation},
            )
        except ClientError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def append_log(
        self, namespace: str, pod: str, container: str, text: str, run: int | None = None
    ) -> None:
        """Feed a container's log (this server's extension: POST to pods/log); ``run`` is the
        container's restartCount when the text was written (a new run starts a new log)."""
        params = {"container": container}
        if run is not None:
            params["restartCount"] = str(run)
        await self.request(
            "POST",
            path("v1", "pods", namespace, pod, "log"),
            text.encode(),
            content_type="application/octet-stream",
            params=params,
        )

    async def watch(
        self, api_version: str, plural: str, resource_version: str, *, timeout: int = 300
    ) -> AsyncIterator[dict[str, Any]]:
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout),
            "allowWatchBookmarks": "true",
        }
        async with self.session.get(
            self.url + path(api_version, plural),
            params=params,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout + 30),
        ) as resp:
            if resp.status >= 400:
                raise ClientError(resp.status, await resp.text())
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
