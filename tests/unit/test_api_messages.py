"""trainer.machinery.messages: how the controller cuts Event notes and condition messages."""

from __future__ import annotations

from trainer.controller import events, status
from trainer.machinery.messages import ELLIPSIS, truncate


def test_short_message_is_unchanged() -> None:
    assert truncate("fits", 4) == "fits"
    assert truncate("", 10) == ""


def test_long_message_is_cut_to_the_limit_with_an_ellipsis() -> None:
    out = truncate("x" * 2000, 1000)
    assert len(out) == 1000
    assert out == "x" * (1000 - len(ELLIPSIS)) + " ..."


def test_callers_keep_their_own_limits() -> None:
    assert events.MAX_MESSAGE == 1000
    assert status.MAX_MESSAGE == 1024
