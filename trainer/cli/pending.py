"""Why a TrainJob's pods wait for a node, for ``trainer run``: the scheduler's message on its
pods (``PodScheduled=False``), what the JobSet needs against what the node has free, and
whether it can never fit (docs/local-plane.md, "Scheduling"). Pure: objects in, a
:class:`Pending` out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainer.jobset import contract as jsc
from trainer.local.executor.scheduler.policy import scheduling as sch


@dataclass(frozen=True)
class Pending:
    message: str
    """kube-scheduler's message on the first waiting pod."""
    pods: int
    needs: str
    """``needs 2 nvidia.com/gpu, 1 free`` (empty when nothing is short)."""
    never: bool
    """No node could take the JobSet's pods at once, even with nothing else running."""

    def line(self) -> str:
        needs = f" ({self.needs})" if self.needs else ""
        return f"waiting: {self.pods} pod(s) Pending: {self.message}{needs}"


def pending(
    jobset_name: str,
    namespace: str,
    jobset: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
) -> Pending | None:
    """Why the JobSet's pods wait (None when none of them is reported Unschedulable)."""
    pods = list(pods)
    views = [sch.pod_view(p) for p in pods]
    node_views = [sch.node_view(n) for n in nodes]
    waiting: list[tuple[sch.PodView, str]] = []
    for pod, view in zip(pods, views, strict=True):
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if view.namespace != namespace or labels.get(jsc.LABEL_JOBSET_NAME) != jobset_name:
            continue
        condition: Mapping[str, Any] = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ),
            {},
        )
        if view.pending and condition.get("reason") == "Unschedulable":
            waiting.append((view, str(condition.get("message") or "")))
    if not waiting:
        return None
    gang = sch.jobset_gang(jobset) if jobset is not None else None
    if gang is None:
        gang = sch.Gang("", (tuple(v.place for v, _ in waiting),))
    needs = ""
    if len(node_views) == 1:
        needs = sch.shortfall(gang, node_views[0], sch.free_on(node_views[0], views))
    return Pending(
        message=waiting[0][1],
        pods=len(waiting),
        needs=needs,
        never=bool(node_views) and not sch.fits_empty(gang, node_views),
    )
