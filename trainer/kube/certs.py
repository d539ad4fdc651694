"""The Kubernetes side of webhook certificate management: the Secret that stores the
certificates and the caBundle of the webhook configurations (used by webhooks.certs'
CertRotator through plain callables)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

VALIDATING = "validatingwebhookconfigurations"
MUTATING = "mutatingwebhookconfigurations"


class SecretStore:
    """Reads and writes the certificate Secret with optimistic concurrency."""

    def __init__(self, api: ApiClient, namespace: str, name: str) -> None:
        self.core: Any = client.CoreV1Api(api)
        self.namespace = namespace
        self.name = name

    async def read(self) -> tuple[dict[str, bytes], str] | None:
        """(decoded data, resourceVersion), or None when the Secret does not exist."""
        try:
            secret = await self.core.read_namespaced_secret(self.name, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        return data, secret.metadata.resource_version

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
                await self.core.create_namespaced_secret(self.namespace, body)
            else:
                metadata["resourceVersion"] = version
                await self.core.replace_namespaced_secret(self.name, self.namespace, body)
        except client.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


async def inject_ca_bundle(
    api: ApiClient, ca_bundle: bytes, validating: Sequence[str], mutating: Sequence[str]
) -> None:
    """Set ``clientConfig.caBundle`` on every webhook of the named configurations (those that
    do not exist yet are skipped: they get it on the next check)."""
    admission: Any = client.AdmissionregistrationV1Api(api)
    encoded = base64.b64encode(ca_bundle).decode()
    for read, patch, names in (
        (
            admission.read_validating_webhook_configuration,
            admission.patch_validating_webhook_configuration,
            validating,
        ),
        (
            admission.read_mutating_webhook_configuration,
            admission.patch_mutating_webhook_configuration,
            mutating,
        ),
    ):
        for name in names:
            try:
                config = await read(name)
            except client.ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            hooks = config.webhooks or []
            if all(h.client_config.ca_bundle == encoded for h in hooks):
                continue
            body = {
                "webhooks": [{"name": h.name, "clientConfig": {"caBundle": encoded}} for h in hooks]
            }
            await patch(name, body, _content_type="application/strategic-merge-patch+json")
