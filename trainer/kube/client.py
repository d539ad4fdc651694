"""Building a kubernetes_asyncio client: in-cluster configuration, or a kubeconfig.

A client of a loopback API server (the local plane's) neither goes through a proxy from the
environment nor reads ``~/.netrc``, as client-go, whose ``http.ProxyFromEnvironment`` never
proxies loopback hosts and which has no netrc support. kubernetes_asyncio's session trusts the
environment for every host: with ``HTTPS_PROXY`` set and no ``NO_PROXY``, the local plane's
controller would send its requests for 127.0.0.1 to the proxy, and every request looks the
proxy variables and ``~/.netrc`` up again in a worker thread (docs/local-plane.md,
"Throughput"). Other hosts keep that behaviour (a cluster behind a proxy).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from urllib.parse import urlsplit

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.config.config_exception import ConfigException

from trainer.kube.kubeconfig import KubeconfigError, check_kubeconfig, default_path

__all__ = ["ApiClient", "KubeconfigError", "another_client", "new_api_client"]


async def new_api_client(
    kubeconfig: str | None = None, *, qps_user_agent: str = "trainer", context: str | None = None
) -> ApiClient:
    """An ApiClient for ``kubeconfig``, else $KUBECONFIG / ~/.kube/config, else the in-cluster
    service account (the order kubectl and controller-runtime use). ``context`` picks a
    context of the kubeconfig other than its current one (kubectl's ``--context``).

    Raises :class:`KubeconfigError` (one line naming the file) for a kubeconfig that is
    missing, unreadable, over the size/depth/alias limits or not usable."""
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and context:
        path = str(default_path())
    if not path:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except ConfigException:
            path = str(default_path())
            if not os.path.lexists(path):
                raise KubeconfigError(
                    f"no cluster configuration: not running in a cluster, $KUBECONFIG is "
                    f"unset and {path} does not exist (pass --kubeconfig)"
                ) from None
    if path:
        check_kubeconfig(path)
        try:
            await config.load_kube_config(
                config_file=path, context=context, client_configuration=cfg
            )
        except (
            ConfigException,
            LookupError,
            TypeError,
            ValueError,
            AttributeError,
            AssertionError,  # kubernetes_asyncio asserts the types of some fields
        ) as exc:
            problem = str(exc) or "a field has the wrong type or value"
            raise KubeconfigError(f"kubeconfig {path}: {problem}") from None
        except ssl.SSLError as exc:
            raise KubeconfigError(f"kubeconfig {path}: bad certificate or key: {exc}") from None
        except OSError as exc:
            raise KubeconfigError(
                f"kubeconfig {path}: cannot read {exc.filename or ''}: {exc.strerror}"
            ) from None
    try:
        api = ApiClient(configuration=cfg)
    except ssl.SSLError as exc:  # certificate data is first parsed here
        raise KubeconfigError(f"kubeconfig {path}: bad certificate or key: {exc}") from None
    api.user_agent = f"{qps_user_agent}/0.1.0"
    if is_loopback(str(cfg.host)):
        session = api.rest_client.pool_manager
        session._trust_env = False  # aiohttp has no public setter; read back by .trust_env
    return api


def another_client(api: ApiClient, user_agent: str) -> ApiClient:
    """A client of the same server with the same credentials as ``api``, with connections of
    its own: what one component sends does not wait behind another's in a shared connection
    pool (on a cluster, each kubelet and controller is a client of its own). The caller closes
    it."""
    other = ApiClient(configuration=api.configuration)
    other.user_agent = user_agent
    session = api.rest_client.pool_manager
    other.rest_client.pool_manager._trust_env = session.trust_env
    return other


def is_loopback(url: str) -> bool:
    """``url``'s host is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
