"""Why a TrainJob's pods failed, for ``trainer run``: a JobSet's failure condition names only
the first failed Job, while the reason (a missing dataset, an import error) is in the failed
container's termination message (``terminationMessagePolicy: FallbackToLogsOnError`` puts the
log's tail there). Pure: pods in, one line per failed container out; :class:`DeletedPods` keeps
the pods the Job controller deleted, whose last state is the only record of why."""

from __future__ import annotations

from typing import Any

from trainer.jobset import contract as jsc
from trainer.kube.informer import DELETED


def failed_containers(pods: list[dict[str, Any]], jobset: str) -> list[str]:
    """``pod P container C exited N: <last line of its message>`` for each container of the
    JobSet's pods that terminated with a non-zero exit code, by pod name; ``exited N (R)``
    when its reason R says more than ``Error`` (``OOMKilled``: over its memory limit)."""
    lines = []
    for pod in sorted(pods, key=lambda p: str(p.get("metadata", {}).get("name"))):
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(jsc.LABEL_JOBSET_NAME) != jobset:
            continue
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        for status in statuses:
            state = status.get("state") or {}
            terminated = state.get("terminated") or (status.get("lastState") or {}).get(
                "terminated"
            )
            if not terminated or not terminated.get("exitCode"):
                continue
            message = [ln for ln in str(terminated.get("message") or "").splitlines() if ln]
            why = f": {message[-1].strip()}" if message else ""
            reason = str(terminated.get("reason") or "")
            named = f" ({reason})" if reason and reason not in ("Error", "Completed") else ""
            lines.append(
                f"pod {meta.get('name')} container {status.get('name')} exited "
                f"{terminated.get('exitCode')}{named}{why}"
            )
    return lines


class DeletedPods:
    """A pod informer's handler that keeps the last state of each pod deleted while ``trainer
    run`` watches: the Job controller deletes a pod it gives up on (its container restarted in
    place past ``backoffLimit``), and only that state (``lastState``) says why it failed."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, Any]] = {}

    def __call__(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == DELETED:
            self._pods[str((obj.get("metadata") or {}).get("uid"))] = obj

    def list(self, namespace: str) -> list[dict[str, Any]]:
        return [p for p in self._pods.values() if p["metadata"].get("namespace") == namespace]
