"""The TrainJob defaulter (mutating webhook): it only stamps ``runtimePatches[].time``.

The time tells readers (Kueue, people) when a manager last changed its patch:

- CREATE: every patch without a time gets ``now``; a time the user sent is kept.
- UPDATE, per manager: a patch whose content (everything but ``time``) equals the old entry
  keeps the old time, whatever time the request carries; a changed patch gets ``now``, even if
  the request carries a time; a new manager's patch gets ``now`` unless the request set one.

``now`` is passed in (admission has no clock). The input is never mutated.
"""

from __future__ import annotations

from trainer.admission.patches import patch_content
from trainer.api.v1alpha1 import RuntimePatch, TrainJob


def _stamp(patch: RuntimePatch, old: RuntimePatch | None, now: str) -> str:
    """The time ``patch`` should carry, given the old entry of the same manager (if any)."""
    if old is None:
        return patch.time if patch.time is not None else now
    if patch_content(patch) == patch_content(old):
        # Unchanged: keep the old stamp. An old entry without one (stored before any
        # defaulting ran) gets the request's time, else now.
        if old.time is not None:
            return old.time
        return patch.time if patch.time is not None else now
    return now


def default_trainjob(new: TrainJob, old: TrainJob | None, now: str) -> TrainJob:
    """``new`` with its runtimePatch times set (module docstring); ``old`` is None on create.

    Returns a new TrainJob; ``new`` and ``old`` are left untouched. Only what changes is copied
    (the TrainJob, its spec, the restamped patches): the rest is shared with ``new``, so treat
    the result as read-only. (A deep copy of a TrainJob with many env vars costs a second.)
    """
    spec = new.spec
    patches = spec.runtime_patches if spec is not None else None
    if spec is None or not patches:
        return new.model_copy()
    old_patches = (old.spec.runtime_patches if old is not None and old.spec else None) or []
    by_manager = {p.manager: p for p in old_patches}
    stamped: list[RuntimePatch] = []
    for patch in patches:
        if old is None:
            time = patch.time if patch.time is not None else now
        else:
            time = _stamp(patch, by_manager.get(patch.manager), now)
        stamped.append(patch.model_copy(update={"time": time}) if time != patch.time else patch)
    return new.model_copy(update={"spec": spec.model_copy(update={"runtime_patches": stamped})})
