"""Which pods a JobSet still waits on: each of its pods that is not Ready, named, with the
container and probe that hold it back.

The case this is for: an MPI launcher waits (JobSet ``dependsOn`` with status Ready) until
every "node" pod's sshd is Ready; an sshd that never answers its readiness probe keeps the
launcher from ever starting, and upstream JobSet has no deadline for it. The local JobSet
controller fails such a JobSet after ``trainer run --ready-timeout`` with these lines in its
message, and ``trainer run --timeout`` prints them when it gives up.
"""

from __future__ import annotations

from typing import Any

from trainer.jobset import contract as jsc


def _why(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    specs = {str(c.get("name")): c for c in (pod.get("spec") or {}).get("containers") or []}
    reasons = []
    for cs in status.get("containerStatuses") or []:
        if cs.get("ready"):
            continue
        name = str(cs.get("name"))
        state = cs.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        probe = (specs.get(name) or {}).get("readinessProbe") or {}
        if waiting:
            reasons.append(f"container {name} waiting: {waiting}")
        elif "running" in state and probe:
            kind = next((k for k in ("tcpSocket", "httpGet", "exec", "grpc") if k in probe), "")
            port = (probe.get(kind) or {}).get("port") if kind else None
            target = f"{kind} port {port}" if port is not None else kind
            reasons.append(f"container {name}: readinessProbe {target} has not passed")
    return f"{phase}, not Ready" + (f" ({'; '.join(reasons)})" if reasons else "")


def not_ready(pods: list[dict[str, Any]], jobset: str) -> list[str]:
    """One line per pod of ``jobset`` that is running or pending but not Ready."""
    lines = []
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(jsc.LABEL_JOBSET_NAME) != jobset:
            continue
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        if not ready:
            lines.append(f"pod {meta.get('namespace')}/{meta.get('name')}: {_why(pod)}")
    return lines
