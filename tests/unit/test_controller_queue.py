"""The work queue's client-go semantics, driven by a fake clock (no real sleeping)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from trainer.machinery.workqueue import QueueShutdown, Result, WorkQueue, run_workers


class FakeClock:
    """A clock and a sleeper: sleepers wake when :meth:`advance` moves time past them."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        await future

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for deadline, future in list(self._sleepers):
            if deadline <= self.now + 1e-12 and not future.done():
                future.set_result(None)
        self._sleepers = [(d, f) for d, f in self._sleepers if not f.done()]
        await settle()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class RecordingMetrics:
    def __init__(self) -> None:
        self.depths: list[int] = []
        self.adds = 0
        self.queue_durations: list[float] = []
        self.work_durations: list[float] = []
        self.retries = 0
        self.reconciles: list[tuple[str, float]] = []

    def set_depth(self, depth: int) -> None:
        self.depths.append(depth)

    def inc_adds(self) -> None:
        self.adds += 1

    def observe_queue_duration(self, seconds: float) -> None:
        self.queue_durations.append(seconds)

    def observe_work_duration(self, seconds: float) -> None:
        self.work_durations.append(seconds)

    def inc_retries(self) -> None:
        self.retries += 1

    def observe_reconcile(self, result: str, seconds: float) -> None:
        self.reconciles.append((result, seconds))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def new_queue(clock: FakeClock, **kw: object) -> WorkQueue:
    return WorkQueue("test", clock=clock, sleep=clock.sleep, **kw)  # type: ignore[arg-type]


async def get_now(queue: WorkQueue) -> str:
    """A key that must be ready right away."""
    return await asyncio.wait_for(queue.get(), 1.0)


async def is_blocked(queue: WorkQueue) -> asyncio.Task[str]:
    task = asyncio.create_task(queue.get())
    await settle()
    assert not task.done(), "get() returned although no key should be ready"
    return task


@pytest.mark.parametrize(
    ("adds", "expected_order"),
    [
        (["a"], ["a"]),
        (["a", "a", "a"], ["a"]),
        (["a", "b", "a", "c", "b"], ["a", "b", "c"]),
    ],
)
async def test_add_deduplicates_waiting_keys(
    clock: FakeClock, adds: list[str], expected_order: list[str]
) -> None:
    queue = new_queue(clock)
    for key in adds:
        queue.add(key)
    assert len(queue) == len(expected_order)
    assert [await get_now(queue) for _ in expected_order] == expected_order
    assert len(queue) == 0


async def test_key_added_while_processing_is_requeued_on_done(clock: FakeClock) -> None:
    queue = new_queue(clock)
    queue.add("ns/a")
    assert await get_now(queue) == "ns/a"
    queue.add("ns/a")  # dirty: a worker holds it
    queue.add("ns/a")  # still once
    assert len(queue) == 1
    pending = await is_blocked(queue)  # not handed out while processing
    queue.done("ns/a")
    assert await asyncio.wait_for(pending, 1.0) == "ns/a"
    queue.done("ns/a")
    assert len(queue) == 0 and queue.processing == frozenset()


async def test_done_without_readd_does_not_requeue(clock: FakeClock) -> None:
    queue = new_queue(clock)
    queue.add("a")
    await get_now(queue)
    queue.done("a")
    queue.done("a")  # a second done is ignored
    await is_blocked(queue)
    assert len(queue) == 0


async def test_one_key_is_never_processed_concurrently(clock: FakeClock) -> None:
    queue = new_queue(clock)
    in_flight: dict[str, int] = defaultdict(int)
    most: dict[str, int] = defaultdict(int)
    handled: list[str] = []

    async def handler(key: str) -> Result:
        in_flight[key] += 1
        most[key] = max(most[key], in_flight[key])
        queue.add(key)  # a watch event arrives while reconciling
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        in_flight[key] -= 1
        handled.append(key)
        if handled.count(key) >= 5:
            queue.forget(key)
        return Result()

    queue.add("a")
    queue.add("b")
    workers = asyncio.create_task(run_workers(queue, handler, concurrency=4))
    for _ in range(30):
        await settle()
        if handled.count("a") >= 5 and handled.count("b") >= 5:
            break
    queue.shutdown()
    await asyncio.wait_for(workers, 1.0)
    assert most == {"a": 1, "b": 1}
    assert handled.count("a") >= 5 and handled.count("b") >= 5


