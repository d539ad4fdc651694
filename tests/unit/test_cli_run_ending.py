"""How ``trainer run`` stops following its TrainJob (trainer/cli/run.py): the run's own end, an
interrupt (130), or the local plane's manager stopping on its own (1: a runnable failed, so
nothing would move the TrainJob on)."""

from __future__ import annotations

import asyncio

import pytest

from trainer.cli.follow import Printer
from trainer.cli.run import _follow_or_interrupt


async def _forever() -> int:
    await asyncio.Event().wait()
    return 0


async def _done() -> int:
    return 0


async def test_a_plane_that_stops_on_its_own_ends_the_run_with_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stopped = asyncio.Event()
    stopped.set()
    code = await _follow_or_interrupt(
        _forever(), asyncio.Event(), Printer(), "interrupted; stopping", plane_stopped=stopped
    )
    assert code == 1
    assert "the local control plane stopped on its own; stopping" in capsys.readouterr().out


async def test_an_interrupt_ends_the_run_with_130(capsys: pytest.CaptureFixture[str]) -> None:
    interrupt = asyncio.Event()
    interrupt.set()
    code = await _follow_or_interrupt(
        _forever(), interrupt, Printer(), "interrupted; stopping", plane_stopped=asyncio.Event()
    )
    assert code == 130
    assert "interrupted; stopping" in capsys.readouterr().out


async def test_a_finished_run_gives_its_own_exit_code() -> None:
    code = await _follow_or_interrupt(
        _done(), asyncio.Event(), Printer(), "interrupted", plane_stopped=asyncio.Event()
    )
    assert code == 0
