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
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainer.local.apiserver import jsonpath
from trainer.local.apiserver.errors import bad_request
from trainer.local.apiserver.resources import ResourceType

if TYPE_CHECKING:
    from trainer.local.apiserver.core.storage import Storage

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


# --- entry points ----------------------------------------------------------------------------


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


# --- columns ---------------------------------------------------------------------------------


def _column(
    name: str, type_: str = "string", description: str = "", *, format_: str = "", priority: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "format": format_,
        "description": description,
        "priority": priority,
    }


NAME_COLUMN = _column("Name", "string", NAME_DESCRIPTION, format_="name")
AGE_COLUMN = _column("Age", "string", AGE_DESCRIPTION)


def _columns_and_printer(rt: ResourceType) -> tuple[list[dict[str, Any]], Printer]:
    if not rt.builtin:
        return _custom_columns(rt)
    found = BUILTIN_PRINTERS.get((rt.group, rt.kind))
    if found is not None:
        return [dict(c) for c in found[0]], found[1]
    return [dict(NAME_COLUMN), dict(AGE_COLUMN)], _name_age


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
            _column(
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
        cells: Row = [_name(obj)]
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
        when = _parse_time(value)
        return "<invalid>" if when is None else human_duration(now - when)
    return None


# --- time ------------------------------------------------------------------------------------


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


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


def _since(value: Any, now: dt.datetime) -> str:
    """``translateTimestampSince``: the age of a timestamp, ``<unknown>`` without one."""
    when = _parse_time(value)
    return "<unknown>" if when is None else human_duration(now - when)


def _rfc3339(value: Any) -> str:
    when = _parse_time(value)
    return "<unknown>" if when is None else when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- built-in printers -----------------------------------------------------------------------


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _age(obj: dict[str, Any], now: dt.datetime) -> str:
    return _since((obj.get("metadata") or {}).get("creationTimestamp"), now)


def _name_age(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [_name(obj), _age(obj, now)]


def _true_condition(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _pod(obj: dict[str, Any], now: dt.datetime) -> Row:
    """kubectl's pod printer: READY n/m, STATUS from the phase, reasons and container states,
    RESTARTS with the time of the last restart."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    sidecars = {n for n, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total = len(spec.get("containers") or []) + len(sidecars)
    ready = 0
    restarts = 0
    sidecar_restarts = 0
    last_restart: dt.datetime | None = None
    sidecar_last: dt.datetime | None = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    def later(current: dt.datetime | None, cs: dict[str, Any]) -> dt.datetime | None:
        term = (cs.get("lastState") or {}).get("terminated") or {}
        when = _parse_time(term.get("finishedAt"))
        if when is not None and (current is None or when > current):
            return when
        return current

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += int(cs.get("restartCount") or 0)
        last_restart = later(last_restart, cs)
        sidecar = cs.get("name") in sidecars
        if sidecar:
            sidecar_restarts += int(cs.get("restartCount") or 0)
            sidecar_last = later(sidecar_last, cs)
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting") or {}
        if terminated is not None and int(terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if terminated is not None:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        elif waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    if not initializing or _true_condition(obj, "Initialized"):
        restarts, last_restart = sidecar_restarts, sidecar_last
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            last_restart = later(last_restart, cs)
            state = cs.get("state") or {}
            waiting = state.get("waiting") or {}
            terminated = state.get("terminated")
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated is not None:
                if terminated.get("signal"):
                    reason = f"Signal:{terminated['signal']}"
                else:
                    reason = f"ExitCode:{terminated.get('exitCode', 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _true_condition(obj, "Ready") else "NotReady"
    if meta.get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_restart)} ago)"
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        wanted = {g.get("conditionType") for g in gates}
        met = sum(
            1
            for c in status.get("conditions") or []
            if c.get("type") in wanted and c.get("status") == "True"
        )
        gates_text = f"{met}/{len(gates)}"
    return [
        _name(obj),
        f"{ready}/{total}",
        reason,
        restarts_text,
        _age(obj, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]


def _containers_images(template: dict[str, Any]) -> tuple[str, str]:
    containers = ((template.get("spec") or {}).get("containers")) or []
    return (
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
    )


def _selector_text(selector: dict[str, Any] | None) -> str:
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) or "<none>"


def _job(obj: dict[str, Any], now: dt.datetime) -> Row:
    """kubectl's job printer: STATUS, COMPLETIONS succeeded/completions, DURATION."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    else:
        parallelism = int(spec.get("parallelism") or 0)
        completions = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    start = _parse_time(status.get("startTime"))
    end = _parse_time(status.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration((end or now) - start)
    if _true_condition(obj, "Complete"):
        state = "Complete"
    elif _true_condition(obj, "Failed"):
        state = "Failed"
    elif (obj.get("metadata") or {}).get("deletionTimestamp"):
        state = "Terminating"
    elif _true_condition(obj, "Suspended"):
        state = "Suspended"
    elif _true_condition(obj, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    containers, images = _containers_images(spec.get("template") or {})
    return [
        _name(obj),
        state,
        completions,
        duration,
        _age(obj, now),
        containers,
        images,
        _selector_text(spec.get("selector")),
    ]


def _namespace(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [_name(obj), (obj.get("status") or {}).get("phase", ""), _age(obj, now)]


def _configmap(obj: dict[str, Any], now: dt.datetime) -> Row:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [_name(obj), count, _age(obj, now)]


def _secret(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [_name(obj), obj.get("type", ""), len(obj.get("data") or {}), _age(obj, now)]


def _service(obj: dict[str, Any], now: dt.datetime) -> Row:
    spec = obj.get("spec") or {}
    svc_type = spec.get("type") or "ClusterIP"
    cluster_ip = spec.get("clusterIP") or "<none>"
    external = "<none>"
    if svc_type == "ExternalName":
        external = spec.get("externalName") or "<none>"
    elif svc_type == "LoadBalancer":
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        ips = [
            i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")
        ]
        ips += spec.get("externalIPs") or []
        external = ",".join(ips) if ips else "<pending>"
    elif spec.get("externalIPs"):
        external = ",".join(spec["externalIPs"])
    ports = []
    for p in spec.get("ports") or []:
        protocol = p.get("protocol") or "TCP"
        if p.get("nodePort"):
            ports.append(f"{p.get('port')}:{p['nodePort']}/{protocol}")
        else:
            ports.append(f"{p.get('port')}/{protocol}")
    selector = spec.get("selector") or {}
    return [
        _name(obj),
        svc_type,
        cluster_ip,
        external,
        ",".join(ports) or "<none>",
        _age(obj, now),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


def _service_account(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [_name(obj), len(obj.get("secrets") or []), _age(obj, now)]


def _core_event(obj: dict[str, Any], now: dt.datetime) -> Row:
    """kubectl's event printer (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE; the rest wide)."""
    first = obj.get("firstTimestamp") or obj.get("eventTime")
    last = obj.get("lastTimestamp") or first
    count = int(obj.get("count") or 0)
    series = obj.get("series")
    if series:
        last = series.get("lastObservedTime") or last
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    involved = obj.get("involvedObject") or {}
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = obj.get("source") or {}
    origin = source.get("component") or obj.get("reportingComponent") or ""
    host = source.get("host") or obj.get("reportingInstance") or ""
    return [
        _since(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{origin}, {host}" if host else origin,
        str(obj.get("message", "")).strip(),
        _since(first, now),
        count,
        _name(obj),
    ]


def _events_event(obj: dict[str, Any], now: dt.datetime) -> Row:
    """events.k8s.io/v1 Events, printed like core Events."""
    return _core_event(
        {
            "metadata": obj.get("metadata"),
            "firstTimestamp": obj.get("deprecatedFirstTimestamp"),
            "lastTimestamp": obj.get("deprecatedLastTimestamp"),
            "eventTime": obj.get("eventTime"),
            "count": obj.get("deprecatedCount"),
            "series": obj.get("series"),
            "involvedObject": obj.get("regarding") or {},
            "source": obj.get("deprecatedSource") or {},
            "reportingComponent": obj.get("reportingController"),
            "reportingInstance": obj.get("reportingInstance"),
            "type": obj.get("type"),
            "reason": obj.get("reason"),
            "message": obj.get("note"),
        },
        now,
    )


def _crd(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [_name(obj), _rfc3339((obj.get("metadata") or {}).get("creationTimestamp"))]


def _created_at(obj: dict[str, Any], now: dt.datetime) -> Row:
    return _crd(obj, now)


def _priority_class(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [
        _name(obj),
        int(obj.get("value") or 0),
        bool(obj.get("globalDefault")),
        _age(obj, now),
        obj.get("preemptionPolicy") or "PreemptLowerPriority",
    ]


def _runtime_class(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [_name(obj), obj.get("handler", ""), _age(obj, now)]


def _lease(obj: dict[str, Any], now: dt.datetime) -> Row:
    holder = (obj.get("spec") or {}).get("holderIdentity") or ""
    return [_name(obj), holder, _age(obj, now)]


def _webhooks(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [_name(obj), len(obj.get("webhooks") or []), _age(obj, now)]


_EVENT_COLUMNS = [
    _column("Last Seen", "string", "Time of the last occurrence of the event."),
    _column("Type", "string", "Type of this event (Normal, Warning)."),
    _column("Reason", "string", "Why the action was taken, in short machine form."),
    _column("Object", "string", "The object that this event is about."),
    _column("Subobject", "string", "The part of the object (a field path).", priority=1),
    _column("Source", "string", "The component reporting this event.", priority=1),
    _column("Message", "string", "A human-readable description of the event."),
    _column("First Seen", "string", "Time of the first occurrence of the event.", priority=1),
    _column("Count", "integer", "The number of times this event has occurred.", priority=1),
    _column("Name", "string", NAME_DESCRIPTION, format_="name", priority=1),
]
_CREATED_AT = _column("Created At", "date", AGE_DESCRIPTION)

BUILTIN_PRINTERS: dict[tuple[str, str], tuple[list[dict[str, Any]], Printer]] = {
    ("", "Pod"): (
        [
            NAME_COLUMN,
            _column("Ready", "string", "The aggregate readiness state of this pod."),
            _column("Status", "string", "The aggregate status of the containers in this pod."),
            _column(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted and when "
                "the last container in this pod has restarted.",
            ),
            AGE_COLUMN,
            _column("IP", "string", "IP address allocated to the pod.", priority=1),
            _column("Node", "string", "The node the pod is bound to.", priority=1),
            _column("Nominated Node", "string", "The node the pod is nominated to.", priority=1),
            _column("Readiness Gates", "string", "Readiness gates met.", priority=1),
        ],
        _pod,
    ),
    ("batch", "Job"): (
        [
            NAME_COLUMN,
            _column("Status", "string", "Status of the job."),
            _column("Completions", "string", "The number of pods which reached phase Succeeded."),
            _column("Duration", "string", "Time required to complete the job."),
            AGE_COLUMN,
            _column("Containers", "string", "Names of each container in the template.", priority=1),
            _column(
                "Images",
                "string",
                "Images referenced by each container in the template.",
                priority=1,
            ),
            _column("Selector", "string", "A label query over pods of the job.", priority=1),
        ],
        _job,
    ),
    ("", "Namespace"): (
        [NAME_COLUMN, _column("Status", "string", "The status of the namespace"), AGE_COLUMN],
        _namespace,
    ),
    ("", "ConfigMap"): (
        [NAME_COLUMN, _column("Data", "string", "Number of entries in the data."), AGE_COLUMN],
        _configmap,
    ),
    ("", "Secret"): (
        [
            NAME_COLUMN,
            _column("Type", "string", "The type of the secret"),
            _column("Data", "string", "Number of entries in the data."),
            AGE_COLUMN,
        ],
        _secret,
    ),
    ("", "Service"): (
        [
            NAME_COLUMN,
            _column("Type", "string", "The type of the service."),
            _column("Cluster-IP", "string", "The IP address of the service."),
            _column("External-IP", "string", "External IP addresses of the service."),
            _column("Port(s)", "string", "The ports exposed by the service."),
            AGE_COLUMN,
            _column("Selector", "string", "The label selector of the service.", priority=1),
        ],
        _service,
    ),
    ("", "ServiceAccount"): (
        [NAME_COLUMN, _column("Secrets", "string", "Number of secrets."), AGE_COLUMN],
        _service_account,
    ),
    ("", "Event"): (_EVENT_COLUMNS, _core_event),
    ("events.k8s.io", "Event"): (_EVENT_COLUMNS, _events_event),
    ("", "LimitRange"): ([NAME_COLUMN, _CREATED_AT], _created_at),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): ([NAME_COLUMN, _CREATED_AT], _crd),
    ("scheduling.k8s.io", "PriorityClass"): (
        [
            NAME_COLUMN,
            _column("Value", "integer", "The priority value."),
            _column("Global-Default", "boolean", "Whether this is the global default."),
            AGE_COLUMN,
            _column("PreemptionPolicy", "string", "The policy for preempting pods."),
        ],
        _priority_class,
    ),
    ("node.k8s.io", "RuntimeClass"): (
        [NAME_COLUMN, _column("Handler", "string", "The CRI handler."), AGE_COLUMN],
        _runtime_class,
    ),
    ("coordination.k8s.io", "Lease"): (
        [NAME_COLUMN, _column("Holder", "string", "The holder of the lease."), AGE_COLUMN],
        _lease,
    ),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): (
        [NAME_COLUMN, _column("Webhooks", "integer", "Number of webhooks."), AGE_COLUMN],
        _webhooks,
    ),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): (
        [NAME_COLUMN, _column("Webhooks", "integer", "Number of webhooks."), AGE_COLUMN],
        _webhooks,
    ),
}
