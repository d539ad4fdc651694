"""How the executor's parts reach the API server: through the project's one REST client
(:class:`trainer.kube.rest.Kube`), like the controller, with a client of their own (user agent
``trainer-executor``, so the server's field managers and request log name them) and no
client-side rate limit (the local plane's API server runs on the same event loop; see
docs/local-plane.md, "Throughput").

Two calls have no :class:`Kube` method: appending to a container's log (this server's
extension, a POST of text to ``pods/log``) and a TokenRequest for a pod's projected
service-account token; both go through :meth:`Kube.request`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from trainer.kube.client import new_api_client
from trainer.kube.events import NORMAL, Recorder
from trainer.kube.informer import Informer
from trainer.kube.resources import PODS, SERVICE_ACCOUNTS
from trainer.kube.rest import APIError, Kube
from trainer.local.executor.policy.podfields import NODE_NAME
from trainer.machinery.backoff import doubling

log = logging.getLogger(__name__)

USER_AGENT = "trainer-executor"
API_TIMEOUT = 10.0
"""How long one call of the executor's parts may take before it counts as failed."""

TRANSIENT = (APIError, OSError, TimeoutError, ValueError)
"""Errors of one API call that a later attempt may not meet again (an HTTP error, a dropped
connection, a timeout, an answer that is not JSON): logged, then retried or dropped by the
caller."""

LOG_APPEND = "application/octet-stream"


def recorder(kube: Kube, component: str, host: str = NODE_NAME) -> Recorder:
    """The Event recorder of one of the executor's parts (``jobset-controller``,
    ``job-controller``, ``kubelet``, ``default-scheduler``), reporting from this host's node
    (``host``: its name)."""
    return Recorder(kube, component, host=host)


async def executor_kube(kubeconfig: str) -> Kube:
    """The executor's own client of the API server that ``kubeconfig`` names. The caller closes
    it (``await kube.api.close()``)."""
    api = await new_api_client(kubeconfig, qps_user_agent=USER_AGENT)
    return Kube(api, timeout=API_TIMEOUT)


async def append_log(
    kube: Kube, namespace: str, pod: str, container: str, text: str, run: int | None = None
) -> None:
    """Feed a container's log (this server's extension: POST to ``pods/log``); ``run`` is the
    container's restartCount when the text was written (a new run starts a new log)."""
    query = [("container", container)]
    if run is not None:
        query.append(("restartCount", str(run)))
    await kube.request(
        "create",
        "pods/log",
        "POST",
        PODS.path(namespace, pod, "log"),
        query=query,
        body=text.encode(),
        content_type=LOG_APPEND,
    )


async def request_token(
    kube: Kube, namespace: str, service_account: str, spec: dict[str, Any]
) -> dict[str, Any]:
    """POST a TokenRequest with ``spec`` for ``service_account``; the server's answer."""
    return await kube.request(
        "create",
        "serviceaccounts/token",
        "POST",
        SERVICE_ACCOUNTS.path(namespace, service_account, "token"),
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )


async def confirm_deletion(kube: Kube, pod: dict[str, Any]) -> None:
    """Finish a pod's graceful deletion once its containers stopped: delete it with a grace
    period of 0 (its uid as precondition, so a new pod of the same name is left alone), as a
    kubelet does; a failed call is retried (1 s, doubling to 10 s) until the pod is gone."""
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    failures = 0
    while True:
        try:
            await kube.delete(
                PODS,
                namespace,
                name,
                None,
                {"uid": str(meta.get("uid") or "")},
                grace_period_seconds=0,
            )
            return
        except APIError as exc:
            if exc.is_conflict:
                return  # another pod of that name: ours is gone
            failure: Exception = exc
        except TRANSIENT as exc:
            failure = exc
        failures += 1
        if failures == 1:
            log.warning("pod %s/%s: deletion not confirmed yet: %s", namespace, name, failure)
        await asyncio.sleep(doubling(failures, 1.0, 10.0))


async def create_pods(
    kube: Kube,
    pods: Informer,
    events: Recorder,
    owner: dict[str, Any],
    bodies: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Create ``bodies`` at once, as the Job controller sends its creates in parallel: each
    created pod is put in the pod cache (its handlers told) with a ``SuccessfulCreate`` Event
    on ``owner``; the first failure is raised once the others are counted (the work queue
    retries the owner with back-off). The pods created."""
    results = await asyncio.gather(
        *(kube.create(body, gvr=PODS) for body in bodies), return_exceptions=True
    )
    created = [r for r in results if not isinstance(r, BaseException)]
    for pod in created:
        pods.record_write(pod, notify=True)
        events.emit(owner, NORMAL, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return created
