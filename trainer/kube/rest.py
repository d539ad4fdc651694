"""Raw REST calls to the Kubernetes API with JSON dicts in and out.

The typed kubernetes_asyncio APIs deserialise into models (slow, and lossy for custom
resources) and have known traps (a patch without
``_content_type`` is sent as a JSON patch; server-side apply that creates answers 201, which
the typed ``patch_*`` turns into ``None``). :class:`Kube` therefore goes through
``ApiClient.call_api`` with ``_preload_content=False``: it sets the content type itself, reads
the body itself, accepts every 2xx, and maps everything else to :class:`APIError`.

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

import aiohttp
from kubernetes_asyncio.client.api_client import ApiClient

from trainer.kube.ratelimit import RateLimiter
from trainer.kube.resources import GVR, gvr_of
from trainer.machinery.status import reason_for

Obj = dict[str, Any]
ObjList = list[dict[str, Any]]
Query = list[tuple[str, str]]
Patch = dict[str, Any] | list[Any]
"""A merge/strategic/apply patch (a dict) or a JSON patch (a list of operations)."""

OnRequest = Callable[[str, str, int, float], None]
"""``(verb, resource, code, seconds)``: called once per API request."""

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

DEFAULT_TIMEOUT = 30.0
WATCH_GRACE = 30.0  # client-side slack past the server's timeoutSeconds before giving up


class APIError(Exception):
    """A failed API call: ``status`` is the HTTP code (0 when no answer came back: a
    connection error or a timeout), ``reason`` the Status reason (``NotFound``, ``Conflict``,
    ``AlreadyExists``, ...), ``message`` the server's message, ``body`` the parsed Status (or
    the raw text when it was not JSON)."""

    def __init__(
        self, status: int, reason: str, message: str, body: dict[str, Any] | str | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @property
    def is_not_found(self) -> bool:
        return self.status == 404

    @property
    def is_conflict(self) -> bool:
        """409: a stale resourceVersion, an SSA field conflict, or AlreadyExists."""
        return self.status == 409

    @property
    def is_already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def is_gone(self) -> bool:
        return self.status == 410

    @property
    def is_retryable(self) -> bool:
        """Worth retrying unchanged: throttling (429), server errors (5xx), connection errors
        and timeouts (status 0). A 409 is not: the caller must re-read first."""
        return self.status in (0, 429) or self.status >= 500


class Expired(APIError):
    """The watch's resourceVersion is too old (HTTP 410 or a 410 ERROR event): relist."""


def error_from(status: int, data: bytes) -> APIError:
    """The :class:`APIError` (or :class:`Expired`) for a non-2xx answer with body ``data``."""
    text = data.decode("utf-8", "replace")
    body: dict[str, Any] | str = text
    reason = reason_for(status)
    message = text.strip() or reason
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        body = parsed
        reason = str(parsed.get("reason") or reason)
        message = str(parsed.get("message") or message)
    cls = Expired if status == 410 else APIError
    return cls(status, reason, message, body)


def _status_error(status: dict[str, Any]) -> APIError:
    """The error an ERROR watch event carries (a metav1.Status)."""
    code = int(status.get("code") or 500)
    reason = str(status.get("reason") or reason_for(code))
    message = str(status.get("message") or reason)
    cls = Expired if code == 410 else APIError
    return cls(code, reason, message, status)


