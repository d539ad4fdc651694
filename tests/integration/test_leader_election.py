"""Leader election between replicas on a real Lease, against the embedded API server.

Short timings keep this under ~10 s: lease 1 s, renew deadline 0.6 s, retry 0.15 s (a candidate
retries every 0.15-0.33 s with jitter).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.api_client import ApiClient

from tests.leases import MemoryLeases
from trainer.kube.client import new_api_client
from trainer.kube.leases import KubeLeaseClient, LeaseConflict
from trainer.local.apiserver import APIServer
from trainer.machinery.times import format_micro_time
from trainer.manager.leader import LeaderElector, new_identity
from trainer.observability.metrics import Metrics

NAMESPACE = "kube-system"
LEASE = "trainer.kubeflow.org"
LEASE_DURATION = 1.0
RENEW_DEADLINE = 0.6
RETRY_PERIOD = 0.15
MAX_RETRY_WAIT = RETRY_PERIOD * 2.2  # retry period with client-go's 1.2 jitter factor


class FlakyLeases:
    """A LeaseClient whose calls fail while ``broken`` (a replica cut off from the API)."""

    def __init__(self, inner: KubeLeaseClient) -> None:
        self.inner = inner
        self.broken = False
        self.before_create: asyncio.Barrier | None = None

    def _check(self) -> None:
        if self.broken:
            raise ConnectionError("API server unreachable")

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        return await self.inner.get_lease(namespace, name)

    async def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._check()
        if self.before_create is not None:
            await self.before_create.wait()
        return await self.inner.create_lease(obj)

    async def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._check()
        return await self.inner.update_lease(obj)


@dataclass
class Replica:
    """One controller replica: an elector, its run task, and when it started/stopped leading."""

    name: str
    elector: LeaderElector
    leases: FlakyLeases
    metrics: Metrics
    started: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    started_at: float = 0.0
    stopped_at: float = 0.0
    work_cancelled_at: float = 0.0
    task: asyncio.Task[None] | None = None

    async def work(self) -> None:
        self.started_at = time.monotonic()
        self.started.set()
        try:
            await asyncio.Event().wait()  # the controllers, until leadership ends
        finally:
            self.work_cancelled_at = time.monotonic()

    def on_stopped(self) -> None:
        self.stopped_at = time.monotonic()
        self.stopped.set()

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(self.work, self.on_stopped))


@dataclass
class Cluster:
    server: APIServer
    new_replica: Callable[[str], Awaitable[Replica]]

    def lease(self) -> dict[str, Any]:
        lease = self.server.storage.get_object("coordination.k8s.io/v1", "Lease", NAMESPACE, LEASE)
        assert lease is not None
        return lease


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    server = APIServer()
    await server.start()
    kubeconfig = str(tmp_path / "kubeconfig")
    server.write_kubeconfig(kubeconfig)
    clients: list[ApiClient] = []
    replicas: list[Replica] = []

    async def new_replica(name: str) -> Replica:
        api = await new_api_client(kubeconfig)
        clients.append(api)
        metrics = Metrics()
        leases = FlakyLeases(KubeLeaseClient.from_api_client(api))
        elector = LeaderElector(
            leases,
            namespace=NAMESPACE,
            identity=name,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
            on_leader_change=metrics.set_leader,
        )
        replica = Replica(name, elector, leases, metrics)
        replicas.append(replica)
        return replica

    try:
        yield Cluster(server, new_replica)
    finally:
        for replica in replicas:
            if replica.task is not None:
                replica.task.cancel()
                await asyncio.gather(replica.task, return_exceptions=True)
        for api in clients:
            await api.close()
        await server.stop()


async def two_replicas(cluster: Cluster) -> tuple[Replica, Replica]:
    """Start ``a``, wait until it leads, then start ``b``: returns (leader, follower)."""
    a = await cluster.new_replica("replica-a")
    a.start()
    await asyncio.wait_for(a.started.wait(), 5)
    b = await cluster.new_replica("replica-b")
    b.start()
    await asyncio.sleep(2 * MAX_RETRY_WAIT)  # b has campaigned at least twice by now
    return a, b


def leader_gauge(replica: Replica) -> float | None:
    return replica.metrics.registry.get_sample_value("trainer_leader")


async def test_only_one_replica_leads(cluster: Cluster) -> None:
    a, b = await two_replicas(cluster)
    assert a.elector.is_leader and not b.elector.is_leader
    assert not b.started.is_set()
    assert (leader_gauge(a), leader_gauge(b)) == (1.0, 0.0)
    assert b.elector.leader == "replica-a"  # the follower sees who leads

    spec = cluster.lease()["spec"]
    assert spec["holderIdentity"] == "replica-a"
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    first_acquire, first_renew = spec["acquireTime"], spec["renewTime"]
    await asyncio.sleep(2 * RETRY_PERIOD + 0.1)
    renewed = cluster.lease()["spec"]
    assert renewed["acquireTime"] == first_acquire  # kept while renewing
    assert renewed["renewTime"] > first_renew  # renewed every retry period


async def test_graceful_stop_hands_over_at_once(cluster: Cluster) -> None:
    a, b = await two_replicas(cluster)
    acquired_by_a = cluster.lease()["spec"]["acquireTime"]
    stopped = time.monotonic()
    a.elector.stop()
    await asyncio.wait_for(b.started.wait(), 5)
    handover = b.started_at - stopped
    assert a.task is not None
    await asyncio.wait_for(a.task, 1)  # run() returned
    assert not a.elector.is_leader and b.elector.is_leader
    # a stopped its work and said so before it released the Lease, so before b could start
    assert a.work_cancelled_at <= a.stopped_at <= b.started_at
    # released: b did not wait for expiry, only for its next retry
    assert handover < MAX_RETRY_WAIT + 0.3 < LEASE_DURATION
    spec = cluster.lease()["spec"]
    assert spec["holderIdentity"] == "replica-b"
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"] > acquired_by_a
    assert spec["leaseDurationSeconds"] == 1
    assert (leader_gauge(a), leader_gauge(b)) == (0.0, 1.0)


async def test_killed_leader_is_replaced_after_the_lease_expires(cluster: Cluster) -> None:
    a, b = await two_replicas(cluster)
    assert a.task is not None
    killed = time.monotonic()
    a.task.cancel()  # a crash: no release
    await asyncio.gather(a.task, return_exceptions=True)
    assert cluster.lease()["spec"]["holderIdentity"] == "replica-a"  # left as it was
    await asyncio.wait_for(b.started.wait(), 5)
    handover = b.started_at - killed
    # b waits for the lease to expire: about leaseDurationSeconds after it last saw a renewal
    # (a renewed at most one retry period before the kill), plus its own retry.
    assert LEASE_DURATION - RETRY_PERIOD - 0.1 < handover < LEASE_DURATION + 2 * MAX_RETRY_WAIT
    spec = cluster.lease()["spec"]
    assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1


async def test_leader_cut_off_from_the_api_steps_down_before_takeover(cluster: Cluster) -> None:
    a, b = await two_replicas(cluster)
    cut = time.monotonic()
    a.leases.broken = True
    await asyncio.wait_for(a.stopped.wait(), 5)
    assert not a.elector.is_leader
    # lost after the renew deadline (counted from the round's start, a retry after the last
    # success), without touching the Lease it can no longer reach
    assert a.stopped_at - cut < RENEW_DEADLINE + 2 * RETRY_PERIOD + 0.2
    assert a.task is not None
    await asyncio.wait_for(a.task, 1)
    await asyncio.wait_for(b.started.wait(), 5)
    assert a.stopped_at < b.started_at  # never two leaders at once
    assert cluster.lease()["spec"]["holderIdentity"] == "replica-b"


async def test_a_conflicting_write_loses_the_race(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Two candidates both find no Lease and both create it: the API accepts one create and
    answers 409 to the other, which keeps following."""
    caplog.set_level(logging.INFO, logger="trainer.manager.leader")
    a = await cluster.new_replica("replica-a")
    b = await cluster.new_replica("replica-b")
    both_read = asyncio.Barrier(2)  # neither creates before both have seen no Lease
    a.leases.before_create = b.leases.before_create = both_read
    a.start()
    b.start()
    done, _ = await asyncio.wait(
        {asyncio.ensure_future(a.started.wait()), asyncio.ensure_future(b.started.wait())},
        timeout=5,
        return_when=asyncio.FIRST_COMPLETED,
    )
    assert done
    await asyncio.sleep(3 * MAX_RETRY_WAIT)
    assert a.started.is_set() != b.started.is_set()
    holder = cluster.lease()["spec"]["holderIdentity"]
    leader = a if a.started.is_set() else b
    assert holder == leader.name and leader.elector.is_leader
    conflicts = [r for r in caplog.records if r.getMessage() == "lease changed concurrently"]
    assert len(conflicts) == 1


