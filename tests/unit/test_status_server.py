"""The status server's answers (docs/status-server.md): auth by TokenReview, the 64 KiB limit,
payload validation, SSA as ``trainer-status`` and every status code. The API is a fake whose
TokenReview is the local API server's real token issuer, so expiry, audiences and
signatures are checked as a cluster would."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from tests.asgi import asgi_request
from trainer.kube.authn import TokenReviewer, bearer_token, namespace_of
from trainer.kube.ratelimit import RateLimiter
from trainer.kube.rest import APIError
from trainer.local.apiserver.auth.tokens import TokenIssuer
from trainer.statusserver.fairlimit import FairLimiter
from trainer.statusserver.server import (
    MAX_BODY_BYTES,
    StatusService,
    create_status_app,
)

PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job/status"
AUD = "trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job/status"
STATUS = {
    "progressPercentage": 40,
    "estimatedRemainingSeconds": 60,
    "metrics": [{"name": "loss", "value": "0.3"}],
    "lastUpdatedTime": "2026-01-01T00:00:00Z",
}


class FakeKube:
    """TokenReview through a real issuer; apply records its call (or fails as told)."""

    def __init__(self, issuer: TokenIssuer) -> None:
        self.issuer = issuer
        self.now = time.time()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {
            ("serviceaccounts", "team", "default"): {"metadata": {"uid": "sa-team"}},
            ("serviceaccounts", "other", "default"): {"metadata": {"uid": "sa-other"}},
        }
        self.trainjobs = {("team", "job")}
        self.applied: list[tuple[dict[str, Any], str, bool, str | None]] = []
        self.reviews = 0
        self.review_error: APIError | None = None
        self.apply_error: APIError | None = None

    def lookup(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, ns, name))

    async def create(self, obj: dict[str, Any], **_kw: Any) -> dict[str, Any]:
        self.reviews += 1
        if self.review_error is not None:
            raise self.review_error
        return self.issuer.token_review(obj, self.now, self.lookup)

    async def apply(
        self,
        obj: dict[str, Any],
        field_manager: str,
        force: bool = True,
        *,
        subresource: str | None = None,
        **_kw: Any,
    ) -> dict[str, Any]:
        if self.apply_error is not None:
            raise self.apply_error
        meta = obj["metadata"]
        if (meta["namespace"], meta["name"]) not in self.trainjobs:
            raise APIError(404, "NotFound", f'trainjobs.trainer.kubeflow.org "{meta["name"]}"')
        self.applied.append((obj, field_manager, force, subresource))
        return obj


@pytest.fixture
def issuer() -> TokenIssuer:
    return TokenIssuer()


@pytest.fixture
def kube(issuer: TokenIssuer) -> FakeKube:
    return FakeKube(issuer)


def token(
    issuer: TokenIssuer, kube: FakeKube, ns: str = "team", aud: str = AUD, exp: int = 3600
) -> str:
    sa = {"metadata": {"name": "default", "namespace": ns, "uid": f"sa-{ns}"}}
    answer = issuer.token_request(
        sa, {"spec": {"audiences": [aud], "expirationSeconds": exp}}, kube.now, kube.lookup
    )
    return str(answer["status"]["token"])


async def post(
    kube: FakeKube,
    body: Any,
    auth: list[str] | None,
    path: str = PATH,
    method: str = "POST",
) -> tuple[int, Any]:
    service = StatusService(kube, TokenReviewer(kube), FairLimiter(0, 1))  # type: ignore[arg-type]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = [("authorization", a) for a in auth or []]
    resp = await asgi_request(create_status_app(service), method, path, raw, headers=headers)
    return resp.status, resp.json()


def failure(code: int, message: str) -> dict[str, Any]:
    reasons = {
        403: "Forbidden",
        404: "NotFound",
        413: "RequestEntityTooLarge",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
    }
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reasons[code],
        "code": code,
    }


async def test_a_valid_post_is_applied_with_ssa_and_echoed(
    issuer: TokenIssuer, kube: FakeKube
) -> None:
    body = {"trainerStatus": STATUS}
    code, answer = await post(kube, body, [f"Bearer {token(issuer, kube)}"])
    assert (code, answer) == (200, body)
    ((obj, manager, force, sub),) = kube.applied
    assert (manager, force, sub) == ("trainer-status", True, "status")
    assert obj == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "job", "namespace": "team"},
        "status": {"trainerStatus": STATUS},
    }


async def test_scheme_is_case_insensitive_and_reviews_are_cached(
    issuer: TokenIssuer, kube: FakeKube
) -> None:
    tok = token(issuer, kube)
    service = StatusService(kube, TokenReviewer(kube), FairLimiter(0, 1))  # type: ignore[arg-type]
    app = create_status_app(service)
    for scheme in ("bearer", "BEARER", "Bearer"):
        resp = await asgi_request(
            app,
            "POST",
            PATH,
            json.dumps({"trainerStatus": STATUS}).encode(),
            headers=[("authorization", f"{scheme} {tok}")],
        )
        assert resp.status == 200
    assert kube.reviews == 1 and len(kube.applied) == 3


async def test_empty_request_is_ok_and_writes_nothing(issuer: TokenIssuer, kube: FakeKube) -> None:
    auth = [f"Bearer {token(issuer, kube)}"]
    assert await post(kube, {}, auth) == (200, {})
    assert await post(kube, {"trainerStatus": None}, auth) == (200, {"trainerStatus": None})
    assert kube.applied == []


@pytest.mark.parametrize(
    "auth",
    [
        None,
        ["Basic dXNlcjpwYXNz"],
        ["Bearer"],
        ["Bearer a b"],  # two credentials
        ["Bearer not-a-jwt"],
    ],
    ids=["missing", "basic", "no-credential", "two-credentials", "garbage"],
)
async def test_bad_authorization_is_forbidden(kube: FakeKube, auth: list[str] | None) -> None:
    assert await post(kube, {"trainerStatus": STATUS}, auth) == (403, failure(403, "Forbidden"))
    assert kube.applied == [] and kube.reviews == 0


async def test_two_authorization_headers_are_forbidden(issuer: TokenIssuer, kube: FakeKube) -> None:
    tok = token(issuer, kube)
    code, _ = await post(kube, {"trainerStatus": STATUS}, [f"Bearer {tok}", f"Bearer {tok}"])
    assert code == 403 and kube.applied == []


async def test_token_of_another_namespace_is_forbidden(issuer: TokenIssuer, kube: FakeKube) -> None:
    # A token with this job's audience, but of a service account in another namespace.
    tok = token(issuer, kube, ns="other")
    assert await post(kube, {"trainerStatus": STATUS}, [f"Bearer {tok}"]) == (
        403,
        failure(403, "Forbidden"),
    )
    assert kube.applied == []
    assert kube.reviews == 0  # its claims name another namespace: refused without a review


async def test_token_for_another_trainjob_is_forbidden(issuer: TokenIssuer, kube: FakeKube) -> None:
    other = "trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/other/status"
    tok = token(issuer, kube, aud=other)
    assert (await post(kube, {"trainerStatus": STATUS}, [f"Bearer {tok}"]))[0] == 403
    assert kube.applied == [] and kube.reviews == 0  # another audience: no review


async def test_expired_token_is_forbidden(issuer: TokenIssuer, kube: FakeKube) -> None:
    tok = token(issuer, kube, exp=600)
    kube.now += 601
    assert (await post(kube, {"trainerStatus": STATUS}, [f"Bearer {tok}"]))[0] == 403


async def test_token_signed_by_another_issuer_is_forbidden_and_remembered(
    kube: FakeKube,
) -> None:
    # Well-formed, so only the TokenReview can refuse it; the refusal is then remembered.
    tok = token(TokenIssuer(), kube)
    service = StatusService(kube, TokenReviewer(kube), FairLimiter(0, 1))  # type: ignore[arg-type]
    app = create_status_app(service)
    for _ in range(3):
        resp = await asgi_request(
            app, "POST", PATH, json.dumps({"trainerStatus": STATUS}).encode(),
            headers=[("authorization", f"Bearer {tok}")],
        )  # fmt: skip
        assert (resp.status, resp.json()) == (403, failure(403, "Forbidden"))
    assert kube.reviews == 1


async def test_a_client_with_too_many_reviews_waiting_is_told_to_retry(
    issuer: TokenIssuer, kube: FakeKube
) -> None:
    # A slow refill (one token in 2 s): at 20/s a loaded machine refilled the bucket before the
    # first review queued, and the loop below waited forever.
    limiter = FairLimiter(0.5, 1, max_waiting=1)
    app = create_status_app(StatusService(kube, TokenReviewer(kube), limiter))  # type: ignore[arg-type]
    body = json.dumps({"trainerStatus": STATUS}).encode()

    def send(tok: str) -> Any:
        return asgi_request(app, "POST", PATH, body, headers=[("authorization", f"Bearer {tok}")])

    await limiter.acquire("loopback")  # the bucket is empty: the next review waits
    first = asyncio.create_task(send(token(TokenIssuer(), kube)))
    async with asyncio.timeout(10):
        while limiter.waiting("loopback") == 0:
            assert not first.done(), (await first).json()
            await asyncio.sleep(0)
    refused = await send(token(TokenIssuer(), kube))
    assert (refused.status, refused.json()) == (429, failure(429, "Too many requests"))
    assert refused.header("retry-after") == "1"
    assert (await first).status == 403  # the waiting one got its review
    assert kube.reviews == 1
    assert (await send(token(issuer, kube))).status == 200  # the queue is free again


async def test_review_failure_is_an_internal_error(issuer: TokenIssuer, kube: FakeKube) -> None:
    kube.review_error = APIError(503, "ServiceUnavailable", "etcd is down")
    tok = token(issuer, kube)
    assert await post(kube, {"trainerStatus": STATUS}, [f"Bearer {tok}"]) == (
        500,
        failure(500, "Internal error"),
    )


async def test_payload_limit_is_64_kib(issuer: TokenIssuer, kube: FakeKube) -> None:
    auth = [f"Bearer {token(issuer, kube)}"]
    prefix = b'{"trainerStatus": null, "pad": "'
    fits = prefix + b"x" * (MAX_BODY_BYTES - len(prefix) - 2) + b'"}'
    assert len(fits) == MAX_BODY_BYTES
    assert (await post(kube, fits, auth))[0] == 200
    too_big = prefix + b"x" * (MAX_BODY_BYTES - len(prefix) - 1) + b'"}'
    assert len(too_big) == MAX_BODY_BYTES + 1
    assert await post(kube, too_big, auth) == (413, failure(413, "Payload too large"))


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"'])
async def test_unreadable_payload_is_invalid(
    issuer: TokenIssuer, kube: FakeKube, raw: bytes
) -> None:
    auth = [f"Bearer {token(issuer, kube)}"]
    assert await post(kube, raw, auth) == (422, failure(422, "Invalid payload"))


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            {**STATUS, "progressPercentage": 101},
            # kube-apiserver's words in a status update (tests/crd_cases: trainer-status-*).
            "status.trainerStatus.progressPercentage: Invalid value: 101: "
            "trainerStatus.progressPercentage in body should be less than or equal to 100",
        ),
        (
            {**STATUS, "estimatedRemainingSeconds": -1},
            "status.trainerStatus.estimatedRemainingSeconds: Invalid value: -1: "
            "trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0",
        ),
        (
            {**STATUS, "metrics": [{"name": "", "value": "1"}]},
            "status.trainerStatus.metrics[0].name",
        ),
        (
            {**STATUS, "metrics": [{"name": "loss", "value": "x" * 65}]},
            "status.trainerStatus.metrics[0].value",
        ),
        (
            {**STATUS, "metrics": [{"name": f"m{i}", "value": "1"} for i in range(257)]},
            "status.trainerStatus.metrics: Too many: 257: must have at most 256 items",
        ),
        (
            {"progressPercentage": 5},
            "lastUpdatedTime is required when trainerStatus is present",
        ),
        ({**STATUS, "bogus": 1}, "status.trainerStatus.bogus: Forbidden: unknown field"),
    ],
    ids=["progress", "eta", "metric-name", "metric-value", "metrics-count", "time", "unknown"],
)
async def test_schema_violations_are_422_with_the_api_message(
    issuer: TokenIssuer, kube: FakeKube, status: dict[str, Any], message: str
) -> None:
    code, answer = await post(kube, {"trainerStatus": status}, [f"Bearer {token(issuer, kube)}"])
    assert code == 422, answer
    assert answer["message"].startswith('TrainJob.trainer.kubeflow.org "job" is invalid: ')
    assert message in answer["message"]
    assert kube.applied == []


async def test_missing_trainjob_is_404(issuer: TokenIssuer, kube: FakeKube) -> None:
    kube.trainjobs.clear()
    tok = token(issuer, kube)
    assert await post(kube, {"trainerStatus": STATUS}, [f"Bearer {tok}"]) == (
        404,
        failure(404, "Train job not found"),
    )


async def test_api_rejection_and_failure(issuer: TokenIssuer, kube: FakeKube) -> None:
    tok = [f"Bearer {token(issuer, kube)}"]
    kube.apply_error = APIError(422, "Invalid", 'TrainJob "job" is invalid: x')
    assert await post(kube, {"trainerStatus": STATUS}, tok) == (
        422,
        failure(422, 'TrainJob "job" is invalid: x'),
    )
    kube.apply_error = APIError(500, "InternalError", "boom")
    assert await post(kube, {"trainerStatus": STATUS}, tok) == (500, failure(500, "Internal error"))


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/healthz",
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job",
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job/status/extra",
        "/apis/trainer.kubeflow.org/v1beta1/namespaces/team/trainjobs/job/status",
    ],
)
async def test_other_paths_are_404(kube: FakeKube, path: str) -> None:
    assert await post(kube, {}, None, path=path) == (404, failure(404, "Not found"))


async def test_other_methods_are_405(kube: FakeKube) -> None:
    code, answer = await post(kube, {}, None, method="GET")
    assert code == 405 and answer["reason"] == "MethodNotAllowed"


def test_bearer_token_parsing() -> None:
    assert bearer_token(["Bearer abc"]) == "abc"
    assert bearer_token(["bEaReR  abc "]) == "abc"
    assert bearer_token([]) is None
    assert bearer_token(["Bearer a", "Bearer a"]) is None
    assert bearer_token(["Bearer a b"]) is None
    assert bearer_token(["Token abc"]) is None


def test_namespace_of_review_user() -> None:
    assert namespace_of({"username": "system:serviceaccount:team:default"}) == "team"
    assert namespace_of({"username": "system:serviceaccount:team"}) is None
    assert namespace_of({"username": "alice"}) is None
    assert namespace_of({"username": "x", "extra": {"kubernetes.io/namespace": ["b"]}}) == "b"


async def test_rate_limiter_waits_for_a_token() -> None:
    now = [0.0]
    limiter = RateLimiter(2.0, 2, clock=lambda: now[0])
    await limiter.acquire()
    await limiter.acquire()
    assert limiter.tokens == 0
    now[0] += 0.5  # one token refilled at 2 qps
    await limiter.acquire()
    assert limiter.tokens == pytest.approx(0)
