"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection``.

The manager campaigns with it (:mod:`trainer.manager.election`): only the replica holding the
Lease (``trainer.kubeflow.org`` by default) runs the leader runnables, the controllers; the
webhook, the cert rotator and the status server run everywhere (docs/high-availability.md).

The algorithm is client-go's ``tryAcquireOrRenew``:

- Fast path: while we are the holder of the record we last observed and it is still valid
  (below), renew by updating the Lease we last wrote, with its ``resourceVersion``, without
  reading it first. Any failure (409: it changed meanwhile; an API error) falls back to the
  full path below in the same attempt. A leader renewing every ``retry_period`` thus costs one
  request per renewal, not two.
- Read the Lease. If there is none, create it with us as holder.
- Whenever the Lease's spec differs from what we saw last, note *our own* clock time
  (``observedTime``). Another holder's Lease counts as expired once ``observedTime +
  leaseDurationSeconds`` has passed. client-go measures expiry this way, from when this replica
  last saw the record change rather than from the ``renewTime`` written in it, so clock skew
  between replicas cannot shorten a lease. (``renewTime + leaseDurationSeconds < now`` is the
  same test when the clocks agree.)
- A Lease that is free (empty ``holderIdentity``, e.g. released) or expired is taken over:
  ``holderIdentity`` = us, ``acquireTime`` = ``renewTime`` = now, ``leaseTransitions`` + 1.
  Our own Lease is renewed: ``renewTime`` = now, ``acquireTime`` and ``leaseTransitions``
  kept. Every write is an update with the ``resourceVersion`` we read (or, on the fast path,
  last wrote), so a racing writer gets 409 and loses.

Timing, as client-go: a candidate retries every ``retry_period`` with jitter (x1 to x2.2);
the leader renews every ``retry_period``; each renewal round gives up after ``renew_deadline``
of failed attempts, and then leadership is lost. ``renew_deadline < lease_duration`` leaves the
old leader time to stop before anyone else may take over. On :meth:`LeaderElector.stop` the
leader stops its work *first* and then releases the Lease (empty holder, 1 s duration), so
another replica takes over at its next retry instead of waiting for expiry.

Differences from client-go (each on the safe side):

- ``leaseDurationSeconds`` is the lease duration rounded *up* to whole seconds (client-go
  truncates, which can make the written lease shorter than the renew deadline).
- A leader that sees another identity holding a valid Lease steps down at once rather than
  retrying until its renew deadline.
- ``on_stopped_leading`` is called only after ``on_started_leading`` was (client-go calls it
  whenever ``Run`` returns), and the work started by ``on_started_leading`` has finished
  before it is called and before the Lease is released.
- The leading task is cancelled (Python's form of client-go's cancelled context) when
  leadership ends. If it fails, leadership is released and ``run`` re-raises its error.

The API is reached through :class:`LeaseClient`, a three-method protocol; the Kubernetes
implementation is ``trainer.kube.leases.KubeLeaseClient``. Time (``clock``, wall seconds),
sleeping and jitter are injectable.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import logging
import math
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Protocol

from trainer.kube.leases import LeaseConflict
from trainer.machinery.times import format_micro_time

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAME = "trainer.kubeflow.org"
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
JITTER_FACTOR = 1.2
LEASE_API_VERSION = "coordination.k8s.io/v1"

Sleeper = Callable[[float], Awaitable[None]]


