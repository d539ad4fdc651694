"""The local plane's controller limits (docs/local-plane.md, "Throughput"): ``trainer up`` and
``trainer run`` send their requests with no client-side rate limit and more TrainJob workers,
while ``trainer controller`` keeps upstream's cluster defaults (50 qps, 100 burst, 5 workers).

The limiter each Configuration yields is driven with a fake clock: what is asserted is how
long the N-th request would wait, not a measured time."""

from __future__ import annotations

import pytest

from trainer.cli.localplane import LOCAL_TRAINJOB_CONCURRENCY, local_config
from trainer.cli.process import DEFAULT_CONCURRENCY, TRAINJOB_GROUP_KIND
from trainer.controller.config import Configuration, load_config
from trainer.kube.ratelimit import RateLimiter


async def waits_for(config: Configuration, requests: int) -> list[float]:
    """The sleeps ``requests`` back-to-back requests make under the limiter ``run_controller``
    builds from ``config`` (a clock that only moves when the limiter sleeps)."""
    now = [0.0]
    waited: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waited.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(
        config.client_connection.qps,
        config.client_connection.burst,
        clock=lambda: now[0],
        sleep=fake_sleep,
    )
    for _ in range(requests):
        await limiter.acquire()
    return waited


def workers(config: Configuration) -> int:
    """The TrainJob workers ``run_controller`` starts for ``config``."""
    return config.controller.group_kind_concurrency.get(TRAINJOB_GROUP_KIND, DEFAULT_CONCURRENCY)


async def test_local_plane_sends_a_burst_of_1500_requests_without_waiting() -> None:
    # 1,500: what 300 TrainJobs cost the controller (2 applies, 2 Events, 1 status patch each).
    assert await waits_for(local_config(9443), 1500) == []


async def test_local_plane_limits_hold_with_feature_gates_and_a_status_server_port() -> None:
    config = local_config(9443, 10443, {"TrainJobStatus": True})
    assert config.client_connection.qps == 0
    assert workers(config) == LOCAL_TRAINJOB_CONCURRENCY
    assert config.feature_gates == {"TrainJobStatus": True}
    assert config.status_server.port == 10443


@pytest.mark.parametrize("config", [Configuration(), load_config(None)], ids=["model", "no-file"])
async def test_trainer_controller_keeps_upstreams_50_qps_and_100_burst(
    config: Configuration,
) -> None:
    assert (config.client_connection.qps, config.client_connection.burst) == (50.0, 100)
    waited = await waits_for(config, 150)
    # The burst of 100 goes out at once; each of the next 50 waits one token at 50 qps.
    assert len(waited) == 50
    assert sum(waited) == pytest.approx(1.0)
    assert workers(config) == DEFAULT_CONCURRENCY == 5


def test_local_plane_runs_more_workers_than_the_cluster_default() -> None:
    assert workers(local_config(9443)) == LOCAL_TRAINJOB_CONCURRENCY > DEFAULT_CONCURRENCY
