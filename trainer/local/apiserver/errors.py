"""Kubernetes ``Status`` errors as the API server answers them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.machinery.errors import FieldError
from trainer.machinery.status import failure


@dataclass
class APIError(Exception):
    """An error answered as a ``Status`` object with an HTTP code."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        return failure(self.code, self.reason, self.message, self.details)


class PageNotFound(APIError):
    """A path no API group serves: kube-apiserver's last handler answers it in plain text
    (``404 page not found``), not with a Status. Paths of built-in group versions get a
    Status (``the server could not find the requested resource``)."""

    TEXT = "404 page not found\n"

    def __init__(self) -> None:
        super().__init__(404, "NotFound", "404 page not found")


def _details(kind: str, group: str, name: str) -> dict[str, Any]:
    """A Status's details: an empty name is left out, as Go's ``omitempty`` leaves it."""
    d: dict[str, Any] = {"name": name, "kind": kind} if name else {"kind": kind}
    if group:
        d["group"] = group
    return d


def resource_name(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> APIError:
    return APIError(
        404,
        "NotFound",
        f'{resource_name(plural, group)} "{name}" not found',
        _details(plural, group, name),
    )


def already_exists(plural: str, group: str, name: str) -> APIError:
    return APIError(
        409,
        "AlreadyExists",
        f'{resource_name(plural, group)} "{name}" already exists',
        _details(plural, group, name),
    )


def conflict(plural: str, group: str, name: str, why: str) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource_name(plural, group)} "{name}": {why}',
        _details(plural, group, name),
    )


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> APIError:
    causes = [
        {"reason": e.reason or _cause_reason(e.type), "message": _cause_message(e), "field": e.path}
        for e in errors
    ]
    joined = ", ".join(str(e) for e in errors)
    summary = f"[{joined}]" if len(errors) > 1 else joined
    qualified = f"{kind}.{group}" if group else kind
    details = _details(kind, group, name)
    details["causes"] = causes
    return APIError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def _cause_reason(error_type: str) -> str:
    return {
        "Invalid value": "FieldValueInvalid",
        "Required value": "FieldValueRequired",
        "Unsupported value": "FieldValueNotSupported",
        "Duplicate value": "FieldValueDuplicate",
        "Forbidden": "FieldValueForbidden",
        "Too long": "FieldValueTooLong",
        "Too many": "FieldValueTooMany",
        "Not found": "FieldValueNotFound",
        "Internal error": "InternalError",
    }.get(error_type, "FieldValueInvalid")


def _cause_message(e: FieldError) -> str:
    text = str(e)
    prefix = f"{e.path}: "
    return text[len(prefix) :] if e.path and text.startswith(prefix) else text


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def method_not_allowed(message: str) -> APIError:
    return APIError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> APIError:
    return APIError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, "
        f'application/apply-patch+yaml (got "{content_type}")',
    )


def gone(message: str) -> APIError:
    return APIError(410, "Expired", message)


def forbidden(message: str) -> APIError:
    return APIError(403, "Forbidden", message)


def namespace_terminating(plural: str, group: str, name: str, namespace: str) -> APIError:
    """NamespaceLifecycle's refusal of new content in a namespace being deleted, as
    kube-apiserver words it (admission.NewForbidden plus a NamespaceTerminating cause)."""
    resource = resource_name(plural, group)
    who = f'{resource} "{name}"' if name else resource
    details = _details(plural, group, name)
    details["causes"] = [
        {
            "reason": "NamespaceTerminating",
            "message": f"namespace {namespace} is being terminated",
            "field": "metadata.namespace",
        }
    ]
    return APIError(
        403,
        "Forbidden",
        f"{who} is forbidden: unable to create new content in namespace {namespace} "
        "because it is being terminated",
        details,
    )


def unauthorized() -> APIError:
    return APIError(401, "Unauthorized", "Unauthorized")


def too_large(limit: int) -> APIError:
    return APIError(413, "RequestEntityTooLarge", f"request body is larger than {limit} bytes")


def internal(message: str) -> APIError:
    return APIError(500, "InternalError", f"Internal error occurred: {message}")