def _flag(value: bool) -> str:
    # Sent as lowercase text: the query serialiser would print Python's "True".
    return "true" if value else "false"


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

    # --- plumbing ---------------------------------------------------------------------------
    def _record(self, verb: str, resource: str, code: int, started: float) -> None:
        if self.on_request is not None:
            self.on_request(verb, resource, code, time.perf_counter() - started)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the unread response (any status)."""
        if self.limiter is not None:
            await self.limiter.acquire()
        headers = {"Accept": JSON, "Content-Type": content_type}
        resp: aiohttp.ClientResponse = await self.api.call_api(
            path,
            method,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return resp

    async def request(
        self,
        verb: str,
        resource: str,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One call: the parsed JSON answer of a 2xx, else :class:`APIError`. ``verb`` and
        ``resource`` only label the ``on_request`` report."""
        limit = self.timeout if timeout is None else timeout
        started = time.perf_counter()
        code = 0
        try:
            async with asyncio.timeout(limit):
                resp = await self._send(
                    method,
                    path,
                    query=query,
                    body=body,
                    content_type=content_type,
                    timeout=aiohttp.ClientTimeout(total=limit),
                )
                try:
                    code = resp.status
                    data = await resp.read()
                finally:
                    resp.release()
        except TimeoutError as exc:
            raise APIError(0, "Timeout", f"{method} {path}: no answer within {limit:g}s") from exc
        except aiohttp.ClientError as exc:
            raise APIError(0, "ConnectionError", f"{method} {path}: {exc}") from exc
        finally:
            self._record(verb, resource, code, started)
        if not 200 <= code <= 299:
            raise error_from(code, data)
        if not data.strip():
            return {}
        parsed = json.loads(data)
        return parsed if isinstance(parsed, dict) else {"items": parsed}

    @staticmethod
    def _write_query(field_manager: str | None, dry_run: bool) -> Query:
        query: Query = []
        if field_manager:
            query.append(("fieldManager", field_manager))
        if dry_run:
            query.append(("dryRun", "All"))
        return query

    @staticmethod
    def _locate(obj: dict[str, Any], gvr: GVR | None) -> tuple[GVR, str | None, str]:
        meta = obj.get("metadata") or {}
        resolved = gvr if gvr is not None else gvr_of(obj)
        namespace = meta.get("namespace") if resolved.namespaced else None
        if resolved.namespaced and not namespace:
            raise ValueError(f"{resolved.kind} {meta.get('name')!r}: metadata.namespace is unset")
        return resolved, namespace, str(meta.get("name") or "")

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
        resource = gvr.resource + (f"/{subresource}" if subresource else "")
        try:
            return await self.request(
                "get", resource, "GET", gvr.path(namespace, name, subresource), timeout=timeout
            )
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
        base: Query = []
        if label_selector:
            base.append(("labelSelector", label_selector))
        if field_selector:
            base.append(("fieldSelector", field_selector))
        if limit:
            base.append(("limit", str(limit)))
        first = [*base, ("resourceVersion", resource_version)] if resource_version else base
        items: ObjList = []
        token = ""
        while True:
            # A continue token carries the snapshot; it must not be sent with resourceVersion.
            query = [*base, ("continue", token)] if token else first
            page = await self.request(
                "list", gvr.resource, "GET", gvr.path(namespace), query=query, timeout=timeout
            )
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
        resolved, namespace, _ = self._locate(obj, gvr)
        return await self.request(
            "create",
            resolved.resource,
            "POST",
            resolved.path(namespace),
            query=self._write_query(field_manager, dry_run),
            body=obj,
            timeout=timeout,
        )

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
        resolved, namespace, name = self._locate(obj, gvr)
        resource = resolved.resource + (f"/{subresource}" if subresource else "")
        return await self.request(
            "update",
            resource,
            "PUT",
            resolved.path(namespace, name, subresource),
            query=self._write_query(field_manager, dry_run),
            body=obj,
            timeout=timeout,
        )

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
        resolved, namespace, name = self._locate(obj, gvr)
        query = self._write_query(field_manager, dry_run)
        if force:
            query.append(("force", "true"))
        resource = resolved.resource + (f"/{subresource}" if subresource else "")
        return await self.request(
            "apply",
            resource,
            "PATCH",
            resolved.path(namespace, name, subresource),
            query=query,
            body=obj,
            content_type=APPLY_PATCH,
            timeout=timeout,
        )

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
        patch). The content type is always sent: the typed client's guess is wrong for some
        patches (see the module docstring)."""
        resource = gvr.resource + (f"/{subresource}" if subresource else "")
        return await self.request(
            "patch",
            resource,
            "PATCH",
            gvr.path(namespace, name, subresource),
            query=self._write_query(field_manager, dry_run),
            body=patch,
            content_type=content_type,
            timeout=timeout,
        )

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
    ) -> bool:
        """DELETE: True when the server accepted it (deleted, or marked for deletion while
        finalizers remain), False when the object did not exist (404). ``preconditions``
        (``uid`` / ``resourceVersion``) make a stale delete fail with 409."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation:
            options["propagationPolicy"] = propagation
        if preconditions:
            options["preconditions"] = preconditions
        if dry_run:
            options["dryRun"] = ["All"]
        try:
            await self.request(
                "delete",
                gvr.resource,
                "DELETE",
                gvr.path(namespace, name),
                body=options,
                timeout=timeout,
            )
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
        query: Query = [
            ("watch", "true"),
            ("timeoutSeconds", str(int(timeout_seconds))),
            ("allowWatchBookmarks", _flag(allow_bookmarks)),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        connect = self.timeout if connect_timeout is None else connect_timeout
        limits = aiohttp.ClientTimeout(
            total=timeout_seconds + WATCH_GRACE, connect=connect, sock_connect=connect
        )
        path = gvr.path(namespace)
        started = time.perf_counter()
        code = 0
        try:
            async with asyncio.timeout(connect):
                resp = await self._send("GET", path, query=query, timeout=limits)
            code = resp.status
        except TimeoutError as exc:
            raise APIError(0, "Timeout", f"watch {path}: no answer within {connect:g}s") from exc
        except aiohttp.ClientError as exc:
            raise APIError(0, "ConnectionError", f"watch {path}: {exc}") from exc
        finally:
            self._record("watch", gvr.resource, code, started)
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
                        yield _event(line)
                del pending[:start]
            if bytes(pending).strip():
                yield _event(bytes(pending))
        except TimeoutError as exc:
            raise APIError(0, "Timeout", f"watch {path}: stream stalled") from exc
        except aiohttp.ClientError as exc:
            raise APIError(0, "ConnectionError", f"watch {path}: {exc}") from exc
        finally:
            if resp.content.at_eof():
                resp.release()
            else:
                resp.close()


def _event(line: bytes) -> dict[str, Any]:
    """One watch line; an ERROR event becomes the matching exception."""
    event: dict[str, Any] = json.loads(line)
    if event.get("type") == "ERROR":
        obj = event.get("object")
        raise _status_error(obj if isinstance(obj, dict) else {})
    return event