class LeaseClient(Protocol):
    """The Lease operations leader election needs, on wire dicts."""

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease, or None when it does not exist."""
        ...

    async def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create the Lease; raises :class:`LeaseConflict` if it already exists."""
        ...

    async def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace the Lease (optimistic on ``metadata.resourceVersion``); raises
        :class:`LeaseConflict` on 409."""
        ...


def new_identity(hostname: str | None = None) -> str:
    """``<hostname>_<uuid4>``: unique per process, readable in ``kubectl get lease``
    (controller-runtime's form)."""
    return f"{hostname or socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaderElectionRecord:
    """The leader-election fields of a Lease spec (client-go's LeaderElectionRecord)."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> LeaderElectionRecord:
        def number(key: str) -> int:
            try:
                return int(spec.get(key) or 0)
            except (TypeError, ValueError):
                return 0

        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=number("leaseDurationSeconds"),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            lease_transitions=number("leaseTransitions"),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


class _Attempt(enum.Enum):
    ACQUIRED = "acquired"  # we hold the Lease now (created, taken over or renewed)
    HELD = "held"  # another identity holds a valid Lease
    FAILED = "failed"  # API error, conflict or timeout: try again


class LeaderElector:
    """Campaigns for the Lease ``namespace/name`` and runs work while holding it.

    ``await run(on_started_leading, on_stopped_leading)`` waits until this replica holds the
    Lease, runs ``on_started_leading()`` as a task, keeps renewing, and returns once
    leadership ends: :meth:`stop` (graceful: work cancelled, then the Lease released), a failed
    renewal (the Lease is not touched) or a failure of the work (released, error re-raised).
    Cancelling ``run`` is a crash: the work is cancelled and the Lease is left to expire.
    """

    def __init__(
        self,
        client: LeaseClient,
        *,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        identity: str | None = None,
        lease_duration: float = DEFAULT_LEASE_DURATION,
        renew_deadline: float = DEFAULT_RENEW_DEADLINE,
        retry_period: float = DEFAULT_RETRY_PERIOD,
        release_on_cancel: bool = True,
        clock: Callable[[], float] = time.time,
        sleep: Sleeper = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        on_leader_change: Callable[[bool], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
    ) -> None:
        # client-go's NewLeaderElector checks, with its messages.
        if lease_duration <= renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")
        if lease_duration <= 0 or renew_deadline <= 0 or retry_period <= 0:
            raise ValueError(
                "leaseDuration, renewDeadline and retryPeriod must be greater than zero"
            )
        if not namespace or not name:
            raise ValueError("the Lease needs a namespace and a name")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity or new_identity()
        if not self.identity:
            raise ValueError("Lock identity is empty")
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._on_leader_change = on_leader_change
        self._on_new_leader = on_new_leader
        self._lease_seconds = max(1, math.ceil(lease_duration))
        self._lease: dict[str, Any] | None = None  # the last Lease object read or written
        self._observed_spec: dict[str, Any] | None = None
        self._observed_record: LeaderElectionRecord | None = None
        self._observed_time = 0.0
        self._reported_leader = ""
        self._leading = False
        self._running = False
        self._stopped = asyncio.Event()
        self.leading = asyncio.Event()
        """Set while :attr:`is_leader` is true (to await leadership without polling)."""

    # --- state ------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """True from acquiring the Lease until leadership ends (before ``on_stopped_leading``)."""
        return self._leading

    @property
    def leader(self) -> str:
        """The holder identity last seen on the Lease ("" when free or unknown)."""
        return self._observed_record.holder_identity if self._observed_record else ""

    @property
    def observed_record(self) -> LeaderElectionRecord | None:
        return self._observed_record

    def stop(self) -> None:
        """Ask :meth:`run` to end gracefully: stop campaigning, or, when leading, cancel the
        work, release the Lease and call ``on_stopped_leading``. An elector campaigns once:
        after ``stop`` its ``run`` returns at once; make a new one to campaign again."""
        self._stopped.set()

    # --- running ----------------------------------------------------------------------------
    async def run(
        self,
        on_started_leading: Callable[[], Coroutine[Any, Any, None]],
        on_stopped_leading: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        """Campaign, lead, and return when leadership ends (see the class docstring)."""
        if self._running:
            raise RuntimeError("LeaderElector.run is already running")
        self._running = True
        try:
            if await self._acquire():
                await self._lead(on_started_leading, on_stopped_leading)
        finally:
            self._running = False

    async def _acquire(self) -> bool:
        log.info("attempting to acquire leader lease", extra=self._fields())
        while not self._stopped.is_set():
            outcome = await self._attempt(self.renew_deadline)
            if outcome is _Attempt.ACQUIRED:
                log.info("successfully acquired lease", extra=self._fields())
                return True
            jittered = self.retry_period * (1.0 + self._rand() * JITTER_FACTOR)
            await self._pause(jittered)
        return False

    async def _lead(
        self,
        on_started_leading: Callable[[], Coroutine[Any, Any, None]],
        on_stopped_leading: Callable[[], Awaitable[None] | None] | None,
    ) -> None:
        self._set_leading(True)
        work = asyncio.create_task(on_started_leading(), name=f"leading:{self.name}")
        graceful = False
        try:
            reason = await self._renew_loop(work)
            graceful = reason != "lost"
        finally:
            self._set_leading(False)
            work.cancel()
            await asyncio.wait({work})  # the work has stopped before anyone else can lead
            if graceful and self.release_on_cancel:
                await self._release()
            if on_stopped_leading is not None:
                outcome = on_stopped_leading()
                if outcome is not None:
                    await outcome
        error = None if work.cancelled() else work.exception()
        if error is not None:
            raise error

    async def _renew_loop(self, work: asyncio.Task[None]) -> str:
        """Renew until stopped ("stopped"), the work fails ("failed") or renewal fails
        ("lost")."""
        while True:
            if await self._pause(self.retry_period, work):
                return self._why_stopped(work)
            deadline = self._clock() + self.renew_deadline
            while True:
                outcome = await self._attempt(max(deadline - self._clock(), 1e-3))
                if outcome is _Attempt.ACQUIRED:
                    break
                if outcome is _Attempt.HELD:
                    log.error(
                        "leader lease taken over by another replica",
                        extra={**self._fields(), "holder": self.leader},
                    )
                    return "lost"
                if self._clock() + self.retry_period >= deadline:
                    log.error("failed to renew lease: renew deadline passed", extra=self._fields())
                    return "lost"
                if await self._pause(self.retry_period, work):
                    return self._why_stopped(work)

    def _why_stopped(self, work: asyncio.Task[None]) -> str:
        return "stopped" if self._stopped.is_set() or work.cancelled() else "failed"

    async def _pause(self, seconds: float, work: asyncio.Task[None] | None = None) -> bool:
        """Sleep ``seconds``; True (early) when stopped or when the work task has failed."""
        if self._stopped.is_set():
            return True
        stop_waiter = asyncio.ensure_future(self._stopped.wait())
        sleeper = asyncio.ensure_future(self._sleep(seconds))
        waiters: set[asyncio.Future[Any]] = {stop_waiter, sleeper}
        if work is not None:
            if work.done() and (work.cancelled() or work.exception() is not None):
                stop_waiter.cancel()
                sleeper.cancel()
                return True
            if not work.done():
                waiters.add(work)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_waiter.cancel()
            sleeper.cancel()
        if self._stopped.is_set():
            return True
        return (
            work is not None and work.done() and (work.cancelled() or work.exception() is not None)
        )

    # --- one attempt ------------------------------------------------------------------------
    async def _attempt(self, timeout: float) -> _Attempt:
        try:
            return await asyncio.wait_for(self._try_acquire_or_renew(), timeout)
        except TimeoutError:
            log.warning("lease request timed out", extra={**self._fields(), "timeout": timeout})
            return _Attempt.FAILED

    async def _try_acquire_or_renew(self) -> _Attempt:
        now = self._clock()
        stamp = format_micro_time(now)
        desired = LeaderElectionRecord(
            holder_identity=self.identity,
            lease_duration_seconds=self._lease_seconds,
            acquire_time=stamp,
            renew_time=stamp,
        )
        if await self._renew_optimistically(desired, now):
            return _Attempt.ACQUIRED
        try:
            lease = await self.client.get_lease(self.namespace, self.name)
        except Exception as exc:
            log.error("error retrieving lease", extra={**self._fields(), "error": str(exc)})
            return _Attempt.FAILED
        if lease is None:
            obj = {
                "apiVersion": LEASE_API_VERSION,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": desired.to_spec(),
            }
            return await self._write(self.client.create_lease, obj, now)

        spec = dict(lease.get("spec") or {})
        self._lease = lease
        if spec != self._observed_spec:
            self._observe(spec, now)
        old = self._observed_record or LeaderElectionRecord()
        valid = self._observed_time + old.lease_duration_seconds > now
        if old.holder_identity and old.holder_identity != self.identity and valid:
            return _Attempt.HELD
        if old.holder_identity == self.identity:
            desired = replace(
                desired, acquire_time=old.acquire_time, lease_transitions=old.lease_transitions
            )
        else:
            desired = replace(desired, lease_transitions=old.lease_transitions + 1)
        updated = copy.deepcopy(lease)
        updated["spec"] = {**spec, **desired.to_spec()}
        return await self._write(self.client.update_lease, updated, now)

    async def _renew_optimistically(self, desired: LeaderElectionRecord, now: float) -> bool:
        """client-go's fast path: while we hold the record we observed and it is valid, update
        the Lease we last wrote without reading it. False (the caller takes the full path)
        when the fast path does not apply or the update failed."""
        record, lease = self._observed_record, self._lease
        if (
            lease is None
            or record is None
            or record.holder_identity != self.identity
            or self._observed_time + record.lease_duration_seconds <= now
        ):
            return False
        renewed = replace(
            desired, acquire_time=record.acquire_time, lease_transitions=record.lease_transitions
        )
        updated = copy.deepcopy(lease)
        updated["spec"] = {**dict(updated.get("spec") or {}), **renewed.to_spec()}
        try:
            written = await self.client.update_lease(updated)
        except Exception as exc:
            log.info(
                "failed to renew the lease optimistically; reading it",
                extra={**self._fields(), "error": str(exc)},
            )
            return False
        self._lease = written
        self._observe(dict(written.get("spec") or updated["spec"]), now)
        return True

    async def _write(
        self,
        call: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
        obj: dict[str, Any],
        now: float,
    ) -> _Attempt:
        try:
            written = await call(obj)
        except LeaseConflict as exc:
            log.info("lease changed concurrently", extra={**self._fields(), "error": str(exc)})
            return _Attempt.FAILED
        except Exception as exc:
            log.error("error writing lease", extra={**self._fields(), "error": str(exc)})
            return _Attempt.FAILED
        self._lease = written
        self._observe(dict(written.get("spec") or obj["spec"]), now)
        return _Attempt.ACQUIRED

    def _observe(self, spec: dict[str, Any], now: float) -> None:
        self._observed_spec = spec
        self._observed_record = LeaderElectionRecord.from_spec(spec)
        self._observed_time = now
        holder = self._observed_record.holder_identity
        if holder and holder != self._reported_leader:
            self._reported_leader = holder
            if holder != self.identity:
                log.info("new leader elected", extra={**self._fields(), "holder": holder})
            if self._on_new_leader is not None:
                self._on_new_leader(holder)

    async def _release(self) -> bool:
        """Give the Lease up: empty holder and a 1 s duration, so the next candidate takes it
        at once. Only our own Lease, and only the version we last wrote (409 otherwise)."""
        record = self._observed_record
        if self._lease is None or record is None or record.holder_identity != self.identity:
            return True
        stamp = format_micro_time(self._clock())
        released = LeaderElectionRecord(
            holder_identity="",
            lease_duration_seconds=1,
            acquire_time=stamp,
            renew_time=stamp,
            lease_transitions=record.lease_transitions,
        )
        updated = copy.deepcopy(self._lease)
        updated["spec"] = {**dict(updated.get("spec") or {}), **released.to_spec()}
        try:
            written = await asyncio.wait_for(self.client.update_lease(updated), self.renew_deadline)
        except Exception as exc:  # includes the timeout
            log.error("failed to release lease", extra={**self._fields(), "error": str(exc)})
            return False
        self._lease = written
        self._observe(dict(written.get("spec") or updated["spec"]), self._clock())
        log.info("released leader lease", extra=self._fields())
        return True

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        (self.leading.set if leading else self.leading.clear)()
        log.info(
            "started leading" if leading else "stopped leading",
            extra=self._fields(),
        )
        if self._on_leader_change is not None:
            self._on_leader_change(leading)

    def _fields(self) -> dict[str, Any]:
        return {"lease": f"{self.namespace}/{self.name}", "identity": self.identity}