# --- deterministic checks with an in-memory Lease and a fake clock -----------------------------
class AutoClock:
    """Wall time that passes only when the elector sleeps (so a test takes no real time)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def test_expiry_counts_from_when_the_lease_was_observed() -> None:
    """A holder's renewTime far in the past (a skewed clock) does not make its Lease free: the
    candidate waits leaseDurationSeconds from when it first saw the record, as client-go."""
    start = 1_700_000_000.0
    leases = MemoryLeases(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NAMESPACE, "resourceVersion": "1"},
            "spec": {
                "holderIdentity": "other",
                "leaseDurationSeconds": 15,
                "acquireTime": format_micro_time(start - 7200),
                "renewTime": format_micro_time(start - 3600),
                "leaseTransitions": 4,
            },
        }
    )
    clock = AutoClock(start)
    started = asyncio.Event()
    changes: list[tuple[bool, float]] = []
    elector = LeaderElector(
        leases,
        namespace=NAMESPACE,
        identity="me",
        clock=clock,
        sleep=clock.sleep,
        rand=lambda: 1.0,  # the longest jitter: 2 s * 2.2
        on_leader_change=lambda leading: changes.append((leading, clock.now)),
    )

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(elector.run(work))
    await asyncio.wait_for(started.wait(), 5)
    (leading, acquired_at), *_ = changes
    assert leading and 15 <= acquired_at - start <= 15 + 4.4  # attempts every 4.4 s
    assert leases.lease is not None
    spec = leases.lease["spec"]
    assert spec["holderIdentity"] == "me" and spec["leaseTransitions"] == 5
    assert spec["acquireTime"] == format_micro_time(acquired_at)
    assert spec["leaseDurationSeconds"] == 15
    elector.stop()
    await asyncio.wait_for(task, 5)
    released = leases.lease["spec"]
    assert released["holderIdentity"] == "" and released["leaseDurationSeconds"] == 1
    assert released["leaseTransitions"] == 5


class CountingLeases(MemoryLeases):
    """:class:`MemoryLeases` that records each call (``conflict`` after an update answered 409)
    and runs ``on_update[n]`` before serving the n-th update (1-based)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.on_update: dict[int, Callable[[], None]] = {}

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("get")
        return await super().get_lease(namespace, name)

    async def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("create")
        return await super().create_lease(obj)

    async def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("update")
        hook = self.on_update.get(self.calls.count("update"))
        if hook is not None:
            hook()
        try:
            return await super().update_lease(obj)
        except LeaseConflict:
            self.calls.append("conflict")
            raise

    def write_from_outside(self) -> None:
        """Another client changes the Lease (a label, say): its resourceVersion moves on."""
        assert self.lease is not None
        self._store({**self.lease, "metadata": {**self.lease["metadata"], "labels": {"x": "y"}}})


