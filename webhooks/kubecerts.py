"""The Kubernetes side of webhook certificate management: the Secret that stores the
certificates and the caBundle of the webhook configurations (used by webhooks.certs'
CertRotator through plain callables), through the project's one client
(:class:`~trainer.kube.rest.Kube`)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.kube import resources as r
from trainer.kube.client import ApiClient
from trainer.kube.rest import STRATEGIC_MERGE_PATCH, APIError, Kube


class SecretStore:
    """Reads and writes the certificate Secret with optimistic concurrency."""

    def __init__(self, api: ApiClient, namespace: str, name: str) -> None:
        self.kube = Kube(api)
        self.namespace = namespace
        self.name = name

    async def read(self) -> tuple[dict[str, bytes], str] | None:
        """(decoded data, resourceVersion), or None when the Secret does not exist."""
        secret = await self.kube.get(r.SECRETS, self.namespace, self.name)
        if secret is None:
            return None
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        return data, str(secret["metadata"].get("resourceVersion") or "")

    async def write(self, data: Mapping[str, bytes], version: str | None) -> bool:
        """Create (version None) or replace at ``version``; False on a conflict."""
        metadata: dict[str, str] = {"name": self.name, "namespace": self.namespace}
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            if version is None:
                await self.kube.create(body, gvr=r.SECRETS)
            else:
                metadata["resourceVersion"] = version
                await self.kube.replace(body, gvr=r.SECRETS)
        except APIError as exc:
            if exc.status == 409:
                return False
            raise
        return True


async def inject_ca_bundle(
    api: ApiClient, ca_bundle: bytes, validating: Sequence[str], mutating: Sequence[str]
) -> None:
    """Set ``clientConfig.caBundle`` on every webhook of the named configurations (those that
    do not exist yet are skipped: they get it on the next check)."""
    kube = Kube(api)
    encoded = base64.b64encode(ca_bundle).decode()
    for gvr, names in (
        (r.VALIDATING_WEBHOOK_CONFIGURATIONS, validating),
        (r.MUTATING_WEBHOOK_CONFIGURATIONS, mutating),
    ):
        for name in names:
            config = await kube.get(gvr, None, name)
            if config is None:
                continue
            hooks = config.get("webhooks") or []
            if all((h.get("clientConfig") or {}).get("caBundle") == encoded for h in hooks):
                continue
            body = {
                "webhooks": [
                    {"name": h["name"], "clientConfig": {"caBundle": encoded}} for h in hooks
                ]
            }
            await kube.patch(gvr, None, name, body, STRATEGIC_MERGE_PATCH)
