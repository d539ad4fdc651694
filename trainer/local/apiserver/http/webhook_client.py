"""The admission webhook client: one pooled HTTPS session per caBundle.

The core's admission chain (:mod:`trainer.local.apiserver.core.admission`) builds the
AdmissionReview and reads the answer; this module only moves bytes, so the core imports
nothing of HTTP. A failed call is reported as the core expects it: a timeout as
``TimeoutError`` (the chain answers "context deadline exceeded"), any other client error as
:class:`~trainer.local.apiserver.core.admission.WebhookCallError` with aiohttp's message.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ssl
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import aiohttp
import h11

from trainer.local.apiserver.core.admission import WebhookCallError
from trainer.local.apiserver.core.services import PodPort

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
PodDialer = Callable[[str, str, int], Awaitable[Streams]]
"""Opens a connection to a container port of a running pod (namespace, name, port): the
kubelet's, which reaches into the pod's network sandbox (docs/local-plane.md, "The network
sandbox")."""
MAX_RESPONSE = 8 << 20
"""The most of a webhook's answer read (the same bound as a request body)."""


class WebhookClient:
    """Sessions keyed by the caBundle they trust (created on first use, closed by
    :meth:`close`)."""

    def __init__(self) -> None:
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._contexts: dict[str, ssl.SSLContext] = {}
        self.pod_dialer: PodDialer | None = None
        """Set by the plane that runs pods (``trainer up``); without it a Service's pods
        cannot be reached."""

    def _context(self, ca_bundle: str) -> ssl.SSLContext:
        key = hashlib.sha256(ca_bundle.encode()).hexdigest()
        ctx = self._contexts.get(key)
        if ctx is None:
            if ca_bundle:
                ctx = ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
            else:
                ctx = ssl.create_default_context()
            self._contexts[key] = ctx
        return ctx

    def _session(self, ca_bundle: str) -> aiohttp.ClientSession:
        key = hashlib.sha256(ca_bundle.encode()).hexdigest()
        session = self._sessions.get(key)
        if session is None or session.closed:
            # One context: the system store is loaded (tens of ms) only when no caBundle is set.
            ctx = self._context(ca_bundle)
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))
            self._sessions[key] = session
        return session

    async def post(
        self, url: str, ca_bundle: str, body: bytes, timeout: float
    ) -> tuple[int, bytes]:
        session = self._session(ca_bundle)
        try:
            async with session.post(
                url,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                return resp.status, await resp.read()
        except TimeoutError:
            raise
        except aiohttp.ClientError as exc:
            raise WebhookCallError(str(exc) or type(exc).__name__) from exc

    async def post_to_pod(
        self,
        endpoint: PodPort,
        url: str,
        server_name: str,
        ca_bundle: str,
        body: bytes,
        timeout: float,
    ) -> tuple[int, bytes]:
        """POST to a Service's pod: a connection from the kubelet into the pod's sandbox,
        TLS for the Service's DNS name (as the API server dials the Service's address), one
        HTTP/1.1 request. Not pooled: webhook calls to a Service are few and each may land
        on another pod."""
        if self.pod_dialer is None:
            raise WebhookCallError(
                f"pod {endpoint.namespace}/{endpoint.pod} is not run by this plane's kubelet"
            )
        try:
            return await asyncio.wait_for(
                self._exchange(endpoint, url, server_name, ca_bundle, body), timeout
            )
        except (OSError, ssl.SSLError, h11.ProtocolError) as exc:
            raise WebhookCallError(str(exc) or type(exc).__name__) from exc

    async def _exchange(
        self, endpoint: PodPort, url: str, server_name: str, ca_bundle: str, body: bytes
    ) -> tuple[int, bytes]:
        assert self.pod_dialer is not None
        reader, writer = await self.pod_dialer(endpoint.namespace, endpoint.pod, endpoint.port)
        try:
            await writer.start_tls(self._context(ca_bundle), server_hostname=server_name)
            parts = urlsplit(url)
            conn = h11.Connection(h11.CLIENT)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            headers = [
                ("Host", parts.netloc),
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ]
            writer.write(conn.send(h11.Request(method="POST", target=target, headers=headers)))
            writer.write(conn.send(h11.Data(data=body)))
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            status = 0
            chunks: list[bytes] = []
            size = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(65536))
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > MAX_RESPONSE:
                        raise WebhookCallError(f"the answer is over {MAX_RESPONSE} bytes")
                    chunks.append(bytes(event.data))
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    return status, b"".join(chunks)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
