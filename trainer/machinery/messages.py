"""Cutting a human-readable message to an API field's size: the controller's Event notes and
its condition messages both end a cut message with `` ...``, so a reader sees it was cut.

The limits differ by field and stay with their callers (an Event note under 1 KiB, a
condition message at 1024 characters); the rule of how to cut lives here once.
"""

from __future__ import annotations

from typing import Final

ELLIPSIS: Final = " ..."


def truncate(message: str, limit: int) -> str:
    """``message`` if it has at most ``limit`` characters, else its start and
    :data:`ELLIPSIS`, ``limit`` characters in all."""
    return message if len(message) <= limit else message[: limit - len(ELLIPSIS)] + ELLIPSIS