@pytest.mark.parametrize(
    ("max_delay", "expected"),
    [
        (60.0, [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24]),
        (0.03, [0.005, 0.01, 0.02, 0.03, 0.03]),
    ],
)
def test_backoff_doubles_from_5ms_up_to_the_cap(max_delay: float, expected: list[float]) -> None:
    queue = WorkQueue(max_delay=max_delay)
    assert [queue.when("k") for _ in expected] == pytest.approx(expected)
    assert queue.num_requeues("k") == len(expected)
    assert queue.when("other") == pytest.approx(0.005)  # per key


def test_backoff_default_cap_is_60s_and_forget_resets() -> None:
    queue = WorkQueue()
    delays = [queue.when("k") for _ in range(200)]
    assert max(delays) == 60.0 and delays[-1] == 60.0
    assert delays[13] == pytest.approx(40.96) and delays[14] == 60.0
    queue.forget("k")
    assert queue.num_requeues("k") == 0
    assert queue.when("k") == pytest.approx(0.005)


async def test_add_rate_limited_waits_for_the_backoff(clock: FakeClock) -> None:
    metrics = RecordingMetrics()
    queue = new_queue(clock, metrics=metrics)
    queue.add_rate_limited("a")
    assert len(queue) == 0 and queue.waiting == 1
    await clock.advance(0.004)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert len(queue) == 1 and queue.waiting == 0
    assert await get_now(queue) == "a"
    queue.done("a")
    queue.add_rate_limited("a")  # second failure: 10 ms
    await clock.advance(0.009)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert len(queue) == 1
    assert metrics.retries == 2


@pytest.mark.parametrize(
    ("delays", "due"),
    [
        ([10.0, 5.0], 5.0),  # an earlier request wins
        ([5.0, 10.0], 5.0),  # a later one is ignored
        ([7.0, 7.0, 3.0, 9.0], 3.0),
    ],
)
async def test_add_after_earliest_time_wins(
    clock: FakeClock, delays: list[float], due: float
) -> None:
    queue = new_queue(clock)
    for delay in delays:
        queue.add_after("a", delay)
    await clock.advance(due - 0.001)
    assert len(queue) == 0
    await clock.advance(0.001)
    assert len(queue) == 1
    assert await get_now(queue) == "a"
    queue.done("a")
    await clock.advance(max(delays))
    assert len(queue) == 0  # the superseded due times do not add it again


async def test_add_after_zero_or_negative_adds_now(clock: FakeClock) -> None:
    queue = new_queue(clock)
    queue.add_after("a", 0)
    queue.add_after("b", -1)
    assert len(queue) == 2


async def test_get_blocks_until_a_delayed_key_is_due(clock: FakeClock) -> None:
    queue = new_queue(clock)
    pending = await is_blocked(queue)
    queue.add_after("late", 2.0)
    await settle()
    queue.add_after("early", 1.0)  # wakes the sleeping getter: it must now wait 1 s only
    await clock.advance(0.5)
    assert not pending.done()
    await clock.advance(0.5)
    assert await asyncio.wait_for(pending, 1.0) == "early"
    second = await is_blocked(queue)
    await clock.advance(1.0)
    assert await asyncio.wait_for(second, 1.0) == "late"


async def test_immediate_add_is_not_blocked_by_a_pending_delay(clock: FakeClock) -> None:
    queue = new_queue(clock)
    queue.add_after("a", 30.0)
    queue.add("a")
    assert await get_now(queue) == "a"


