"""The shared retry back-off (trainer/machinery/backoff.py): base, doubling, capped, and never
an OverflowError however long the failures last (a pod that waits for hours is tried every 10 s,
once a scheduler pass has counted its thousandth failed attempt)."""

from __future__ import annotations

import pytest

from trainer.machinery.backoff import doubling


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (1025, 10.0), (10**9, 10.0)],
)
def test_doubling_from_the_base_up_to_the_cap(failures: int, delay: float) -> None:
    assert doubling(failures, 1.0, 10.0) == delay


def test_a_small_base_still_reaches_its_cap() -> None:
    assert doubling(3, 0.25, 30.0) == 1.0
    assert doubling(200, 1e-9, 30.0) == 30.0
