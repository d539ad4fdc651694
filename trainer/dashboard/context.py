"""What every route of one dashboard shares: the cache, the access rules, the options."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from trainer.dashboard.auth import Access
from trainer.dashboard.watch.cache import ClusterCache


@dataclass
class DashboardContext:
    cache: ClusterCache
    access: Access
    allow_actions: bool = False
    cluster: str = ""
    """What the header says the dashboard reads (the API server's address)."""
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at shutdown: open event and log streams end."""

    @property
    def scope(self) -> str:
        ns = self.cache.namespace
        return f"namespace {ns}" if ns else "all namespaces"
