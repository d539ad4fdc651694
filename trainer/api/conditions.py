"""The API's ``Condition`` models read and set: set by the floor's one
:func:`~trainer.machinery.conditions.set_condition` (``meta.SetStatusCondition``: a condition's
``lastTransitionTime`` changes only when its status flips)."""

from __future__ import annotations

from trainer.machinery.conditions import set_condition
from trainer.machinery.models.core import Condition


def find_condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    for cond in conditions or []:
        if cond.type == type_:
            return cond
    return None


def is_true(conditions: list[Condition] | None, type_: str) -> bool:
    cond = find_condition(conditions, type_)
    return cond is not None and cond.status == "True"


def with_condition(conditions: list[Condition] | None, new: Condition) -> list[Condition]:
    """A new list with ``new`` set: reason and message always updated, the transition time
    kept unless the status changed. The models go through their wire form, which they keep
    losslessly (:mod:`trainer.machinery.models.base`)."""
    wire = set_condition(
        [cond.to_wire() for cond in conditions or []], new.to_wire(), new.last_transition_time
    )
    return [Condition.from_wire(cond) for cond in wire]
