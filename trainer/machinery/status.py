"""``metav1.Status``: the failure body every Kubernetes API answers with, and the reason that
goes with each HTTP code.

Three layers speak it: the local API server answers every error with one, the webhooks and
the TrainJob status server answer their HTTP problems with one, and the API client reads the
reason back from an answer (or, when the body is not a Status, takes the reason apimachinery
would give the code). They share this table so a 413 or a 422 has one name everywhere.

The body keeps the field order the local API server has always written (``kind``,
``apiVersion``, ``metadata``, ``status``, ``message``, ``reason``, ``code``, then
``details``); JSON readers do not depend on it, but the project's recorded answers do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

REASONS: Final[Mapping[int, str]] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
"""The ``StatusReason`` of each HTTP code the project answers or reads (a 409 may also be
``AlreadyExists``, which its sender names itself)."""

UNKNOWN: Final = "Unknown"


def reason_for(code: int, default: str = UNKNOWN) -> str:
    """The Status reason of ``code``; ``default`` for a code without one."""
    return REASONS.get(code, default)


def failure(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` with ``status: Failure``; ``details`` only when there are some."""
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        out["details"] = dict(details)
    return out
