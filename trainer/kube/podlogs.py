"""A pod's container log, streamed: ``GET .../pods/{name}/log`` as raw bytes.

:class:`trainer.kube.rest.Kube` reads whole JSON answers; a log is text, possibly without
end (``follow=true`` holds the stream open until the container stops), so this reads the
answer chunk by chunk as it arrives. ``previous=true`` asks for the log of the container's
previous run (after a restart), as ``kubectl logs --previous``. A non-2xx answer is the same
:class:`~trainer.kube.rest.APIError` every other call raises (400 for a container that has no
previous run, 404 for a pod that does not exist). ``deleted_pod`` asks the local plane's API
server for the log it kept of a deleted pod (``deletedPod=true``, its extension:
docs/local-plane.md, "Logs of deleted pods"); a cluster ignores the parameter and answers 404
for a pod that is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import aiohttp

from trainer.kube.resources import PODS
from trainer.kube.rest import APIError, Kube, Request, error_from


async def stream_log(
    kube: Kube,
    namespace: str,
    pod: str,
    container: str,
    *,
    follow: bool = False,
    previous: bool = False,
    tail_lines: int | None = None,
    limit_bytes: int | None = None,
    connect_timeout: float = 30.0,
    deleted_pod: bool = False,
) -> AsyncGenerator[bytes, None]:
    """The log's bytes as they arrive. Use as ``async with contextlib.aclosing(...)``."""
    query = [("container", container)]
    if deleted_pod:
        query.append(("deletedPod", "true"))
    if follow:
        query.append(("follow", "true"))
    if previous:
        query.append(("previous", "true"))
    if tail_lines is not None:
        query.append(("tailLines", str(tail_lines)))
    if limit_bytes is not None:
        query.append(("limitBytes", str(limit_bytes)))
    path = PODS.path(namespace, pod, "log")
    req = Request("get", "pods/log", "GET", path, tuple(query))
    try:
        async with asyncio.timeout(connect_timeout):
            resp = await kube.open(
                req,
                aiohttp.ClientTimeout(
                    total=None, connect=connect_timeout, sock_connect=connect_timeout
                ),
                accept="*/*",
            )
    except TimeoutError as exc:
        raise APIError(0, "Timeout", f"log {path}: no answer within {connect_timeout:g}s") from exc
    except aiohttp.ClientError as exc:
        raise APIError(0, "ConnectionError", f"log {path}: {exc}") from exc
    try:
        if not 200 <= resp.status <= 299:
            raise error_from(resp.status, await resp.read())
        async for chunk in resp.content.iter_any():
            yield chunk
    except aiohttp.ClientError as exc:
        raise APIError(0, "ConnectionError", f"log {path}: {exc}") from exc
    finally:
        resp.close()
