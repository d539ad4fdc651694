"""Kubernetes timestamps: the one place that writes them.

The API carries two forms of time, both RFC 3339 in UTC with a ``Z`` suffix:

* ``metav1.Time`` (``creationTimestamp``, condition ``lastTransitionTime``, Event times,
  ``expirationTimestamp``...): whole seconds, ``2024-05-01T10:00:00Z``;
* ``metav1.MicroTime`` (a Lease's ``acquireTime`` and ``renewTime``, structured log stamps):
  microseconds, ``2024-05-01T10:00:00.123456Z``.

Go's encoders always write these exact shapes, and clients compare some of them as strings
(a condition whose ``lastTransitionTime`` changes is a new transition), so every layer that
stamps a time (the controller, the webhooks, the local API server and kubelet, the logs) formats
it here rather than with its own ``strftime``. :func:`parse_time` reads them back; what a
malformed value means is the caller's to say (a decode error, an ``<unknown>`` age).
"""

from __future__ import annotations

import datetime as dt
from typing import Final

TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"
MICRO_TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_time(when: dt.datetime) -> str:
    """``when`` as a ``metav1.Time``; a naive datetime is taken as local time, as
    :meth:`datetime.astimezone` does."""
    return when.astimezone(dt.UTC).strftime(TIME_FORMAT)


def time_from_epoch(epoch: float) -> str:
    """Seconds since the epoch as a ``metav1.Time`` (fractions dropped)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime(TIME_FORMAT)


def format_micro_time(epoch: float) -> str:
    """Seconds since the epoch as a ``metav1.MicroTime`` (``2024-05-01T10:00:00.123456Z``)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime(MICRO_TIME_FORMAT)


def now() -> str:
    """The current time as a ``metav1.Time``."""
    return dt.datetime.now(dt.UTC).strftime(TIME_FORMAT)


def parse_time(value: str | None) -> dt.datetime | None:
    """A ``metav1.Time`` or ``MicroTime`` read back as an aware datetime; ``None`` for no
    value. :class:`ValueError` for text that is not an ISO 8601 time (the caller decides
    what that means); a time without an offset is taken as UTC."""
    if not value:
        return None
    when = dt.datetime.fromisoformat(value)
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)
