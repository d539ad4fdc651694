"""Sending Kubernetes API requests: JSON dicts in and out, through one kubernetes_asyncio
``ApiClient``.

Requests are built apart from sending them (:mod:`trainer.machinery.requests`, as lightkube
does); :class:`Kube` sends them. The typed kubernetes_asyncio APIs deserialise into models
(slow, and lossy for custom resources) and have known traps (a patch without ``_content_type``
is sent as a JSON patch; server-side apply that creates answers 201, which the typed
``patch_*`` turns into ``None``). :class:`Kube` therefore goes through ``ApiClient.call_api``
with ``_preload_content=False``: the request carries its content type, the body is read here,
every 2xx is accepted, and everything else maps to :class:`APIError`. The ``ApiClient`` brings
what a kubeconfig or the in-cluster configuration says about the server, its CA and the
credentials (``trainer/kube/client.py``).

Every call reports ``(verb, resource, code, seconds)`` to an optional ``on_request`` callback
(the controller wires Prometheus to it); ``code`` is 0 when no HTTP answer came back
(connection error or timeout).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any
from urllib.parse import urlencode

import aiohttp
from kubernetes_asyncio.client.api_client import ApiClient

from trainer.kube.ratelimit import RateLimiter
from trainer.kube.resources import PODS, gvr_of
from trainer.machinery import jsondecode
from trainer.machinery import requests as rq
from trainer.machinery.gvr import GVR
from trainer.machinery.requests import (
    APPLY_PATCH,
    JSON,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    APIError,
    Expired,
    Patch,
    Query,
    Request,
    error_from,
    watch_event,
)

__all__ = [
    "APPLY_PATCH",
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "APIError",
    "Expired",
    "Kube",
    "OnRequest",
    "Patch",
    "Query",
    "Request",
    "error_from",
]

Obj = dict[str, Any]
ObjList = list[dict[str, Any]]

OnRequest = Callable[[str, str, int, float], None]
"""``(verb, resource, code, seconds)``: called once per API request."""

DEFAULT_TIMEOUT = 30.0
WATCH_GRACE = 30.0  # client-side slack past the server's timeoutSeconds before giving up


class Kube:
    """Async JSON access to the Kubernetes API through one kubernetes_asyncio ``ApiClient``.

    ``timeout`` bounds each call (connect, send and read the whole answer); every method takes
    ``timeout=`` to override it. Watches are bounded by their ``timeout_seconds`` instead.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        on_request: OnRequest | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.api = api
        self.timeout = timeout
        self.on_request = on_request
        self.limiter = limiter
        """Client-side rate limit every request (and watch) waits for (None: unlimited)."""

    # --- sending ----------------------------------------------------------------------------
    def _record(self, verb: str, resource: str, code: int, started: float) -> None:
        if self.on_request is not None:
            self.on_request(verb, resource, code, time.perf_counter() - started)

    async def open(
        self, req: Request, timeout: aiohttp.ClientTimeout, accept: str = JSON
    ) -> aiohttp.ClientResponse:
        """Send ``req`` and return the unread response (any status); the caller reads and
        releases it. For answers that are not one JSON document: watches, logs."""
        if self.limiter is not None:
            await self.limiter.acquire()
        # What ApiClient.call_api and its RESTClientObject.request do for a path without
        # parameters, less the walk over the body (sanitize_for_serialization, which turns models
        # into dicts: ours are dicts already) and the str payload aiohttp encodes again: both
        # were a third of the executor's time in hack/bench/simulate.py. The lean import
        # (trainer/kube/lean.py) keeps ApiClient and its REST client as they are.
        api = self.api
        rest = api.rest_client
        headers = {**api.default_headers, "Accept": accept, "Content-Type": req.content_type}
        if api.cookie:
            headers["Cookie"] = api.cookie
        query = list(req.query)
        await api.update_params_for_auth(headers, query, ["BearerToken"])
        url = f"{api.configuration.host}{req.path}"
        if query:
            url += "?" + urlencode(query)
        args: dict[str, Any] = {"timeout": timeout, "headers": headers}
        if rest.proxy:
            args["proxy"] = rest.proxy
        if rest.proxy_headers:
            args["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            args["server_hostname"] = rest.server_hostname
        if req.body is not None:
            body = req.body
            args["data"] = body if isinstance(body, bytes) else json.dumps(body).encode()
        resp: aiohttp.ClientResponse = await rest.pool_manager.request(req.method, url, **args)
        return resp

    async def send(self, req: Request, *, timeout: float | None = None) -> dict[str, Any]:
        """One call: the parsed JSON answer of a 2xx, else :class:`APIError`."""
        limit = self.timeout if timeout is None else timeout
        started = time.perf_counter()
        code = 0
        try:
            async with asyncio.timeout(limit):
                resp = await self.open(req, aiohttp.ClientTimeout(total=limit))
                try:
                    code = resp.status
                    data = await resp.read()
                finally:
                    resp.release()
        except TimeoutError as exc:
            raise APIError(
                0, "Timeout", f"{req.method} {req.path}: no answer within {limit:g}s"
            ) from exc
        except aiohttp.ClientError as exc:
            raise APIError(0, "ConnectionError", f"{req.method} {req.path}: {exc}") from exc
        finally:
            self._record(req.verb, req.resource, code, started)
        if not 200 <= code <= 299:
            raise error_from(code, data)
        if not data.strip():
            return {}
        parsed = jsondecode.loads(data)
        return parsed if isinstance(parsed, dict) else {"items": parsed}

    async def request(
        self,
        verb: str,
        resource: str,
        method: str,
        path: str,
        *,
        query: Query | list[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """A call no builder of :mod:`trainer.machinery.requests` makes (a subresource such as
        ``serviceaccounts/token``): as :meth:`send`."""
        req = Request(verb, resource, method, path, tuple(query), body, content_type)
        return await self.send(req, timeout=timeout)

    # --- reads ------------------------------------------------------------------------------
    async def get(
        self,
        gvr: GVR,
        namespace: str | None,
        name: str,
        *,
        subresource: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist (404)."""
        try:
            return await self.send(rq.get(gvr, namespace, name, subresource), timeout=timeout)
        except APIError as err:
            if err.is_not_found:
                return None
            raise

    async def list(
        self,
        gvr: GVR,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        timeout: float | None = None,
    ) -> tuple[ObjList, str]:
        """All matching objects (following ``continue`` pages of ``limit``) and the list's
        resourceVersion. Items get ``apiVersion`` and ``kind``, which list answers omit."""
        items: ObjList = []
        token = ""
        while True:
            req = rq.list_page(
                gvr,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=limit,
                resource_version=resource_version,
                continue_token=token,
            )
            page = await self.send(req, timeout=timeout)
            for item in page.get("items") or []:
                item.setdefault("apiVersion", gvr.api_version)
                item.setdefault("kind", gvr.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    # --- writes -----------------------------------------------------------------------------
    async def create(
        self,
        obj: dict[str, Any],
        *,
        gvr: GVR | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST the object (its resource from apiVersion/kind unless ``gvr`` is given)."""
        req = rq.create(obj, gvr or gvr_of(obj), field_manager=field_manager, dry_run=dry_run)
        return await self.send(req, timeout=timeout)

    async def replace(
        self,
        obj: dict[str, Any],
        *,
        gvr: GVR | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """PUT the object: optimistic concurrency on ``metadata.resourceVersion`` (409 when
        stale)."""
        req = rq.replace(
            obj,
            gvr or gvr_of(obj),
            subresource=subresource,
            field_manager=field_manager,
            dry_run=dry_run,
        )
        return await self.send(req, timeout=timeout)

    async def apply(
        self,
        obj: dict[str, Any],
        field_manager: str,
        force: bool = True,
        dry_run: bool = False,
        *,
        subresource: str | None = None,
        gvr: GVR | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Server-side apply: PATCH ``application/apply-patch+yaml`` with the object as JSON
        (JSON is YAML). Creates (201) or updates (200); both return the live object."""
        req = rq.apply(
            obj,
            gvr or gvr_of(obj),
            field_manager,
            force=force,
            dry_run=dry_run,
            subresource=subresource,
        )
        return await self.send(req, timeout=timeout)

    async def patch(
        self,
        gvr: GVR,
        namespace: str | None,
        name: str,
        patch: Patch,
        content_type: str = MERGE_PATCH,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """PATCH with an explicit content type (merge patch by default; a list for a JSON
        patch)."""
        req = rq.patch(
            gvr,
            namespace,
            name,
            patch,
            content_type,
            subresource=subresource,
            field_manager=field_manager,
            dry_run=dry_run,
        )
        return await self.send(req, timeout=timeout)

    async def bind(
        self, namespace: str, name: str, node: str, *, uid: str = "", timeout: float | None = None
    ) -> None:
        """Bind the pod to ``node`` (``pods/binding``; see :func:`~trainer.machinery.requests.
        bind`)."""
        await self.send(rq.bind(PODS, namespace, name, node, uid=uid), timeout=timeout)

    async def patch_status(
        self,
        gvr: GVR,
        namespace: str | None,
        name: str,
        patch: Patch,
        content_type: str = MERGE_PATCH,
        *,
        field_manager: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """PATCH the ``/status`` subresource (spec changes in it are ignored by the server)."""
        return await self.patch(
            gvr,
            namespace,
            name,
            patch,
            content_type,
            subresource="status",
            field_manager=field_manager,
            timeout=timeout,
        )

    async def delete(
        self,
        gvr: GVR,
        namespace: str | None,
        name: str,
        propagation: str | None = "Background",
        preconditions: dict[str, str] | None = None,
        *,
        dry_run: bool = False,
        timeout: float | None = None,
        grace_period_seconds: int | None = None,
    ) -> bool:
        """DELETE: True when the server accepted it (deleted, or marked for deletion while
        finalizers remain or a pod's kubelet stops it), False when the object did not exist
        (404). ``preconditions`` (``uid`` / ``resourceVersion``) make a stale delete fail
        with 409."""
        req = rq.delete(
            gvr,
            namespace,
            name,
            propagation,
            preconditions,
            dry_run=dry_run,
            grace_period_seconds=grace_period_seconds,
        )
        try:
            await self.send(req, timeout=timeout)
        except APIError as err:
            if err.is_not_found:
                return False
            raise
        return True

    # --- watch ------------------------------------------------------------------------------
    async def watch(
        self,
        gvr: GVR,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        connect_timeout: float | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events ``{"type", "object"}`` (ADDED, MODIFIED, DELETED, BOOKMARK) from
        ``resource_version``, until the server ends the stream (about ``timeout_seconds``).

        Raises :class:`Expired` when the resourceVersion is too old (an HTTP 410 or a 410
        ERROR event), :class:`APIError` for any other failure (status 0 for a dropped
        connection). Lines are split here rather than by ``readline``, so an object of any size
        fits. Use it as ``async with contextlib.aclosing(kube.watch(...)) as events``.
        """
        req = rq.watch(
            gvr,
            namespace,
            resource_version,
            timeout_seconds,
            allow_bookmarks,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        connect = self.timeout if connect_timeout is None else connect_timeout
        limits = aiohttp.ClientTimeout(
            total=timeout_seconds + WATCH_GRACE, connect=connect, sock_connect=connect
        )
        path = req.path
        started = time.perf_counter()
        code = 0
        try:
            async with asyncio.timeout(connect):
                resp = await self.open(req, limits)
            code = resp.status
        except TimeoutError as exc:
            raise APIError(0, "Timeout", f"watch {path}: no answer within {connect:g}s") from exc
        except aiohttp.ClientError as exc:
            raise APIError(0, "ConnectionError", f"watch {path}: {exc}") from exc
        finally:
            self._record(req.verb, req.resource, code, started)
        try:
            if not 200 <= code <= 299:
                raise error_from(code, await resp.read())
            pending = bytearray()
            async for chunk in resp.content.iter_any():
                pending += chunk
                start = 0
                while (end := pending.find(b"\n", start)) >= 0:
                    line = bytes(pending[start:end])
                    start = end + 1
                    if line.strip():
                        yield watch_event(line)
                del pending[:start]
            if bytes(pending).strip():
                yield watch_event(bytes(pending))
        except TimeoutError as exc:
            raise APIError(0, "Timeout", f"watch {path}: stream stalled") from exc
        except aiohttp.ClientError as exc:
            raise APIError(0, "ConnectionError", f"watch {path}: {exc}") from exc
        finally:
            if resp.content.at_eof():
                resp.release()
            else:
                resp.close()
