"""Authentication and authorization of bearer tokens by the API server.

- :class:`TokenReviewer`: who a token belongs to (a TokenReview, optionally for one audience),
  positive answers cached briefly; the status server (TrainJobStatus gate) and the metrics
  filter use it.
- :class:`RequestAuthorizer` (``metrics.auth.enabled``): may that user make this request, as
  controller-runtime's ``WithAuthenticationAndAuthorization`` filter decides it: a
  SubjectAccessReview for the request's path and verb (a non-resource URL, like ``get
  /metrics``). Decisions are cached for ``ttl`` seconds per token, path and verb, so a scrape
  every few seconds costs the API server two reviews per ``ttl``."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer.kube import resources as r
from trainer.kube.ratelimit import RateLimiter
from trainer.kube.rest import APIError, Kube

log = logging.getLogger(__name__)

TOKEN_REVIEWS = r.GVR("authentication.k8s.io", "v1", "tokenreviews", False, "TokenReview")
ACCESS_REVIEWS = r.GVR(
    "authorization.k8s.io", "v1", "subjectaccessreviews", False, "SubjectAccessReview"
)
SA_PREFIX = "system:serviceaccount:"
REVIEW_CACHE_SECONDS = 10.0
REVIEW_CACHE_SIZE = 4096


@dataclass(frozen=True)
class Identity:
    """The user a TokenReview names."""

    username: str
    namespace: str | None
    """The service account's namespace (None for other users)."""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)


def namespace_of(user: dict[str, Any]) -> str | None:
    """The namespace of a service-account user (its username, else ``extra``)."""
    username = str(user.get("username") or "")
    if username.startswith(SA_PREFIX):
        ns, _, sa = username[len(SA_PREFIX) :].partition(":")
        if ns and sa:
            return ns
    extra = user.get("extra") or {}
    for key in ("authentication.kubernetes.io/namespace", "kubernetes.io/namespace"):
        values = extra.get(key) or []
        if len(values) == 1 and values[0]:
            return str(values[0])
    return None


def unverified_expiry(token: str) -> float | None:
    """``exp`` of a JWT, read without checking it (only to bound a cache entry of a token the
    API server has just verified)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        exp = payload.get("exp") if isinstance(payload, dict) else None
        return float(exp) if isinstance(exp, int | float) else None
    except ValueError:
        return None


class TokenReviewer:
    """Authenticates tokens with TokenReview, caching positive answers briefly (never past the
    token's own expiry)."""

    def __init__(
        self,
        kube: Kube,
        limiter: RateLimiter | None = None,
        *,
        ttl: float = REVIEW_CACHE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.limiter = limiter
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[str, tuple[float, Identity]] = {}

    @staticmethod
    def _key(token: str, aud: str | None) -> str:
        return hashlib.sha256(f"{aud or ''}\0{token}".encode()).hexdigest()

    def cached(self, token: str, aud: str | None = None) -> Identity | None:
        """The identity a recent positive review of ``token`` gave, if still cached (no API
        call: lets a caller skip its own queueing for a review that will not happen)."""
        key = self._key(token, aud)
        cached = self._cache.get(key)
        if cached is None:
            return None
        if cached[0] > self.clock():
            return cached[1]
        del self._cache[key]
        return None

    async def review(self, token: str, aud: str | None = None) -> Identity | None:
        """The identity of ``token`` (for audience ``aud``, else the API server's own); None
        when the API server does not authenticate it. API errors propagate."""
        cached = self.cached(token, aud)
        if cached is not None:
            return cached
        key = self._key(token, aud)
        now = self.clock()
        if self.limiter is not None:
            await self.limiter.acquire()
        spec: dict[str, Any] = {"token": token}
        if aud is not None:
            spec["audiences"] = [aud]
        answer = await self.kube.create(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "metadata": {},
                "spec": spec,
            },
            gvr=TOKEN_REVIEWS,
        )
        status = answer.get("status") or {}
        if not status.get("authenticated"):
            log.info("token rejected: %s", status.get("error") or "unauthenticated")
            return None
        if aud is not None and aud not in (status.get("audiences") or []):
            log.info("the token review did not confirm the audience %s", aud)
            return None
        user = status.get("user") or {}
        identity = Identity(
            str(user.get("username") or ""),
            namespace_of(user),
            str(user.get("uid") or ""),
            tuple(str(g) for g in user.get("groups") or []),
            {str(k): [str(x) for x in v] for k, v in (user.get("extra") or {}).items()},
        )
        until = now + self.ttl
        exp = unverified_expiry(token)
        if exp is not None:
            until = min(until, exp)
        if until > now:
            if len(self._cache) >= REVIEW_CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = (until, identity)
        return identity


@dataclass(frozen=True)
class Decision:
    status: int  # 200, 401 or 403 (500 when the API server could not be asked)
    message: str


def bearer_token(headers: list[str]) -> str | None:
    """The one credential of ``Authorization: Bearer <token>`` (scheme case-insensitive)."""
    if len(headers) != 1:
        return None
    parts = headers[0].split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    return parts[1]


class RequestAuthorizer:
    def __init__(
        self, kube: Kube, *, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.clock = clock
        self.reviewer = TokenReviewer(kube, ttl=ttl)
        self._cache: dict[tuple[str, str, str], tuple[float, Decision]] = {}

    async def check(self, authorization: list[str], path: str, verb: str = "get") -> Decision:
        token = bearer_token(authorization)
        if token is None:
            return Decision(401, "Unauthorized")
        key = (hashlib.sha256(token.encode()).hexdigest(), path, verb)
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            decision = await self._decide(token, path, verb)
        except APIError as exc:
            return Decision(500, f"Internal error: {exc.message}")
        if len(self._cache) > 1000:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[key] = (now + self.ttl, decision)
        return decision

    async def _decide(self, token: str, path: str, verb: str) -> Decision:
        user = await self.reviewer.review(token)
        if user is None:
            return Decision(401, "Unauthorized")
        access = await self.kube.create(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.username,
                    "groups": list(user.groups),
                    "uid": user.uid,
                    "extra": user.extra,
                    "nonResourceAttributes": {"path": path, "verb": verb},
                },
            },
            gvr=ACCESS_REVIEWS,
        )
        if (access.get("status") or {}).get("allowed"):
            return Decision(200, "")
        return Decision(403, f'Forbidden: user "{user.username}" cannot {verb} path "{path}"')
