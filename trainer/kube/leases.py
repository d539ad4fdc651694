"""Leases through the Kubernetes API: the ``LeaseClient`` of trainer.manager.leader.

A thin adapter over :class:`trainer.kube.rest.Kube` (JSON dicts in and out, API errors mapped
to :class:`trainer.kube.rest.APIError`, each request reported to ``on_request``): a missing
Lease reads as None and a 409 (stale resourceVersion on update, AlreadyExists on create)
becomes :class:`LeaseConflict`, which the elector treats as losing a
race rather than as an error.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client.api_client import ApiClient

from trainer.kube.resources import LEASES
from trainer.kube.rest import APIError, Kube, OnRequest


class LeaseConflict(Exception):
    """The API answered 409: the Lease changed since it was read, or already exists."""


class KubeLeaseClient:
    """Get, create and replace ``coordination.k8s.io/v1`` Leases."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @classmethod
    def from_api_client(
        cls, api: ApiClient, *, timeout: float = 10.0, on_request: OnRequest | None = None
    ) -> KubeLeaseClient:
        """A client on ``api`` (see ``trainer.kube.client.new_api_client``); ``timeout``
        bounds each request (the elector also bounds each attempt by its renew deadline)."""
        return cls(Kube(api, timeout=timeout, on_request=on_request))

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.kube.get(LEASES, namespace, name)

    async def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.kube.create(obj, gvr=LEASES)
        except APIError as err:
            if err.is_conflict:
                raise LeaseConflict(str(err)) from err
            raise

    async def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.kube.replace(obj, gvr=LEASES)
        except APIError as err:
            if err.is_conflict:
                raise LeaseConflict(str(err)) from err
            raise