async def test_shutdown_wakes_getters_and_ignores_adds(clock: FakeClock) -> None:
    queue = new_queue(clock)
    waiting = await is_blocked(queue)
    queue.shutdown()
    with pytest.raises(QueueShutdown):
        await asyncio.wait_for(waiting, 1.0)
    queue.add("a")
    queue.add_after("b", 1)
    queue.add_rate_limited("c")
    assert len(queue) == 0 and queue.shutting_down
    with pytest.raises(QueueShutdown):
        await queue.get()


async def test_metrics_hooks(clock: FakeClock) -> None:
    metrics = RecordingMetrics()
    queue = new_queue(clock, metrics=metrics)
    queue.add("a")
    queue.add("a")  # deduplicated: not an add
    queue.add("b")
    assert metrics.adds == 2 and metrics.depths[-1] == 2
    await clock.advance(2.0)
    assert await get_now(queue) == "a"
    assert metrics.queue_durations == [2.0]
    assert metrics.depths[-1] == 1
    await clock.advance(3.0)
    queue.done("a")
    assert metrics.work_durations == [3.0]


async def test_run_workers_applies_results(clock: FakeClock) -> None:
    metrics = RecordingMetrics()
    queue = new_queue(clock)
    outcomes: dict[str, list[Result | Exception]] = {
        "fails": [Result(error=RuntimeError("boom")), RuntimeError("raised"), Result()],
        "later": [Result(requeue_after=30.0), Result()],
        "fine": [Result()],
    }
    calls: list[str] = []

    async def handler(key: str) -> Result:
        calls.append(key)
        outcome = outcomes[key].pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    for key in outcomes:
        queue.add(key)
    workers = asyncio.create_task(run_workers(queue, handler, 2, metrics=metrics))
    await settle()
    assert sorted(calls) == ["fails", "fine", "later"]
    assert queue.num_requeues("fails") == 1 and queue.num_requeues("fine") == 0
    await clock.advance(0.005)  # first backoff
    assert calls.count("fails") == 2 and queue.num_requeues("fails") == 2
    await clock.advance(0.010)  # second backoff
    assert calls.count("fails") == 3 and queue.num_requeues("fails") == 0  # success forgets
    await clock.advance(29.0)
    assert calls.count("later") == 1
    await clock.advance(1.0)
    assert calls.count("later") == 2
    queue.shutdown()
    await asyncio.wait_for(workers, 1.0)
    results = sorted(result for result, _ in metrics.reconciles)
    assert results == ["error", "error", "requeue", "success", "success", "success"]


async def test_a_requeue_after_forgets_earlier_failures(clock: FakeClock) -> None:
    queue = new_queue(clock)
    queue.when("a")
    queue.when("a")
    queue.add("a")

    async def handler(key: str) -> Result:
        return Result(requeue_after=5.0)

    workers = asyncio.create_task(run_workers(queue, handler, 1))
    await settle()
    assert queue.num_requeues("a") == 0 and queue.waiting == 1
    queue.shutdown()
    await asyncio.wait_for(workers, 1.0)


async def test_run_workers_validates_concurrency(clock: FakeClock) -> None:
    async def handler(key: str) -> None:
        return None

    with pytest.raises(ValueError, match="must be greater than 0"):
        await run_workers(new_queue(clock), handler, 0)


async def test_cancelling_workers_marks_keys_done(clock: FakeClock) -> None:
    queue = new_queue(clock)
    started = asyncio.Event()

    async def handler(key: str) -> None:
        started.set()
        await asyncio.Event().wait()

    queue.add("a")
    workers = asyncio.create_task(run_workers(queue, handler, 1))
    await asyncio.wait_for(started.wait(), 1.0)
    assert queue.processing == {"a"}
    workers.cancel()
    with pytest.raises(asyncio.CancelledError):
        await workers
    assert queue.processing == frozenset()
