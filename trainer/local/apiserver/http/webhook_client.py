"""The admission webhook client: one pooled HTTPS session per caBundle.

The core's admission chain (:mod:`trainer.local.apiserver.core.admission`) builds the
AdmissionReview and reads the answer; this module only moves bytes, so the core imports
nothing of HTTP. A failed call is reported as the core expects it: a timeout as
``TimeoutError`` (the chain answers "context deadline exceeded"), any other client error as
:class:`~trainer.local.apiserver.core.admission.WebhookCallError` with aiohttp's message.
"""

from __future__ import annotations

import base64
import hashlib
import ssl

import aiohttp

from trainer.local.apiserver.core.admission import WebhookCallError


class WebhookClient:
    """Sessions keyed by the caBundle they trust (created on first use, closed by
    :meth:`close`)."""

    def __init__(self) -> None:
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._contexts: dict[str, ssl.SSLContext] = {}

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

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
