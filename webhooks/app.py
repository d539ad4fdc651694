"""The admission webhook as a FastAPI app: AdmissionReview v1 in, AdmissionReview v1 out.

Routes (upstream's paths, registered by ``manifests/base/webhook``):

* ``POST /validate-trainer-kubeflow-org-v1alpha1-trainjob``: :func:`validate_trainjob` on a
  :class:`~trainer.admission.types.ClusterView` read through a :class:`ClusterLookup`;
* ``POST /validate-trainer-kubeflow-org-v1alpha1-{trainingruntime,clustertrainingruntime}``:
  :func:`validate_runtime`;
* ``POST /mutate-trainer-kubeflow-org-v1alpha1-trainjob``: :func:`default_trainjob`, answered as
  a base64 JSONPatch (none when nothing changed);
* ``GET /healthz`` (always ok) and ``GET /readyz`` ("certificates are not ready" until the
  readiness callable says so).

What a review decides, and how problems are answered, is :mod:`webhooks.review`. This module
reads the request and chooses where the review runs:

* the body is read within a limit (:mod:`webhooks.body`; 8 MiB, above what an API server sends
  for an UPDATE of the largest object it accepts). A larger review is denied with code 413 and
  a message naming its size, the limit and what to do (a plain HTTP 413 only when its uid cannot
  be read);
* a small review (up to 32 KiB) is decided on the event loop; a larger one in a worker process
  (:mod:`webhooks.offload`), so one huge review cannot stall the loop the webhook shares with
  the controller; beyond the pool's queue a large review is denied with code 429.

Nothing a client sends can make the app fail: every answer is an AdmissionReview or a 4xx JSON
``Status``; the last-resort 500 denial is for bugs, and the fuzz tests check no input reaches it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from trainer.admission.types import ClusterView
from trainer.machinery import times
from webhooks.body import (
    DEFAULT_MAX_BODY_BYTES,
    HEAD_BYTES,
    HTTPProblem,
    TooLarge,
    find_uid,
    read_body,
)
from webhooks.lookup import ClusterLookup
from webhooks.offload import Offload, WorkerFailed
from webhooks.review import (
    MAX_OBJECT_DEPTH,
    PATH_MUTATE_TRAINJOB,
    PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINJOB,
    ROUTES,
    Answer,
    Needs,
    Outcome,
    Route,
    answer,
    finish_review,
    internal_error,
    nested_deeper_than,
    opening_brackets,
    problem_body,
    read_view,
    run_review,
    short,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_OBJECT_DEPTH",
    "NOT_READY_MESSAGE",
    "PATH_MUTATE_TRAINJOB",
    "PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME",
    "PATH_VALIDATE_TRAINING_RUNTIME",
    "PATH_VALIDATE_TRAINJOB",
    "create_app",
    "nested_deeper_than",
    "opening_brackets",
    "utc_now",
]

log = logging.getLogger("webhooks.admission")

NOT_READY_MESSAGE = "certificates are not ready"
_JSON = "application/json"


def utc_now() -> str:
    """The current time as RFC 3339 (seconds, ``Z``): what the defaulter stamps."""
    return times.now()


# ---------------------------------------------------------------------------------------------
# Answers that do not come from admission


def _problem_answer(problem: HTTPProblem) -> Answer:
    return Answer(problem.status, problem_body(problem), {})


def too_large_answer(route: Route, exc: TooLarge) -> Answer:
    """A denial with code 413 when the review's uid can be read from its first bytes; a plain
    HTTP 413 otherwise."""
    uid = find_uid(exc.head)
    if uid is None:
        return _problem_answer(exc.problem())
    outcome = Outcome(False, 413, "RequestEntityTooLarge", exc.message(route.kind), errors=1)
    return answer(uid, {"uid": uid}, outcome)


def busy_answer(route: Route, head: bytes, offload: Offload) -> Answer:
    """A denial with code 429: the pool and its queue are full of large reviews."""
    message = (
        f"the admission webhook is busy: {offload.capacity} large reviews are running or "
        f"waiting (at most {offload.workers} at once, {offload.queue} waiting); "
        "retry in a moment"
    )
    uid = find_uid(head)
    if uid is None:
        return _problem_answer(HTTPProblem(429, "TooManyRequests", message))
    return answer(uid, {"uid": uid}, Outcome(False, 429, "TooManyRequests", message, errors=1))


def _response(result: Answer) -> Response:
    response = Response(result.body, status_code=result.status, media_type=_JSON)
    if result.close:
        # Part of the body was not read: the connection cannot carry another request.
        response.headers["connection"] = "close"
    if result.status == 429:
        response.headers["retry-after"] = "1"
    return response


# ---------------------------------------------------------------------------------------------
# Logging


def _log_review(route: Route, result: Answer, started: float) -> None:
    """One line per review: who, what, the decision and how long it took. Never the object
    (it may carry secrets in env values) nor the denial message (it quotes values)."""
    if not log.isEnabledFor(logging.INFO):
        return
    meta, outcome = result.meta, result.outcome
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    fields: dict[str, Any] = {
        "uid": meta.get("uid", ""),
        "kind": route.kind,
        "object": f"{namespace}/{name}" if namespace else name,
        "operation": meta.get("operation", ""),
        "allowed": outcome.allowed if outcome else False,
        "code": outcome.code if outcome and not outcome.allowed else result.status,
        "errors": outcome.errors if outcome else 0,
        "warnings": len(outcome.warnings or []) if outcome else 0,
        "patched": bool(outcome and outcome.patch),
        "latency_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    text = " ".join(f"{k}={json.dumps(v, ensure_ascii=True)}" for k, v in fields.items())
    log.info("admission review %s", text, extra={"review": fields})


# ---------------------------------------------------------------------------------------------
# Running a review


async def _view(lookup: ClusterLookup, needs: Needs) -> ClusterView | Outcome:
    """The cluster view a review needs, or the last-resort denial when it cannot be read."""
    try:
        return await read_view(lookup, needs.keys)
    except Exception as exc:
        log.exception("admission of request uid=%s failed", short(needs.uid))
        return internal_error(exc)


async def review_inline(body: bytes, route: Route, lookup: ClusterLookup, now: str) -> Answer:
    result = run_review(body, route.path, now, keep=True)
    if isinstance(result, Answer):
        return result
    view = await _view(lookup, result)
    if isinstance(view, Outcome):
        return answer(result.uid, result.meta, view)
    return finish_review(result, route.path, view, now)


async def review_offloaded(
    body: bytes, route: Route, lookup: ClusterLookup, now: str, offload: Offload
) -> Answer:
    """The review in a worker process; the caller holds a place in the offload's gate."""
    try:
        return await offload.review(body, route.path, now, lambda needs: _view(lookup, needs))
    except WorkerFailed as exc:
        # The worker died (killed, out of memory), took too long or could not start: this
        # review fails, the next one gets a new worker.
        log.error("admission worker failed (route %s): %s", route.path, exc)
        outcome = Outcome(
            False, 500, "InternalError", f"internal error in the admission webhook: {exc}"
        )
        uid = find_uid(body[:HEAD_BYTES])
        if uid is None:
            return _problem_answer(HTTPProblem(500, "InternalError", outcome.message))
        return answer(uid, {"uid": uid}, outcome)


