"""metav1.Condition bookkeeping, as ``meta.SetStatusCondition`` does it: a condition's
``lastTransitionTime`` changes only when its status flips."""

from __future__ import annotations

from trainer.machinery.models.core import Condition


def find_condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    for cond in conditions or []:
        if cond.type == type_:
            return cond
    return None


def is_true(conditions: list[Condition] | None, type_: str) -> bool:
    cond = find_condition(conditions, type_)
    return cond is not None and cond.status == "True"


def set_condition(conditions: list[Condition] | None, new: Condition) -> list[Condition]:
    """A new list with ``new`` set: reason and message always updated, the transition time
    kept unless the status changed."""
    out = [c.model_copy(deep=True) for c in conditions or []]
    for i, cond in enumerate(out):
        if cond.type != new.type:
            continue
        updated = new.model_copy(deep=True)
        if cond.status == new.status:
            updated.last_transition_time = cond.last_transition_time
        out[i] = updated
        return out
    out.append(new.model_copy(deep=True))
    return out
