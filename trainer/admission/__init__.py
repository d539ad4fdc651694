"""Pure validation and defaulting of TrainJobs and runtimes (upstream's webhooks, plus,
beyond upstream, the JobSet name budget; docs/design.md, "The API server: schema and
admission"). Everything the rules need of the cluster is passed in as a
:class:`~trainer.admission.types.ClusterView`; nothing here does I/O."""

from __future__ import annotations

from trainer.admission.types import ClusterView, Verdict

__all__ = ["ClusterView", "Verdict"]
