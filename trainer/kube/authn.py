"""``metrics.auth.enabled``: who may read an endpoint, decided by the API server, as
controller-runtime's ``WithAuthenticationAndAuthorization`` filter does. The bearer token is
authenticated with a TokenReview, and the user it names is authorized with a
SubjectAccessReview for the request's path and verb (a non-resource URL, like ``get
/metrics``). Answers are cached for ``ttl`` seconds per token, path and verb, so a scrape every
few seconds costs the API server two reviews per ``ttl``."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainer.kube import resources as r
from trainer.kube.rest import APIError, Kube

TOKEN_REVIEWS = r.GVR("authentication.k8s.io", "v1", "tokenreviews", False, "TokenReview")
ACCESS_REVIEWS = r.GVR(
    "authorization.k8s.io", "v1", "subjectaccessreviews", False, "SubjectAccessReview"
)


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
        review = await self.kube.create(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
            gvr=TOKEN_REVIEWS,
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return Decision(401, "Unauthorized")
        user = status.get("user") or {}
        access = await self.kube.create(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.get("username"),
                    "groups": user.get("groups") or [],
                    "uid": user.get("uid"),
                    "extra": user.get("extra") or {},
                    "nonResourceAttributes": {"path": path, "verb": verb},
                },
            },
            gvr=ACCESS_REVIEWS,
        )
        if (access.get("status") or {}).get("allowed"):
            return Decision(200, "")
        return Decision(
            403, f'Forbidden: user "{user.get("username")}" cannot {verb} path "{path}"'
        )
