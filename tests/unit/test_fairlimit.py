"""The status server's API budget shared fairly by clients (trainer/statusserver/fairlimit.py,
docs/status-server.md "One client cannot delay another"). A fake clock that the limiter's
own sleep advances: the order in which waiting calls get their tokens is exact."""

from __future__ import annotations

import asyncio

import pytest

from trainer.statusserver.fairlimit import (
    FAILURE_WINDOW_SECONDS,
    SUSPECT_AFTER_FAILURES,
    SUSPECT_MAX_WAITING,
    FairLimiter,
    TooManyWaiting,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def limiter(clock: Clock, qps: float = 1.0, burst: int = 1, max_waiting: int = 16) -> FairLimiter:
    return FairLimiter(qps, burst, max_waiting=max_waiting, clock=clock, sleep=clock.sleep)


async def served_in_order(lim: FairLimiter, calls: list[str]) -> list[str]:
    """The clients of ``calls`` (queued in this order) in the order they got tokens."""
    order: list[str] = []

    async def call(client: str) -> None:
        await lim.acquire(client)
        order.append(client)

    tasks = [asyncio.create_task(call(client)) for client in calls]
    await asyncio.gather(*tasks)
    return order


async def test_waiting_calls_are_served_round_robin_by_client() -> None:
    clock = Clock()
    lim = limiter(clock)
    await lim.acquire("flood")  # the one saved token is gone: everything below waits
    order = await served_in_order(lim, ["flood"] * 5 + ["pod"] + ["other"] * 2)
    assert order == ["flood", "pod", "other", "flood", "other", "flood", "flood", "flood"]
    assert clock.now == pytest.approx(8.0)  # 1 qps: the budget itself is unchanged


async def test_a_client_whose_reviews_fail_goes_last_and_leaves_a_reserve() -> None:
    clock = Clock()
    lim = limiter(clock, qps=1.0, burst=10)
    for _ in range(SUSPECT_AFTER_FAILURES):
        lim.failed("flood")
    assert lim.suspect("flood") and not lim.suspect("pod")
    # The suspect takes tokens only while the bucket keeps 4 back for the others.
    for _ in range(6):
        await lim.acquire("flood")
    assert lim.tokens == pytest.approx(4.0)
    waiting = asyncio.create_task(lim.acquire("flood"))
    await asyncio.sleep(0)
    assert not waiting.done() and clock.now == 0.0
    # A client in good standing is served at once, from the reserve, ahead of the waiting one.
    for _ in range(4):
        await lim.acquire("pod")
    assert clock.now == 0.0 and not waiting.done()
    await waiting
    assert lim.tokens >= 4.0 - 1e-9  # the suspect waited for the bucket to refill


async def test_failures_are_forgotten_after_the_window() -> None:
    clock = Clock()
    lim = limiter(clock)
    for _ in range(SUSPECT_AFTER_FAILURES - 1):
        lim.failed("pod")
    assert not lim.suspect("pod")
    lim.failed("pod")
    assert lim.suspect("pod")
    clock.now += FAILURE_WINDOW_SECONDS + 1
    assert not lim.suspect("pod")


async def test_a_client_may_have_only_so_many_calls_waiting() -> None:
    clock = Clock()
    lim = limiter(clock, max_waiting=2)
    await lim.acquire("flood")
    first = [asyncio.create_task(lim.acquire("flood")) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(TooManyWaiting):
        await lim.acquire("flood")
    assert lim.waiting("flood") == 2
    # Others are not capped by the flood's queue, and an authenticated call is never refused.
    other = asyncio.create_task(lim.acquire("pod"))
    extra = asyncio.create_task(lim.acquire("flood", limit_waiting=False))
    await asyncio.gather(*first, other, extra)
    assert lim.waiting("flood") == 0


async def test_a_suspect_client_may_have_fewer_calls_waiting() -> None:
    clock = Clock()
    lim = limiter(clock, max_waiting=16)
    for _ in range(SUSPECT_AFTER_FAILURES):
        lim.failed("flood")
    await lim.acquire("pod")  # the bucket is empty: what follows waits
    waiting = [asyncio.create_task(lim.acquire("flood")) for _ in range(SUSPECT_MAX_WAITING)]
    await asyncio.sleep(0)
    with pytest.raises(TooManyWaiting):
        await lim.acquire("flood")
    await asyncio.gather(*waiting)


async def test_a_cancelled_wait_gives_its_place_up() -> None:
    clock = Clock()
    lim = limiter(clock)
    await lim.acquire("a")
    gone = asyncio.create_task(lim.acquire("a"))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert lim.waiting("a") == 0
    await lim.acquire("b")
    assert clock.now == pytest.approx(1.0)  # b got the next token, not a second one later


async def test_no_limit_when_qps_is_zero() -> None:
    lim = FairLimiter(0, 1)
    for _ in range(100):
        await lim.acquire("a")
    assert lim.waiting("a") == 0
