"""Kubernetes API requests, built apart from sending them (as lightkube does).

Each function here turns one API verb into a :class:`Request`: the method, the REST path, the
query, the body and its content type, plus the ``verb`` and ``resource`` a metrics callback
labels it with. Nothing is sent: :class:`trainer.kube.rest.Kube` sends a request, and a test
can assert what would go on the wire without a server. What the answers mean is here too: the
:class:`APIError` a non-2xx answer (or an ERROR watch event) becomes.

Content types are always explicit: a merge patch, a JSON patch (a list of operations), a
strategic merge patch and server-side apply (``application/apply-patch+yaml`` with the object as
JSON, which is YAML) are different requests to the API server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from trainer.machinery import jsondecode
from trainer.machinery.gvr import GVR
from trainer.machinery.status import reason_for

Query = tuple[tuple[str, str], ...]
Patch = dict[str, Any] | list[Any]
"""A merge/strategic/apply patch (a dict) or a JSON patch (a list of operations)."""

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"


@dataclass(frozen=True)
class Request:
    """One API call, ready to send. ``verb`` and ``resource`` (``plural[.group][/sub]``) only
    label it for metrics and messages."""

    verb: str
    resource: str
    method: str
    path: str
    query: Query = ()
    body: Any = None
    content_type: str = JSON


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
    def is_unserved(self) -> bool:
        """A 404 without a Status body: the path itself is not served (the resource's CRD is
        not installed), not a missing object."""
        return self.status == 404 and not isinstance(self.body, dict)

    @property
    def is_namespace_terminating(self) -> bool:
        """NamespaceLifecycle's 403: the namespace is being deleted and takes no new objects
        (everything in it goes too, so there is nothing to retry)."""
        if self.status != 403 or not isinstance(self.body, dict):
            return False
        causes = (self.body.get("details") or {}).get("causes") or []
        return any(
            isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes
        )

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


def status_error(status: dict[str, Any]) -> APIError:
    """The error an ERROR watch event carries (a metav1.Status)."""
    code = int(status.get("code") or 500)
    reason = str(status.get("reason") or reason_for(code))
    message = str(status.get("message") or reason)
    cls = Expired if code == 410 else APIError
    return cls(code, reason, message, status)


def watch_event(line: bytes) -> dict[str, Any]:
    """One line of a watch stream; an ERROR event becomes the matching exception."""
    event: dict[str, Any] = jsondecode.loads(line)
    if event.get("type") == "ERROR":
        obj = event.get("object")
        raise status_error(obj if isinstance(obj, dict) else {})
    return event


def _flag(value: bool) -> str:
    # Sent as lowercase text: a query serialiser would print Python's "True".
    return "true" if value else "false"


def _resource(gvr: GVR, subresource: str | None) -> str:
    return gvr.resource + (f"/{subresource}" if subresource else "")


def write_query(field_manager: str | None = None, dry_run: bool = False) -> Query:
    """The query of a write: ``fieldManager`` and ``dryRun=All`` when asked for."""
    query: list[tuple[str, str]] = []
    if field_manager:
        query.append(("fieldManager", field_manager))
    if dry_run:
        query.append(("dryRun", "All"))
    return tuple(query)


def located(obj: dict[str, Any], gvr: GVR) -> tuple[str | None, str]:
    """The namespace (None for a cluster-scoped resource) and name of ``obj``; a
    ``ValueError`` when a namespaced object has no namespace."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") if gvr.namespaced else None
    if gvr.namespaced and not namespace:
        raise ValueError(f"{gvr.kind} {meta.get('name')!r}: metadata.namespace is unset")
    return namespace, str(meta.get("name") or "")


# --- reads ------------------------------------------------------------------------------------
def get(gvr: GVR, namespace: str | None, name: str, subresource: str | None = None) -> Request:
    return Request(
        "get", _resource(gvr, subresource), "GET", gvr.path(namespace, name, subresource)
    )


