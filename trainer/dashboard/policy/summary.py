"""What the dashboard shows of a TrainJob, as pure functions of API objects (no I/O).

Every function takes wire objects (dicts as the API serves them) and returns plain JSON-ready
values; the pages render them as text (Jinja2 autoescape, ``textContent`` in the script), so
nothing here escapes anything. Missing or malformed fields give an empty value, never an
exception: a dashboard must show whatever a cluster holds.

- :func:`row`: one line of the TrainJobs list: state and why (queued by Kueue in a named
  queue, a build error, the failure reason), runtime, nodes, progress and ETA from
  ``status.trainerStatus`` (docs/status-server.md), creation time.
- :func:`conditions`, :func:`steps`, :func:`pods`, :func:`events`: the sections of one
  TrainJob's page.
"""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.jobset import contract as jsc
from trainer.machinery.times import parse_time

Obj = dict[str, Any]

STATES = ("Created", "Suspended", "Pending", "Running", "Complete", "Failed")


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def meta(obj: Obj) -> Obj:
    return _dict(obj.get("metadata"))


def epoch(value: Any) -> float | None:
    """A Kubernetes time as seconds since the epoch (None when absent or malformed)."""
    try:
        when = parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return when.timestamp() if when is not None else None


def _condition(job: Obj, type_: str) -> Obj | None:
    for cond in _list(_dict(job.get("status")).get("conditions")):
        if isinstance(cond, dict) and cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


def state(job: Obj) -> str:
    """``status.state`` (Suspended, Pending, Running, Complete, Failed), or Created before
    the controller wrote one."""
    value = _text(_dict(job.get("status")).get("state"))
    return value if value in STATES else "Created"


def state_detail(job: Obj) -> str:
    """Why the TrainJob is in its state, in one line (empty when nothing needs saying)."""
    current = state(job)
    labels = _dict(meta(job).get("labels"))
    queue = _text(labels.get(c.LABEL_KUEUE_QUEUE_NAME))
    failed = _condition(job, c.COND_FAILED)
    if current == "Failed" and failed is not None:
        return f"{_text(failed.get('reason'))}: {_text(failed.get('message'))}".strip(": ")
    build = _condition(job, c.COND_BUILD_FAILED)
    if build is not None:
        return f"{_text(build.get('reason'))}: {_text(build.get('message'))}".strip(": ")
    if current == "Suspended":
        return f"queued by Kueue in {queue}" if queue else "suspended"
    if current == "Pending" and queue:
        return f"admitted by Kueue from {queue}"
    return ""