async def test_the_leader_renews_without_reading_the_lease() -> None:
    """client-go's fast path: the leader renews by updating the Lease it last wrote, without a
    GET first; only when that update fails (here 409: another client changed the Lease) does it
    read the Lease and renew from what it read, still leading."""
    leases = CountingLeases()
    clock = AutoClock(1_700_000_000.0)
    changes: list[bool] = []
    elector = LeaderElector(
        leases,
        namespace=NAMESPACE,
        identity="me",
        clock=clock,
        sleep=clock.sleep,
        on_leader_change=changes.append,
    )
    leases.on_update = {3: leases.write_from_outside, 5: elector.stop}

    async def work() -> None:
        await asyncio.Event().wait()

    await asyncio.wait_for(elector.run(work), 5)
    assert leases.calls == [
        *("get", "create"),  # no Lease yet: read, then created
        *("update", "update"),  # two renewals, one request each
        *("update", "conflict", "get", "update"),  # the third, after the outside write
        "update",  # the fourth, from what was read
        "update",  # released on stop
    ]
    assert changes == [True, False]  # leading throughout, until stopped
    assert leases.lease is not None
    spec = leases.lease["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("", 0)
    assert leases.lease["metadata"]["labels"] == {"x": "y"}  # the outside write kept


@pytest.mark.parametrize(
    ("timings", "message"),
    [
        ((10.0, 10.0, 2.0), "leaseDuration must be greater than renewDeadline"),
        ((15.0, 2.0, 2.0), "renewDeadline must be greater than retryPeriod\\*JitterFactor"),
        ((15.0, 10.0, 0.0), "must be greater than zero"),
    ],
)
def test_elector_timings_are_checked(timings: tuple[float, float, float], message: str) -> None:
    lease, renew, retry = timings
    with pytest.raises(ValueError, match=message):
        LeaderElector(
            MemoryLeases(),
            namespace=NAMESPACE,
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
        )


def test_default_identity_is_hostname_and_a_random_suffix() -> None:
    first = LeaderElector(MemoryLeases(), namespace=NAMESPACE).identity
    second = new_identity()
    assert first.startswith(socket.gethostname() + "_") and first != second
    assert LeaderElector(MemoryLeases(), namespace=NAMESPACE).name == "trainer.kubeflow.org"