def list_page(
    gvr: GVR,
    namespace: str | None = None,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
    limit: int | None = None,
    resource_version: str | None = None,
    continue_token: str = "",
) -> Request:
    """One page of a list. A ``continue`` token carries the snapshot, so it is never sent
    together with ``resourceVersion``."""
    query: list[tuple[str, str]] = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    if limit:
        query.append(("limit", str(limit)))
    if continue_token:
        query.append(("continue", continue_token))
    elif resource_version:
        query.append(("resourceVersion", resource_version))
    return Request("list", gvr.resource, "GET", gvr.path(namespace), tuple(query))


def watch(
    gvr: GVR,
    namespace: str | None = None,
    resource_version: str | None = None,
    timeout_seconds: int = 300,
    allow_bookmarks: bool = True,
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> Request:
    query = [
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
    return Request("watch", gvr.resource, "GET", gvr.path(namespace), tuple(query))


# --- writes -----------------------------------------------------------------------------------
def create(
    obj: dict[str, Any], gvr: GVR, *, field_manager: str | None = None, dry_run: bool = False
) -> Request:
    """POST ``obj`` to its collection."""
    namespace, _ = located(obj, gvr)
    return Request(
        "create",
        gvr.resource,
        "POST",
        gvr.path(namespace),
        write_query(field_manager, dry_run),
        obj,
    )


def bind(pods: GVR, namespace: str, name: str, node: str, *, uid: str = "") -> Request:
    """POST a Binding to ``pods/{name}/binding``: assign the pod to ``node``, as a scheduler
    does (the server sets ``spec.nodeName`` and ``PodScheduled=True``; a pod already bound
    answers 409). ``uid`` makes a binding meant for an older pod of that name fail."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return Request(
        "create",
        _resource(pods, "binding"),
        "POST",
        pods.path(namespace, name, "binding"),
        (),
        body,
    )


def replace(
    obj: dict[str, Any],
    gvr: GVR,
    *,
    subresource: str | None = None,
    field_manager: str | None = None,
    dry_run: bool = False,
) -> Request:
    """PUT ``obj``: optimistic concurrency on ``metadata.resourceVersion``."""
    namespace, name = located(obj, gvr)
    return Request(
        "update",
        _resource(gvr, subresource),
        "PUT",
        gvr.path(namespace, name, subresource),
        write_query(field_manager, dry_run),
        obj,
    )


def apply(
    obj: dict[str, Any],
    gvr: GVR,
    field_manager: str,
    *,
    force: bool = True,
    dry_run: bool = False,
    subresource: str | None = None,
) -> Request:
    """Server-side apply of ``obj`` as ``field_manager``."""
    namespace, name = located(obj, gvr)
    query = write_query(field_manager, dry_run) + ((("force", "true"),) if force else ())
    return Request(
        "apply",
        _resource(gvr, subresource),
        "PATCH",
        gvr.path(namespace, name, subresource),
        query,
        obj,
        APPLY_PATCH,
    )


def patch(
    gvr: GVR,
    namespace: str | None,
    name: str,
    body: Patch,
    content_type: str = MERGE_PATCH,
    *,
    subresource: str | None = None,
    field_manager: str | None = None,
    dry_run: bool = False,
) -> Request:
    return Request(
        "patch",
        _resource(gvr, subresource),
        "PATCH",
        gvr.path(namespace, name, subresource),
        write_query(field_manager, dry_run),
        body,
        content_type,
    )


def delete(
    gvr: GVR,
    namespace: str | None,
    name: str,
    propagation: str | None = "Background",
    preconditions: dict[str, str] | None = None,
    *,
    dry_run: bool = False,
    grace_period_seconds: int | None = None,
) -> Request:
    """DELETE with DeleteOptions: ``preconditions`` (``uid`` / ``resourceVersion``) make a
    stale delete fail with 409; ``grace_period_seconds`` 0 deletes a pod at once (its
    kubelet confirming it stopped)."""
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if propagation:
        options["propagationPolicy"] = propagation
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    if preconditions:
        options["preconditions"] = preconditions
    if dry_run:
        options["dryRun"] = ["All"]
    return Request("delete", gvr.resource, "DELETE", gvr.path(namespace, name), (), options)
