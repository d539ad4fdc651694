"""Why a TrainJob failed, from its pods (docs/troubleshooting.md, "Why a TrainJob failed"):
pure functions over pods as the controller's pod cache keeps them.

JobSet's ``Failed`` condition names only the first failed Job. The reason a user needs (a
missing file, a corrupt shard, an out-of-memory kill) is in the failed container's terminated
state: its exit code, the kubelet's reason and its termination message, which the built-in
runtimes fill with the end of the container's output (``terminationMessagePolicy:
FallbackToLogsOnError``). Pods a Job gives up on are deleted by the Job controller, so the
controller keeps what it needs of each pod as it watches them (:func:`slim_pod`) and reads the
first failure from there: :func:`first_failure`, :func:`describe`.

"The first failure" is the container that terminated with a non-zero exit code earliest
(``finishedAt``), among the pods of the JobSet's latest restart attempt (a JobSet that
restarted failed for the last attempt's reasons, not the first's). A container that restarted
in place (``restartPolicy: OnFailure``) counts by its ``lastState``. A container killed (137,
143) once its pod was being deleted is left out: the Job controller stops the other pods of a
Job that failed, JobSet those of a JobSet that failed or restarts; that is a consequence, and
``finishedAt`` counts whole seconds, so it would often tie with the cause.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from trainer.jobset import contract as jsc
from trainer.machinery.times import format_time, parse_time

Obj = dict[str, Any]

LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
MAX_OUTPUT_LINES = 80
MAX_OUTPUT_BYTES = 2048
"""The last output quoted: the kubelet's bound for a log-tail termination message."""
CAUSE_MARK = "first failure: "
"""How the cause starts in a ``Failed`` message (after JobSet's own)."""
MAX_CAUSE = 3072
"""The whole cause, output included, in a condition message (Kubernetes allows 32 KiB)."""

_KEPT_LABELS = (
    jsc.LABEL_JOBSET_NAME,
    jsc.LABEL_JOBSET_UID,
    jsc.LABEL_REPLICATED_JOB,
    jsc.LABEL_JOB_INDEX,
    jsc.LABEL_RESTART_ATTEMPT,
    LABEL_COMPLETION_INDEX,
)


def _terminated(state: Any) -> Obj:
    terminated = (state or {}).get("terminated") if isinstance(state, dict) else None
    return terminated if isinstance(terminated, dict) else {}


def _slim_status(status: Obj) -> Obj:
    out: Obj = {"name": status.get("name"), "restartCount": status.get("restartCount", 0)}
    for field in ("state", "lastState"):
        terminated = _terminated(status.get(field))
        if terminated.get("exitCode"):
            out[field] = {
                "terminated": {
                    key: terminated[key]
                    for key in ("exitCode", "reason", "message", "finishedAt", "signal")
                    if key in terminated
                }
            }
    return out


def slim_pod(pod: Obj) -> Obj:
    """What the failure cause needs of a pod (the pod cache's transform: names, JobSet labels,
    the terminated states of failed containers; no spec), so the controller's memory grows by
    little per pod even at tens of thousands of pods."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    slim_meta = {
        key: meta[key]
        for key in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        )
        if key in meta
    }
    slim_meta["labels"] = {k: labels[k] for k in _KEPT_LABELS if k in labels}
    slim_status: Obj = {}
    if status.get("reason"):
        slim_status["reason"] = status["reason"]
    for field in ("initContainerStatuses", "containerStatuses"):
        statuses = [s for s in status.get(field) or [] if isinstance(s, dict)]
        if statuses:
            slim_status[field] = [_slim_status(s) for s in statuses]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": slim_meta, "status": slim_status}


@dataclass(frozen=True)
class ContainerFailure:
    """One container that terminated with a non-zero exit code."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    init: bool
    replicated_job: str
    job_index: str
    node_index: str
    restart_attempt: int
    exit_code: int
    reason: str
    finished_at: str
    output: str
    stopped: bool = False
    """Killed by a signal after its pod was being deleted (the Job controller deleting the
    pods of a failed Job, a JobSet restart): a consequence of a failure, not its cause."""

    @property
    def key(self) -> tuple[str, str, str]:
        """Identifies this termination (a container that fails again is a new one)."""
        return self.pod_uid, self.container, self.finished_at

    def where(self) -> str:
        """``replicated job node, node index 1, pod P, container C``: the rank a user knows
        first (the Job's completion index), then the names ``kubectl`` takes."""
        parts = [f"replicated job {self.replicated_job}"] if self.replicated_job else []
        if self.job_index not in ("", "0"):
            parts.append(f"job index {self.job_index}")
        if self.node_index:
            parts.append(f"node index {self.node_index}")
        kind = "init container" if self.init else "container"
        parts += [f"pod {self.pod}", f"{kind} {self.container}"]
        return ", ".join(parts)

    def summary(self) -> str:
        """``<where> exited with code 3 (Error)``."""
        reason = f" ({self.reason})" if self.reason else ""
        return f"{self.where()} exited with code {self.exit_code}{reason}"