def trainer_status(job: Obj) -> Obj:
    return _dict(_dict(job.get("status")).get("trainerStatus"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def row(job: Obj, runtime: Obj | None = None) -> Obj:
    """One TrainJob as the list shows it. ``eta`` is the reported remaining seconds at
    ``updated`` (epoch seconds); the page counts it down. ``nodes`` is the TrainJob's
    ``numNodes``, else its ``runtime``'s (when given)."""
    m = meta(job)
    spec = _dict(job.get("spec"))
    ref = _dict(spec.get("runtimeRef"))
    ts = trainer_status(job)
    progress = _number(ts.get("progressPercentage"))
    eta = _number(ts.get("estimatedRemainingSeconds"))
    nodes = _dict(spec.get("trainer")).get("numNodes")
    if nodes is None and runtime is not None:
        nodes = _dict(_dict(runtime.get("spec")).get("mlPolicy")).get("numNodes")
    return {
        "namespace": _text(m.get("namespace")),
        "name": _text(m.get("name")),
        "state": state(job),
        "detail": state_detail(job),
        "suspended": bool(spec.get("suspend")),
        "queue": _text(_dict(m.get("labels")).get(c.LABEL_KUEUE_QUEUE_NAME)),
        "runtime": _text(ref.get("name")),
        "runtimeKind": _text(ref.get("kind") or c.KIND_CLUSTER_TRAINING_RUNTIME),
        "nodes": nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else None,
        "progress": None if progress is None else max(0.0, min(100.0, progress)),
        "eta": None if eta is None else max(0.0, eta),
        "updated": epoch(ts.get("lastUpdatedTime")),
        "created": epoch(m.get("creationTimestamp")),
        "metrics": [
            {"name": _text(x.get("name")), "value": _text(x.get("value"))}
            for x in _list(ts.get("metrics"))
            if isinstance(x, dict)
        ],
    }


def conditions(job: Obj) -> list[Obj]:
    """The TrainJob's conditions as a timeline, oldest transition first."""
    out = [
        {
            "type": _text(x.get("type")),
            "status": _text(x.get("status")),
            "reason": _text(x.get("reason")),
            "message": _text(x.get("message")),
            "time": epoch(x.get("lastTransitionTime")),
        }
        for x in _list(_dict(job.get("status")).get("conditions"))
        if isinstance(x, dict)
    ]
    return sorted(out, key=lambda x: x["time"] or 0.0)


def steps(job: Obj, jobs: list[Obj]) -> list[Obj]:
    """Each step (replicated job: initializers, cache, node, launcher) with its Jobs' pod
    counts from ``status.jobsStatus`` and the number of Jobs the cluster holds for it."""
    count: dict[str, int] = {}
    for j in jobs:
        name = _text(_dict(meta(j).get("labels")).get(jsc.LABEL_REPLICATED_JOB))
        count[name] = count.get(name, 0) + 1
    out = []
    for js in _list(_dict(job.get("status")).get("jobsStatus")):
        if not isinstance(js, dict):
            continue
        name = _text(js.get("name"))
        out.append(
            {
                "name": name,
                "jobs": count.get(name, 0),
                **{k: int(js.get(k) or 0) for k in ("active", "ready", "succeeded", "failed")},
                "suspended": int(js.get("suspended") or 0),
            }
        )
    return out


def _terminated(name: str, term: Obj, prefix: str = "") -> str:
    reason = _text(term.get("reason")) or "Terminated"
    code = term.get("exitCode")
    text = f"{name}: {prefix}{reason}" + (f" (exit code {code})" if code is not None else "")
    message = _text(term.get("message")).strip()
    return text + (f": {message}" if message else "")


def pod(p: Obj) -> Obj:
    """A pod as its section shows it: phase, restarts, node, and why containers stopped."""
    status = _dict(p.get("status"))
    reasons: list[str] = []
    restarts = 0
    containers = [_text(x.get("name")) for x in _list(_dict(p.get("spec")).get("containers"))]
    restarted: list[str] = []
    for cs in _list(status.get("initContainerStatuses")) + _list(status.get("containerStatuses")):
        if not isinstance(cs, dict):
            continue
        name = _text(cs.get("name"))
        count = int(cs.get("restartCount") or 0)
        restarts += count
        if count:
            restarted.append(name)
        st, last = _dict(cs.get("state")), _dict(cs.get("lastState"))
        if "terminated" in st and _dict(st["terminated"]).get("exitCode") not in (0, None):
            reasons.append(_terminated(name, _dict(st["terminated"])))
        waiting = _dict(st.get("waiting"))
        if waiting.get("reason") and waiting.get("reason") != "ContainerCreating":
            reasons.append(f"{name}: waiting: {_text(waiting.get('reason'))}")
        if "terminated" in last:
            reasons.append(_terminated(name, _dict(last["terminated"]), "previously "))
    if status.get("reason"):
        reasons.append(f"{_text(status.get('reason'))}: {_text(status.get('message'))}")
    labels = _dict(meta(p).get("labels"))
    return {
        "name": _text(meta(p).get("name")),
        "step": _text(labels.get(jsc.LABEL_REPLICATED_JOB)),
        "phase": _text(status.get("phase")) or "Pending",
        "restarts": restarts,
        "node": _text(_dict(p.get("spec")).get("nodeName")),
        "reasons": reasons,
        "containers": containers,
        "restarted": restarted,
        "deleted": False,
    }


def pods(items: list[Obj], deleted: list[Obj] | None = None) -> list[Obj]:
    """The pods' rows, and those of ``deleted`` pods (deleted by their Job controller while
    their JobSet stays) marked ``deleted``, as they last were."""
    rows = [pod(p) for p in items] + [{**pod(p), "deleted": True} for p in deleted or []]
    return sorted(rows, key=lambda x: (x["step"], x["name"]))


def event(e: Obj) -> Obj:
    involved = _dict(e.get("involvedObject")) or _dict(e.get("regarding"))
    when = (
        epoch(e.get("lastTimestamp"))
        or epoch(e.get("eventTime"))
        or epoch(_dict(e.get("series")).get("lastObservedTime"))
        or epoch(e.get("firstTimestamp"))
        or epoch(meta(e).get("creationTimestamp"))
    )
    return {
        "time": when,
        "type": _text(e.get("type")),
        "reason": _text(e.get("reason")),
        "object": f"{_text(involved.get('kind'))}/{_text(involved.get('name'))}",
        "message": _text(e.get("message") or e.get("note")),
        "count": int(e.get("count") or 1),
    }


def events(items: list[Obj]) -> list[Obj]:
    """The events of a TrainJob and everything it owns, in one list, newest last."""
    return sorted((event(e) for e in items), key=lambda x: x["time"] or 0.0)
