"""An in-memory Lease store for leader-election tests: the ``LeaseClient`` the elector talks to
(trainer/manager/leader.py), with kube-apiserver's optimistic concurrency (a create of a Lease
that exists or an update from a stale resourceVersion is a conflict) and, with ``failing``
set, an API server that cannot be reached."""

from __future__ import annotations

import copy
from typing import Any

from trainer.kube.leases import LeaseConflict


class MemoryLeases:
    def __init__(self, lease: dict[str, Any] | None = None) -> None:
        self.lease = lease
        self.version = 1
        self.failing = False

    def _check(self) -> None:
        if self.failing:
            raise ConnectionError("the API server is unreachable")

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        return None if self.lease is None else copy.deepcopy(self.lease)

    async def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._check()
        if self.lease is not None:
            raise LeaseConflict("already exists")
        return self._store(obj)

    async def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._check()
        assert self.lease is not None
        if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise LeaseConflict("stale resourceVersion")
        return self._store(obj)

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)
