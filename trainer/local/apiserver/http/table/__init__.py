"""Table responses (``meta.k8s.io/v1`` Table) for ``kubectl get``.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`` on lists, gets
and watches, and prints whatever columns the server sends. As kube-apiserver does:

- custom resources get ``Name`` plus the CRD version's ``additionalPrinterColumns`` (the first
  JSONPath result of each, typed like the apiextensions table convertor: ``integer``,
  ``number``, ``boolean``, ``string``, and ``date`` turned into an age such as ``5m``), or
  ``Name`` + ``Age`` when the version declares no columns;
- built-in kinds get the columns kubectl users know (Pod: Ready/Status/Restarts, Job:
  Status/Completions/Duration, Secret: Type/Data, ...); cells are computed by the server with
  every column, wide ones (``priority: 1``) included, and kubectl drops those without ``-o wide``;
- each row carries the object as ``PartialObjectMetadata`` (``includeObject=Metadata``, the
  default), the whole object (``Object``) or nothing (``None``); kubectl reads namespaces and
  labels from there for ``-A`` and ``--show-labels``;
- the table's ``metadata`` carries the list's ``resourceVersion`` (``kubectl get -w`` watches
  from it), ``continue`` and ``remainingItemCount`` (chunked lists).

Ages are computed against the server's clock (``server.hooks.clock``), so tests that move the
clock see them move.

Modules: this one converts objects, lists and watch events to Tables and types CRD columns;
:mod:`.printers` has the built-in kinds' columns and printers, :mod:`.cells` the shared
columns, ages and timestamps.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

from trainer.local.apiserver import jsonpath
from trainer.local.apiserver.errors import bad_request
from trainer.local.apiserver.resources import ResourceType

if TYPE_CHECKING:
    from trainer.local.apiserver.core.storage import Storage
from trainer.local.apiserver.http.table.cells import (
    AGE_COLUMN,
    AGE_DESCRIPTION,
    INCLUDE_OBJECT,
    NAME_COLUMN,
    Printer,
    Row,
    column,
    human_duration,
    name_age,
    name_cell,
    parse_time,
)
from trainer.local.apiserver.http.table.printers import BUILTIN_PRINTERS

# --- entry points ----------------------------------------------------------------------------

__all__ = [
    "check_include_object",
    "custom_cell",
    "event_table",
    "human_duration",
    "to_table",
    "wants_table",
    "watch_line",
]


def to_table(
    server: Storage,
    rt: ResourceType,
    body: dict[str, Any],
    *,
    is_list: bool,
    include_object: str,
) -> dict[str, Any]:
    """The Table for a list body (``is_list``) or one object, as kubectl requests it."""
    include = check_include_object(include_object)
    now = server.hooks.clock.now()
    columns, printer = _columns_and_printer(rt)
    items: list[dict[str, Any]] = (body.get("items") or []) if is_list else [body]
    meta: dict[str, Any] = {}
    source_meta = body.get("metadata") or {}
    if source_meta.get("resourceVersion"):
        meta["resourceVersion"] = source_meta["resourceVersion"]
    if is_list:
        if source_meta.get("continue"):
            meta["continue"] = source_meta["continue"]
        if source_meta.get("remainingItemCount") is not None:
            meta["remainingItemCount"] = source_meta["remainingItemCount"]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": [_row(rt, item, printer(item, now), include) for item in items],
    }


def event_table(
    server: Storage,
    rt: ResourceType,
    event_type: str,
    obj: dict[str, Any],
    *,
    include_object: str,
) -> dict[str, Any]:
    """The object of one watch event when the watch asked for ``as=Table``: a Table with the
    event's object as its only row (kubectl prints it, under the headers it printed for the
    list). A BOOKMARK becomes a Table without rows that carries the resourceVersion; an ERROR
    keeps its Status."""
    if event_type == "ERROR":
        return obj
    if event_type == "BOOKMARK":
        columns, _ = _columns_and_printer(rt)
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")},
            "columnDefinitions": columns,
            "rows": [],
        }
    return to_table(server, rt, obj, is_list=False, include_object=include_object)


def watch_line(
    server: Storage,
    rt: ResourceType,
    event_type: str,
    obj: dict[str, Any],
    *,
    include_object: str,
) -> bytes:
    """One newline-terminated watch event whose object is :func:`event_table` of ``obj``."""
    table = event_table(server, rt, event_type, obj, include_object=include_object)
    return json.dumps({"type": event_type, "object": table}, separators=(",", ":")).encode() + b"\n"


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a Table (``application/json;as=Table;...``)."""
    return any("as=Table" in part for part in accept.split(","))


def check_include_object(include_object: str) -> str:
    """The ``includeObject`` query parameter ("" means Metadata), or 400 BadRequest."""
    value = include_object or "Metadata"
    if value not in INCLUDE_OBJECT:
        raise bad_request(
            f'includeObject: unsupported value "{include_object}", supported values: '
            + ", ".join(f'"{v}"' for v in INCLUDE_OBJECT)
        )
    return value


def _row(rt: ResourceType, obj: dict[str, Any], cells: Row, include: str) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": cells}
    if include == "Object":
        row["object"] = {**obj, "apiVersion": rt.api_version, "kind": rt.kind}
    elif include == "Metadata":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata") or {},
        }
    return row


def _columns_and_printer(rt: ResourceType) -> tuple[list[dict[str, Any]], Printer]:
    if not rt.builtin:
        return _custom_columns(rt)
    found = BUILTIN_PRINTERS.get((rt.group, rt.kind))
    if found is not None:
        return [dict(c) for c in found[0]], found[1]
    return [dict(NAME_COLUMN), dict(AGE_COLUMN)], name_age


def _custom_columns(rt: ResourceType) -> tuple[list[dict[str, Any]], Printer]:
    """Name plus the CRD's additionalPrinterColumns (Age when it declares none)."""
    specs = rt.columns or [
        {
            "name": "Age",
            "type": "date",
            "jsonPath": ".metadata.creationTimestamp",
            "description": AGE_DESCRIPTION,
        }
    ]
    columns = [dict(NAME_COLUMN)]
    paths: list[tuple[jsonpath.Path | None, str]] = []
    for spec in specs:
        columns.append(
            column(
                spec.get("name", ""),
                spec.get("type", "string"),
                spec.get("description", ""),
                format_=spec.get("format", ""),
                priority=int(spec.get("priority") or 0),
            )
        )
        try:
            path: jsonpath.Path | None = jsonpath.parse(spec.get("jsonPath", ""))
        except jsonpath.JSONPathError:
            path = None  # the CRD API rejects these; an unparsable path shows an empty cell
        paths.append((path, spec.get("type", "string")))

    def printer(obj: dict[str, Any], now: dt.datetime) -> Row:
        cells: Row = [name_cell(obj)]
        for path, type_ in paths:
            found = path.find(obj) if path is not None else []
            cells.append(custom_cell(type_, found[0], now) if found else None)
        return cells

    return columns, printer


def custom_cell(type_: str, value: Any, now: dt.datetime) -> Any:
    """A printer-column value as the apiextensions table convertor types it (None when the
    value does not fit the column type)."""
    if value is None:
        return None
    if type_ == "string":
        return jsonpath.format_value(value)
    if type_ == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        return int(value) if isinstance(value, float) else None
    if type_ == "number":
        if isinstance(value, bool):
            return None
        return float(value) if isinstance(value, int | float) else None
    if type_ == "boolean":
        return value if isinstance(value, bool) else None
    if type_ == "date":
        if not isinstance(value, str):
            return None
        when = parse_time(value)
        return "<invalid>" if when is None else human_duration(now - when)
    return None