def last_output(message: str) -> str:
    """The end of a termination message: at most :data:`MAX_OUTPUT_LINES` lines and
    :data:`MAX_OUTPUT_BYTES` bytes, whole lines where possible, blank ends dropped."""
    lines = message.strip("\n").splitlines()[-MAX_OUTPUT_LINES:]
    text = "\n".join(line.rstrip() for line in lines).strip("\n")
    data = text.encode()
    if len(data) <= MAX_OUTPUT_BYTES:
        return text
    tail = data[-MAX_OUTPUT_BYTES:].decode(errors="ignore")
    newline = tail.find("\n")
    return tail[newline + 1 :] if 0 <= newline < len(tail) - 1 else tail


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


KILLED_CODES = (128 + 9, 128 + 15)


def _deleting_since(meta: Obj) -> str | None:
    """When the pod's deletion began (``deletionTimestamp`` is when it must be gone: the
    deletion's time plus its grace period), as RFC 3339; None when it is not being deleted."""
    end = parse_time(meta.get("deletionTimestamp"))
    if end is None:
        return None
    grace = _int(meta.get("deletionGracePeriodSeconds"))
    return format_time(end - dt.timedelta(seconds=grace))


def failures_of(pod: Obj) -> list[ContainerFailure]:
    """Every failed termination a pod records (its current and last state per container)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    deleting = _deleting_since(meta)
    out = []
    for field, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for cs in status.get(field) or []:
            for state in ("state", "lastState"):
                terminated = _terminated(cs.get(state))
                code = _int(terminated.get("exitCode"))
                if not code:
                    continue
                out.append(
                    ContainerFailure(
                        namespace=str(meta.get("namespace") or ""),
                        pod=str(meta.get("name") or ""),
                        pod_uid=str(meta.get("uid") or ""),
                        container=str(cs.get("name") or ""),
                        init=init,
                        replicated_job=str(labels.get(jsc.LABEL_REPLICATED_JOB) or ""),
                        job_index=str(labels.get(jsc.LABEL_JOB_INDEX) or ""),
                        node_index=str(labels.get(LABEL_COMPLETION_INDEX) or ""),
                        restart_attempt=_int(labels.get(jsc.LABEL_RESTART_ATTEMPT)),
                        exit_code=code,
                        reason=str(terminated.get("reason") or status.get("reason") or ""),
                        finished_at=str(terminated.get("finishedAt") or ""),
                        output=last_output(str(terminated.get("message") or "")),
                        stopped=deleting is not None
                        and code in KILLED_CODES
                        and terminated.get("reason") in (None, "", "Error")
                        and str(terminated.get("finishedAt") or "") >= deleting,
                    )
                )
    return out


def jobset_failures(pods: list[Obj], jobset_uid: str | None) -> list[ContainerFailure]:
    """The failures of the pods of one JobSet (``jobset_uid``: only that incarnation of it,
    when known), latest restart attempt only, earliest first."""
    mine = [
        p
        for p in pods
        if jobset_uid is None
        or ((p.get("metadata") or {}).get("labels") or {}).get(jsc.LABEL_JOBSET_UID) == jobset_uid
    ]
    failures = [f for p in mine for f in failures_of(p) if not f.stopped]
    if not failures:
        return []
    latest = max(f.restart_attempt for f in failures)
    current = [f for f in failures if f.restart_attempt == latest]
    return sorted(current, key=lambda f: (f.finished_at, f.pod, f.container))


def first_failure(pods: list[Obj], jobset_uid: str | None) -> ContainerFailure | None:
    failures = jobset_failures(pods, jobset_uid)
    return failures[0] if failures else None


def describe(failure: ContainerFailure, limit: int = MAX_CAUSE, prefix: str = CAUSE_MARK) -> str:
    """The cause as the TrainJob's ``Failed`` message carries it, after JobSet's own:
    ``first failure: <summary>; last output:\\n<lines>``, the output cut from the front to
    keep the whole within ``limit``."""
    head = f"{prefix}{failure.summary()}"
    if not failure.output:
        return head[:limit]
    head += "; last output:\n"
    room = limit - len(head.encode())
    if room <= 0:
        return head[:limit]
    output = failure.output.encode()[-room:].decode(errors="ignore")
    return head + output


def event_message(failure: ContainerFailure) -> str:
    """The Warning Event's note for one failed container (an Event note stays under 1 KiB:
    the last lines that fit)."""
    return describe(failure, limit=1000, prefix="")


class FailedPods:
    """The pod cache's handler that keeps, per JobSet, the pods with a failed container, also
    after the Job controller deleted them (only what :func:`slim_pod` kept), until the
    controller forgets the TrainJob. In memory only: after a controller restart a deleted pod
    is gone, and the TrainJob's ``Failed`` message is JobSet's own (never a guess)."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], dict[str, Obj]] = {}

    def __call__(self, kind: str, obj: Obj, old: Obj | None) -> tuple[str, str] | None:
        """Record ``obj``; the ``(namespace, jobset)`` it concerns when it has a failure."""
        meta = obj.get("metadata") or {}
        jobset = (meta.get("labels") or {}).get(jsc.LABEL_JOBSET_NAME)
        if not jobset or not failures_of(obj):
            return None
        key = (str(meta.get("namespace") or ""), str(jobset))
        self._pods.setdefault(key, {})[str(meta.get("uid") or meta.get("name"))] = obj
        return key

    def pods(self, namespace: str, jobset: str) -> list[Obj]:
        return list(self._pods.get((namespace, jobset), {}).values())

    def forget(self, namespace: str, jobset: str) -> None:
        self._pods.pop((namespace, jobset), None)