async def _read_head(request: Request) -> bytes:
    """The first bytes of a body we will not review (the rest is read and dropped)."""
    try:
        return (await read_body(request, HEAD_BYTES))[:HEAD_BYTES]
    except TooLarge as exc:
        return exc.head
    except HTTPProblem:
        return b""


# ---------------------------------------------------------------------------------------------
# The app


def create_app(
    lookup: ClusterLookup,
    *,
    now: Callable[[], str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ready: Callable[[], bool] | None = None,
    offload: Offload | None = None,
) -> FastAPI:
    """The webhook app.

    ``lookup`` reads the cluster (runtime, JobSet, PriorityClasses); ``now`` gives the time the
    defaulter stamps (RFC 3339; default: the wall clock); reviews larger than
    ``max_body_bytes`` are denied with 413; ``ready`` backs ``/readyz`` (default: always
    ready; pass the certificate rotator's ``is_ready``); ``offload`` runs large reviews
    (default: a pool of :func:`~webhooks.offload.default_workers` processes, started on the
    first large review; the app's ``state.offload``, to close it).
    """
    clock = now or utc_now
    is_ready = ready or (lambda: True)
    pool = offload or Offload()
    app = FastAPI(
        title="Kubeflow Trainer admission webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.offload = pool

    def endpoint(route: Route) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            started = time.perf_counter()
            result = await _handle(request, route)
            _log_review(route, result, started)
            return _response(result)

        handle.__name__ = route.path.strip("/").replace("-", "_")
        return handle

    async def _handle(request: Request, route: Route) -> Answer:
        header = request.headers.get("content-length", "")
        declared = int(header) if header.isdigit() and len(header) <= 18 else -1
        placed = False
        try:
            if pool.inline_max_bytes < declared <= max_body_bytes:
                # A large review: take its place in the queue before reading it.
                if not pool.try_enter():
                    return busy_answer(route, await _read_head(request), pool)
                placed = True
            try:
                body = await read_body(request, max_body_bytes)
            except TooLarge as exc:
                result = too_large_answer(route, exc)
                result.close = not exc.drained
                return result
            except HTTPProblem as problem:
                return _problem_answer(problem)
            # Only the defaulter stamps the time.
            now_text = clock() if route.path == PATH_MUTATE_TRAINJOB else ""
            if len(body) <= pool.inline_max_bytes:
                return await review_inline(body, route, lookup, now_text)
            if not placed:
                if not pool.try_enter():
                    return busy_answer(route, body[:HEAD_BYTES], pool)
                placed = True
            return await review_offloaded(body, route, lookup, now_text, pool)
        except Exception:
            log.exception("admission request could not be handled (route %s)", route.path)
            return _problem_answer(HTTPProblem(500, "InternalError", "internal error"))
        finally:
            if placed:
                pool.leave()

    for route in ROUTES:
        app.add_api_route(route.path, endpoint(route), methods=["POST"], include_in_schema=False)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        if is_ready():
            return Response("ok", media_type="text/plain")
        return Response(NOT_READY_MESSAGE, status_code=503, media_type="text/plain")

    return app
