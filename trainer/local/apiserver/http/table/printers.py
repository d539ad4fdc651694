"""The built-in kinds' printers: for each kind, its columns and the function computing a
row's cells, as kube-apiserver's printers do (Pod ready/status/restarts, Job completions,
Service ports, Events...)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from trainer.local.apiserver.http.table.cells import (
    AGE_COLUMN,
    AGE_DESCRIPTION,
    NAME_COLUMN,
    NAME_DESCRIPTION,
    Printer,
    Row,
    age_cell,
    column,
    human_duration,
    name_cell,
    parse_time,
    rfc3339,
    since,
    true_condition,
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
        when = parse_time(term.get("finishedAt"))
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
    if not initializing or true_condition(obj, "Initialized"):
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
            reason = "Running" if true_condition(obj, "Ready") else "NotReady"
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
        name_cell(obj),
        f"{ready}/{total}",
        reason,
        restarts_text,
        age_cell(obj, now),
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
    start = parse_time(status.get("startTime"))
    end = parse_time(status.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration((end or now) - start)
    if true_condition(obj, "Complete"):
        state = "Complete"
    elif true_condition(obj, "Failed"):
        state = "Failed"
    elif (obj.get("metadata") or {}).get("deletionTimestamp"):
        state = "Terminating"
    elif true_condition(obj, "Suspended"):
        state = "Suspended"
    elif true_condition(obj, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    containers, images = _containers_images(spec.get("template") or {})
    return [
        name_cell(obj),
        state,
        completions,
        duration,
        age_cell(obj, now),
        containers,
        images,
        _selector_text(spec.get("selector")),
    ]


def _namespace(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [name_cell(obj), (obj.get("status") or {}).get("phase", ""), age_cell(obj, now)]


def _configmap(obj: dict[str, Any], now: dt.datetime) -> Row:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [name_cell(obj), count, age_cell(obj, now)]


def _secret(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [name_cell(obj), obj.get("type", ""), len(obj.get("data") or {}), age_cell(obj, now)]


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
        name_cell(obj),
        svc_type,
        cluster_ip,
        external,
        ",".join(ports) or "<none>",
        age_cell(obj, now),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


def _service_account(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [name_cell(obj), len(obj.get("secrets") or []), age_cell(obj, now)]


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
        since(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{origin}, {host}" if host else origin,
        str(obj.get("message", "")).strip(),
        since(first, now),
        count,
        name_cell(obj),
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
    return [name_cell(obj), rfc3339((obj.get("metadata") or {}).get("creationTimestamp"))]


def _created_at(obj: dict[str, Any], now: dt.datetime) -> Row:
    return _crd(obj, now)


def _priority_class(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [
        name_cell(obj),
        int(obj.get("value") or 0),
        bool(obj.get("globalDefault")),
        age_cell(obj, now),
        obj.get("preemptionPolicy") or "PreemptLowerPriority",
    ]


def _runtime_class(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [name_cell(obj), obj.get("handler", ""), age_cell(obj, now)]


def _lease(obj: dict[str, Any], now: dt.datetime) -> Row:
    holder = (obj.get("spec") or {}).get("holderIdentity") or ""
    return [name_cell(obj), holder, age_cell(obj, now)]


def _node(obj: dict[str, Any], now: dt.datetime) -> Row:
    """kube-apiserver's node printer: Ready / NotReady / Unknown (``,SchedulingDisabled`` when
    cordoned), roles from ``node-role.kubernetes.io/<role>`` labels."""
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = {"True": "Ready", "False": "NotReady"}.get(str((ready or {}).get("status")), "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        name_cell(obj),
        state,
        ",".join(r for r in roles if r) or "<none>",
        age_cell(obj, now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def _webhooks(obj: dict[str, Any], now: dt.datetime) -> Row:
    return [name_cell(obj), len(obj.get("webhooks") or []), age_cell(obj, now)]


_EVENT_COLUMNS = [
    column("Last Seen", "string", "Time of the last occurrence of the event."),
    column("Type", "string", "Type of this event (Normal, Warning)."),
    column("Reason", "string", "Why the action was taken, in short machine form."),
    column("Object", "string", "The object that this event is about."),
    column("Subobject", "string", "The part of the object (a field path).", priority=1),
    column("Source", "string", "The component reporting this event.", priority=1),
    column("Message", "string", "A human-readable description of the event."),
    column("First Seen", "string", "Time of the first occurrence of the event.", priority=1),
    column("Count", "integer", "The number of times this event has occurred.", priority=1),
    column("Name", "string", NAME_DESCRIPTION, format_="name", priority=1),
]
_CREATED_AT = column("Created At", "date", AGE_DESCRIPTION)

BUILTIN_PRINTERS: dict[tuple[str, str], tuple[list[dict[str, Any]], Printer]] = {
    ("", "Pod"): (
        [
            NAME_COLUMN,
            column("Ready", "string", "The aggregate readiness state of this pod."),
            column("Status", "string", "The aggregate status of the containers in this pod."),
            column(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted and when "
                "the last container in this pod has restarted.",
            ),
            AGE_COLUMN,
            column("IP", "string", "IP address allocated to the pod.", priority=1),
            column("Node", "string", "The node the pod is bound to.", priority=1),
            column("Nominated Node", "string", "The node the pod is nominated to.", priority=1),
            column("Readiness Gates", "string", "Readiness gates met.", priority=1),
        ],
        _pod,
    ),
    ("batch", "Job"): (
        [
            NAME_COLUMN,
            column("Status", "string", "Status of the job."),
            column("Completions", "string", "The number of pods which reached phase Succeeded."),
            column("Duration", "string", "Time required to complete the job."),
            AGE_COLUMN,
            column("Containers", "string", "Names of each container in the template.", priority=1),
            column(
                "Images",
                "string",
                "Images referenced by each container in the template.",
                priority=1,
            ),
            column("Selector", "string", "A label query over pods of the job.", priority=1),
        ],
        _job,
    ),
    ("", "Namespace"): (
        [NAME_COLUMN, column("Status", "string", "The status of the namespace"), AGE_COLUMN],
        _namespace,
    ),
    ("", "ConfigMap"): (
        [NAME_COLUMN, column("Data", "string", "Number of entries in the data."), AGE_COLUMN],
        _configmap,
    ),
    ("", "Secret"): (
        [
            NAME_COLUMN,
            column("Type", "string", "The type of the secret"),
            column("Data", "string", "Number of entries in the data."),
            AGE_COLUMN,
        ],
        _secret,
    ),
    ("", "Service"): (
        [
            NAME_COLUMN,
            column("Type", "string", "The type of the service."),
            column("Cluster-IP", "string", "The IP address of the service."),
            column("External-IP", "string", "External IP addresses of the service."),
            column("Port(s)", "string", "The ports exposed by the service."),
            AGE_COLUMN,
            column("Selector", "string", "The label selector of the service.", priority=1),
        ],
        _service,
    ),
    ("", "ServiceAccount"): (
        [NAME_COLUMN, column("Secrets", "string", "Number of secrets."), AGE_COLUMN],
        _service_account,
    ),
    ("", "Event"): (_EVENT_COLUMNS, _core_event),
    ("events.k8s.io", "Event"): (_EVENT_COLUMNS, _events_event),
    ("", "LimitRange"): ([NAME_COLUMN, _CREATED_AT], _created_at),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): ([NAME_COLUMN, _CREATED_AT], _crd),
    ("scheduling.k8s.io", "PriorityClass"): (
        [
            NAME_COLUMN,
            column("Value", "integer", "The priority value."),
            column("Global-Default", "boolean", "Whether this is the global default."),
            AGE_COLUMN,
            column("PreemptionPolicy", "string", "The policy for preempting pods."),
        ],
        _priority_class,
    ),
    ("node.k8s.io", "RuntimeClass"): (
        [NAME_COLUMN, column("Handler", "string", "The CRI handler."), AGE_COLUMN],
        _runtime_class,
    ),
    ("", "Node"): (
        [
            NAME_COLUMN,
            column("Status", "string", "The status of the node."),
            column("Roles", "string", "The roles of the node."),
            AGE_COLUMN,
            column("Version", "string", "Kubelet Version reported by the node."),
            column("Internal-IP", "string", "The node's internal IP.", priority=1),
            column("External-IP", "string", "The node's external IP.", priority=1),
            column("OS-Image", "string", "OS image reported by the node.", priority=1),
            column("Kernel-Version", "string", "Kernel version reported by the node.", priority=1),
            column(
                "Container-Runtime", "string", "Container runtime reported by the node.", priority=1
            ),
        ],
        _node,
    ),
    ("coordination.k8s.io", "Lease"): (
        [NAME_COLUMN, column("Holder", "string", "The holder of the lease."), AGE_COLUMN],
        _lease,
    ),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): (
        [NAME_COLUMN, column("Webhooks", "integer", "Number of webhooks."), AGE_COLUMN],
        _webhooks,
    ),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): (
        [NAME_COLUMN, column("Webhooks", "integer", "Number of webhooks."), AGE_COLUMN],
        _webhooks,
    ),
}
