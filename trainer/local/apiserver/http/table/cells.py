"""Table cells: the column definitions every table shares (Name, Age), the kube-style ages
(``human_duration``) and timestamps, and the cells computed alike for many kinds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer.machinery import times
from trainer.machinery.times import format_time

if TYPE_CHECKING:
    pass


Row = list[Any]
Printer = Callable[[dict[str, Any], dt.datetime], Row]

INCLUDE_OBJECT = ("Metadata", "Object", "None")
NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated."
)
AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC."
)


# --- columns ---------------------------------------------------------------------------------


def column(
    name: str, type_: str = "string", description: str = "", *, format_: str = "", priority: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "format": format_,
        "description": description,
        "priority": priority,
    }


NAME_COLUMN = column("Name", "string", NAME_DESCRIPTION, format_="name")
AGE_COLUMN = column("Age", "string", AGE_DESCRIPTION)


# --- time ------------------------------------------------------------------------------------


def parse_time(value: Any) -> dt.datetime | None:
    """A timestamp cell's time; None when there is none or it cannot be read."""
    if not isinstance(value, str):
        return None
    try:
        return times.parse_time(value)
    except ValueError:
        return None


def human_duration(delta: dt.timedelta) -> str:
    """apimachinery's ``duration.HumanDuration``: ``45s``, ``3m10s``, ``5h2m``, ``3d4h``, ``2y``."""
    seconds = int(delta.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def since(value: Any, now: dt.datetime) -> str:
    """``translateTimestampSince``: the age of a timestamp, ``<unknown>`` without one."""
    when = parse_time(value)
    return "<unknown>" if when is None else human_duration(now - when)


def rfc3339(value: Any) -> str:
    when = parse_time(value)
    return "<unknown>" if when is None else format_time(when)


# --- built-in printers -----------------------------------------------------------------------


def name_cell(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def age_cell(obj: dict[str, Any], now: dt.datetime) -> str:
    return since((obj.get("metadata") or {}).get("creationTimestamp"), now)


def name_age(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [name_cell(obj), age_cell(obj, now)]


def true_condition(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )
