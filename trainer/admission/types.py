"""What admission decides, and what it may read of the cluster (passed in: admission is pure).

Both types live in the runtime layer (:mod:`trainer.runtime.validation`), where the plugins'
validators return them too; they are re-exported here for the admission callers.
"""

from __future__ import annotations

from trainer.runtime.validation import ClusterView, Verdict

__all__ = ["ClusterView", "Verdict"]
