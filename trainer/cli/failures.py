"""Why a TrainJob's pods failed, for ``trainer run``: a JobSet's failure condition names only
the first failed Job, while the reason (a missing dataset, an import error) is in the failed
container's termination message (``terminationMessagePolicy: FallbackToLogsOnError`` puts the
log's tail there). Pure: pods in, one line per failed container out."""

from __future__ import annotations

from typing import Any

from trainer.api import jobset_contract as jsc


def failed_containers(pods: list[dict[str, Any]], jobset: str) -> list[str]:
    """``pod P container C exited N: <last line of its message>`` for each container of the
    JobSet's pods that terminated with a non-zero exit code, by pod name."""
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
            lines.append(
                f"pod {meta.get('name')} container {status.get('name')} exited "
                f"{terminated.get('exitCode')}{why}"
            )
    return lines
