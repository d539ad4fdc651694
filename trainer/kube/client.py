"""Building a kubernetes_asyncio client: in-cluster configuration, or a kubeconfig."""

from __future__ import annotations

import os

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.config.config_exception import ConfigException

__all__ = ["ApiClient", "new_api_client"]


async def new_api_client(
    kubeconfig: str | None = None, *, qps_user_agent: str = "trainer"
) -> ApiClient:
    """An ApiClient for ``kubeconfig``, else $KUBECONFIG / ~/.kube/config, else the in-cluster
    service account (the order kubectl and controller-runtime use)."""
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        await config.load_kube_config(config_file=path, client_configuration=cfg)
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except ConfigException:
            await config.load_kube_config(client_configuration=cfg)
    api = ApiClient(configuration=cfg)
    api.user_agent = f"{qps_user_agent}/0.1.0"
    return api
