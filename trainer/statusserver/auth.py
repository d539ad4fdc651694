"""Who may report a TrainJob's progress (docs/status-server.md, "Authentication").

In order, cheapest first, so that bad tokens cost the API server nothing and one client's
bad tokens cannot hold up another client's reports:

1. The token must look like a service-account token for the TrainJob's audience, of a
   service account in the TrainJob's namespace, and not have expired
   (:func:`trainer.kube.satoken.precheck`: local, no signature check). Garbage, tokens of
   another issuer format, of another audience or namespace are refused here.
2. A token the API server confirmed in the last few seconds is accepted from
   :class:`TokenReviewer`'s cache; one it refused in the last minute is refused again from
   a negative cache (both keyed by a SHA-256 of audience and token, bounded in size).
3. Otherwise the call waits for a token of the server's :class:`FairLimiter`, in the
   client's own queue (the client is the peer, :mod:`trainer.statusserver.peers`), and a TokenReview
   decides. A refused review counts against the client's standing in the limiter.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from trainer.kube.authn import Identity, TokenReviewer
from trainer.kube.satoken import MalformedToken, precheck
from trainer.statusserver.fairlimit import FairLimiter, TooManyWaiting
from trainer.statusserver.peers import Peer

log = logging.getLogger(__name__)

NEGATIVE_CACHE_SECONDS = 60.0
NEGATIVE_CACHE_SIZE = 4096
RETRY_AFTER_SECONDS = 1


class Refused(Exception):
    """The report is refused with ``code`` (403, or 429 with ``retry_after``)."""

    def __init__(self, code: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after


FORBIDDEN = (403, "Forbidden")


class StatusAuthenticator:
    def __init__(
        self,
        reviewer: TokenReviewer,
        limiter: FairLimiter,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.reviewer = reviewer
        self.limiter = limiter
        self.clock = clock
        self._refused: OrderedDict[str, float] = OrderedDict()

    def _refused_recently(self, key: str) -> bool:
        until = self._refused.get(key)
        if until is None:
            return False
        if until > self.clock():
            return True
        del self._refused[key]
        return False

    def _remember_refusal(self, key: str) -> None:
        self._refused.pop(key, None)
        self._refused[key] = self.clock() + NEGATIVE_CACHE_SECONDS
        while len(self._refused) > NEGATIVE_CACHE_SIZE:
            self._refused.popitem(last=False)

    async def authenticate(
        self, token: str, audience: str, namespace: str, client: Peer
    ) -> Identity:
        """The service account ``token`` authenticates as, for a report to ``audience`` of a
        TrainJob in ``namespace``; :class:`Refused` otherwise. API errors of the review
        propagate (500)."""
        try:
            claims = precheck(token, audience, self.clock())
        except MalformedToken as exc:
            # debug: whoever sends garbage must not be able to fill the log
            log.debug("status server: refused a token without review: %s", exc)
            raise Refused(*FORBIDDEN) from None
        if claims.namespace != namespace:
            log.debug(
                "status server: refused a token of namespace %s for %s without review",
                claims.namespace,
                audience,
            )
            raise Refused(*FORBIDDEN)
        identity = self.reviewer.cached(token, audience)
        if identity is None:
            key = hashlib.sha256(f"{audience}\0{token}".encode()).hexdigest()
            if self._refused_recently(key):
                raise Refused(*FORBIDDEN)
            key_of_client = await client.key()
            try:
                await self.limiter.acquire(key_of_client)
            except TooManyWaiting:
                log.debug("status server: %s has too many reviews waiting", key_of_client)
                raise Refused(429, "Too many requests", RETRY_AFTER_SECONDS) from None
            identity = await self.reviewer.review(token, audience)
            if identity is None or identity.namespace != namespace:
                self._remember_refusal(key)
                self.limiter.failed(key_of_client)
        if identity is None or identity.namespace != namespace:
            if identity is not None:
                log.info("status server: %s may not report for %s", identity.username, audience)
            raise Refused(*FORBIDDEN)
        return identity
