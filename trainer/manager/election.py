"""The manager's leader election: the Lease it campaigns for (:class:`LeaderElection`, from a
process's configuration) and the campaign that runs the leader runnables while this replica
holds it (:func:`campaign`). The algorithm is :mod:`trainer.manager.leader`'s."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from trainer.manager.leader import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_LEASE_NAME,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    LeaderElector,
    LeaseClient,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderElection:
    """The Lease a manager campaigns for, and its timing (client-go's names)."""

    client: LeaseClient
    namespace: str
    name: str = DEFAULT_LEASE_NAME
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD

    def elector(self, on_leader_change: Callable[[bool], None] | None = None) -> LeaderElector:
        """A new elector for this Lease (one campaign)."""
        return LeaderElector(
            self.client,
            namespace=self.namespace,
            name=self.name,
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
            on_leader_change=on_leader_change,
        )


async def campaign(
    elector: LeaderElector,
    lead: Callable[[], Coroutine[Any, Any, None]],
    stop: asyncio.Event,
) -> None:
    """Campaign and run ``lead()`` while holding the Lease (cancelled when leadership ends).
    Leadership that ends with ``stop`` unset was lost (a renewal failed, or another replica
    holds the Lease): ``stop`` is set. As with controller-runtime, a replica that lost the
    Lease exits, and its Deployment restarts it as a follower (docs/high-availability.md)."""
    await elector.run(lead)
    if not stop.is_set():
        log.error("leader election lost; stopping")
        stop.set()
