"""The admission webhook as a FastAPI app: AdmissionReview v1 in, AdmissionReview v1 out.

Routes (spec 3.1):

* ``POST /validate-trainer-kubeflow-org-v1alpha1-trainjob``: :func:`validate_trainjob` on a
  :class:`~trainer.admission.types.ClusterView` read through a :class:`ClusterLookup`;
* ``POST /validate-trainer-kubeflow-org-v1alpha1-{trainingruntime,clustertrainingruntime}``:
  :func:`validate_runtime`;
* ``POST /mutate-trainer-kubeflow-org-v1alpha1-trainjob``: :func:`default_trainjob`, answered as
  a base64 JSONPatch (none when nothing changed);
* ``GET /healthz`` (always ok) and ``GET /readyz`` ("certificates are not ready" until the
  readiness callable says so).

Answers follow controller-runtime: a validator's errors deny with ``status: {code: 403,
reason: Forbidden, message}``, the message being every ``path: problem`` aggregated the way
Kubernetes does (``[a, b]`` for several); warnings are passed through; DELETE and CONNECT are
allowed unchecked. Objects are parsed leniently (:func:`trainer.api.load.parse_object`): the API
server has already applied the CRD schema.

Nothing a client sends can make the app fail. A body that is too large (judged from
Content-Length before reading, or while streaming), not JSON, or not an AdmissionReview with a
``request.uid`` gets a 400/413/422 JSON error; with a uid, every problem is an AdmissionReview
denial (400 for a request that does not fit the route, 422 for an object that does not parse).
A ``BuildError`` or ``QuantityError`` escaping admission (it should have been a field error) is
still the user's input: denied 403/422 and logged as a warning. Any other exception is logged
and denied with code 500 as the last resort; the fuzz tests check that no input reaches it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jsonpatch
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from trainer.admission.defaulter import default_trainjob
from trainer.admission.runtime import validate_runtime
from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView, Verdict
from trainer.api import constants as c
from trainer.api.base import K8sModel
from trainer.api.errors import format_errors
from trainer.api.load import ObjectError, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.runtime.info import BuildError
from trainer.runtime.quantity import QuantityError
from webhooks.lookup import ClusterLookup

log = logging.getLogger("webhooks.admission")

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024

PATH_VALIDATE_TRAINJOB = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
PATH_VALIDATE_TRAINING_RUNTIME = "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"
PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME = (
    "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime"
)
PATH_MUTATE_TRAINJOB = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"
PATH_BENCH_ECHO = "/bench-echo"
PATH_BENCH_ALLOW = "/bench-allow"

NOT_READY_MESSAGE = "certificates are not ready"
#: Deepest nesting accepted in an object. Real objects stay under 30 levels (a pod affinity
#: inside a runtimePatch is about 25); the bound keeps serialization (pydantic stops at about
#: 250 levels) and JSONPatch diffing (recursive) well inside their limits.
MAX_OBJECT_DEPTH = 100
_CHECKED_OPERATIONS = ("CREATE", "UPDATE")
_UNCHECKED_OPERATIONS = ("DELETE", "CONNECT")
_JSON = "application/json"


def utc_now() -> str:
    """The current time as RFC 3339 (seconds, ``Z``): what the defaulter stamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# Outcomes


class HTTPProblem(Exception):
    """A request that cannot be answered with an AdmissionReview (no uid to answer to)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class Denial(Exception):
    """A review answered ``allowed: false`` with this status (code, reason, message)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def _bad_request(message: str) -> Denial:
    return Denial(400, "BadRequest", message)


def _invalid(message: str) -> Denial:
    return Denial(422, "Invalid", message)


@dataclass
class Outcome:
    """What one review decided (also what gets logged)."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: list[str] | None = None
    patch: list[dict[str, Any]] | None = None
    errors: int = 0

    def response(self, uid: str) -> dict[str, Any]:
        out: dict[str, Any] = {"uid": uid, "allowed": self.allowed}
        if not self.allowed:
            out["status"] = {"code": self.code, "reason": self.reason, "message": self.message}
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if self.patch:
            out["patchType"] = "JSONPatch"
            out["patch"] = base64.b64encode(json.dumps(self.patch).encode()).decode()
        return out


def review_response(uid: str, outcome: Outcome) -> dict[str, Any]:
    """An AdmissionReview v1 carrying the response to request ``uid``."""
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": ADMISSION_KIND,
        "response": outcome.response(uid),
    }


def _json_response(data: Mapping[str, Any], status: int = 200) -> Response:
    # ensure_ascii keeps the body valid UTF-8 whatever strings (lone surrogates) came in.
    return Response(json.dumps(data, ensure_ascii=True), status_code=status, media_type=_JSON)


def _problem_response(problem: HTTPProblem) -> Response:
    body = {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": problem.status,
        "reason": problem.reason,
        "message": problem.message,
    }
    response = _json_response(body, problem.status)
    if problem.status == 413:
        # The rest of the body was not read: the connection cannot carry another request.
        response.headers["connection"] = "close"
    return response


# ---------------------------------------------------------------------------------------------
# Reading the request


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) a body larger than ``limit`` before reading it all:
    from Content-Length when given, else as soon as the streamed chunks exceed it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise HTTPProblem(400, "BadRequest", "Content-Length is not a number") from None
        if size > limit:
            raise HTTPProblem(
                413,
                "RequestEntityTooLarge",
                f"request body of {size} bytes is larger than the limit of {limit} bytes",
            )
    chunks: list[bytes] = []
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise HTTPProblem(
                    413,
                    "RequestEntityTooLarge",
                    f"request body is larger than the limit of {limit} bytes",
                )
            chunks.append(chunk)
    except ClientDisconnect:
        raise HTTPProblem(400, "BadRequest", "the client disconnected mid-request") from None
    return b"".join(chunks)


def parse_review(body: bytes) -> tuple[dict[str, Any], str]:
    """The ``request`` of an AdmissionReview v1 and its uid; :class:`HTTPProblem` (400 for
    what is not JSON, 422 for JSON that is not an AdmissionReview with a uid) otherwise."""
    if not body:
        raise HTTPProblem(400, "BadRequest", "request body is empty: expected an AdmissionReview")
    try:
        review = json.loads(body)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError, bad UTF-8 and over-long integers.
        text = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise HTTPProblem(400, "BadRequest", f"request body is not valid JSON: {text}") from None
    if not isinstance(review, dict):
        raise HTTPProblem(
            422, "Invalid", "request body is not an AdmissionReview: expected a JSON object"
        )
    api_version, kind = review.get("apiVersion"), review.get("kind")
    if api_version != ADMISSION_API_VERSION or kind != ADMISSION_KIND:
        raise HTTPProblem(
            422,
            "Invalid",
            f"expected apiVersion {ADMISSION_API_VERSION!r} and kind {ADMISSION_KIND!r}, "
            f"got {_short(api_version)} and {_short(kind)}",
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise HTTPProblem(422, "Invalid", "request: Required value: an AdmissionRequest object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise HTTPProblem(422, "Invalid", "request.uid: Required value: a non-empty string")
    return request, uid


def _short(value: Any, limit: int = 80) -> str:
    """A value for an error message: JSON, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = "<unprintable>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# The routes


@dataclass(frozen=True)
class Route:
    """One admission route: which kind it admits and how."""

    path: str
    model: type[K8sModel]
    kind: str
    handler: Callable[[ReviewContext], Awaitable[Outcome]]


@dataclass
class ReviewContext:
    """One review, parsed: the objects and where they live."""

    request: dict[str, Any]
    operation: str
    namespace: str
    name: str
    new: K8sModel
    old: K8sModel | None
    lookup: ClusterLookup
    now: Callable[[], str]


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _check_kind(request: dict[str, Any], route: Route) -> None:
    gvk = request.get("kind")
    if gvk is None:
        return  # Only the object's own apiVersion/kind is checked below.
    expected = {"group": c.GROUP, "version": c.VERSION, "kind": route.kind}
    if not isinstance(gvk, dict) or any(gvk.get(k) != v for k, v in expected.items()):
        raise _bad_request(
            f"request.kind: Invalid value: {_short(gvk)}: this webhook admits "
            f"{c.API_VERSION} {route.kind}"
        )


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON data nests objects/arrays more than ``limit`` levels (level by level, not
    recursive: a deep value cannot exhaust the stack here)."""
    level: list[Any] = [value] if isinstance(value, dict | list) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        deeper: list[Any] = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, dict | list):
                    deeper.append(child)
        level = deeper
        depth += 1
    return False


def opening_brackets(body: bytes) -> int:
    """How many ``{`` and ``[`` bytes ``body`` holds: a bound on how deep any value parsed from
    it can nest (brackets inside strings only make the bound looser), counted at C speed."""
    return body.count(b"{") + body.count(b"[")


def _parse(data: Any, field: str, route: Route, shallow: bool = False) -> K8sModel:
    if not isinstance(data, dict):
        raise _bad_request(f"request.{field}: Required value: a {route.kind} object")
    if not shallow and nested_deeper_than(data, MAX_OBJECT_DEPTH):
        raise _invalid(
            f"request.{field}: Invalid value: nested deeper than {MAX_OBJECT_DEPTH} levels"
        )
    prefix = "" if field == "object" else f"{field}."
    wrong = [
        f"{prefix}{key}: Invalid value: {_short(data[key])}: must be a string"
        for key in ("apiVersion", "kind")
        if key in data and not isinstance(data[key], str)
    ]
    if wrong:
        raise _invalid(wrong[0] if len(wrong) == 1 else "[" + ", ".join(wrong) + "]")
    try:
        obj = parse_object(data)
    except ObjectError as exc:
        # Paths are relative to the object; an oldObject problem says so.
        prefixed = [
            e if field == "object" else dataclasses.replace(e, path=f"{field}.{e.path}")
            for e in exc.errors
        ]
        raise _invalid(format_errors(prefixed)) from None
    if not isinstance(obj, route.model):
        raise _bad_request(
            f"request.{field}: Invalid value: {_short(data.get('apiVersion'))} "
            f"{_short(data.get('kind'))}: this webhook admits {c.API_VERSION} {route.kind}"
        )
    return obj


def _verdict_outcome(verdict: Verdict) -> Outcome:
    if verdict.errors:
        return Outcome(
            allowed=False,
            code=403,
            reason="Forbidden",
            message=format_errors(verdict.errors),
            warnings=verdict.warnings,
            errors=len(verdict.errors),
        )
    return Outcome(allowed=True, warnings=verdict.warnings)


async def cluster_view(
    lookup: ClusterLookup, new: TrainJob, old: TrainJob | None, namespace: str, name: str
) -> ClusterView:
    """What admission of ``new`` needs to know, read through ``lookup``: the live runtime of
    ``spec.runtimeRef`` (when its kind is one admission supports), the JobSet (updates only),
    the PriorityClasses (only when the runtime uses Volcano)."""
    spec = new.spec
    if spec is None:
        return ClusterView()
    ref = spec.runtime_ref
    if ref.api_group != c.GROUP or ref.kind not in (
        c.KIND_TRAINING_RUNTIME,
        c.KIND_CLUSTER_TRAINING_RUNTIME,
    ):
        return ClusterView()  # validate_trainjob reports the unsupported kind.
    runtime, error = await lookup.runtime(ref.kind, namespace, ref.name)
    jobset = await lookup.jobset(namespace, name) if old is not None else None
    priority_classes = None
    if runtime is not None and runtime.spec is not None:
        policy = runtime.spec.pod_group_policy
        if policy is not None and policy.volcano is not None:
            priority_classes = await lookup.priority_classes()
    return ClusterView(runtime, error, jobset, priority_classes)


async def _validate_trainjob(ctx: ReviewContext) -> Outcome:
    assert isinstance(ctx.new, TrainJob)
    old = ctx.old if isinstance(ctx.old, TrainJob) else None
    view = await cluster_view(ctx.lookup, ctx.new, old, ctx.namespace, ctx.name)
    return _verdict_outcome(validate_trainjob(ctx.new, old, view))


async def _validate_runtime(ctx: ReviewContext) -> Outcome:
    assert isinstance(ctx.new, TrainingRuntime | ClusterTrainingRuntime)
    old = ctx.old if isinstance(ctx.old, TrainingRuntime | ClusterTrainingRuntime) else None
    return _verdict_outcome(validate_runtime(ctx.new, old))


async def _default_trainjob(ctx: ReviewContext) -> Outcome:
    assert isinstance(ctx.new, TrainJob)
    old = ctx.old if isinstance(ctx.old, TrainJob) else None
    before = ctx.new.to_wire()
    after = default_trainjob(ctx.new, old, ctx.now()).to_wire()
    patch = jsonpatch.make_patch(before, after).patch
    return Outcome(allowed=True, patch=patch or None)


ROUTES = (
    Route(PATH_VALIDATE_TRAINJOB, TrainJob, c.KIND_TRAINJOB, _validate_trainjob),
    Route(
        PATH_VALIDATE_TRAINING_RUNTIME,
        TrainingRuntime,
        c.KIND_TRAINING_RUNTIME,
        _validate_runtime,
    ),
    Route(
        PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
        ClusterTrainingRuntime,
        c.KIND_CLUSTER_TRAINING_RUNTIME,
        _validate_runtime,
    ),
    Route(PATH_MUTATE_TRAINJOB, TrainJob, c.KIND_TRAINJOB, _default_trainjob),
)


async def admit(
    request: dict[str, Any],
    route: Route,
    lookup: ClusterLookup,
    now: Callable[[], str],
    *,
    shallow: bool = False,
) -> Outcome:
    """Decide one review (the request part of an AdmissionReview with a uid). Problems with
    the request itself raise :class:`Denial`. ``shallow``: the caller knows no value in the
    request nests deeper than :data:`MAX_OBJECT_DEPTH` (see :func:`opening_brackets`), so the
    objects are not walked to check it."""
    operation = request.get("operation")
    if operation in _UNCHECKED_OPERATIONS:
        return Outcome(allowed=True)
    if operation not in _CHECKED_OPERATIONS:
        raise _bad_request(
            f"request.operation: Unsupported value: {_short(operation)}: supported values: "
            '"CREATE", "UPDATE", "DELETE", "CONNECT"'
        )
    _check_kind(request, route)
    new = _parse(request.get("object"), "object", route, shallow)
    old = (
        _parse(request.get("oldObject"), "oldObject", route, shallow)
        if operation == "UPDATE"
        else None
    )
    meta = getattr(new, "metadata", None)
    namespace = _string(request.get("namespace")) or _string(getattr(meta, "namespace", None))
    name = _string(request.get("name")) or _string(getattr(meta, "name", None))
    ctx = ReviewContext(request, operation, namespace or "default", name, new, old, lookup, now)
    return await route.handler(ctx)


# ---------------------------------------------------------------------------------------------
# Logging


def _log_review(
    route: Route,
    request: Mapping[str, Any] | None,
    outcome: Outcome | None,
    status: int,
    started: float,
) -> None:
    """One line per review: who, what, the decision and how long it took. Never the object
    (it may carry secrets in env values) nor the denial message (it quotes values)."""
    if not log.isEnabledFor(logging.INFO):
        return
    req = request or {}
    namespace, name = _string(req.get("namespace")), _string(req.get("name"))
    fields: dict[str, Any] = {
        "uid": _string(req.get("uid")),
        "kind": route.kind,
        "object": f"{namespace}/{name}" if namespace else name,
        "operation": _string(req.get("operation")),
        "allowed": outcome.allowed if outcome else False,
        "code": outcome.code if outcome and not outcome.allowed else status,
        "errors": outcome.errors if outcome else 0,
        "warnings": len(outcome.warnings or []) if outcome else 0,
        "patched": bool(outcome and outcome.patch),
        "latency_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    text = " ".join(f"{k}={json.dumps(v, ensure_ascii=True)}" for k, v in fields.items())
    log.info("admission review %s", text, extra={"review": fields})


# ---------------------------------------------------------------------------------------------
# The app


def create_app(
    lookup: ClusterLookup,
    *,
    now: Callable[[], str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ready: Callable[[], bool] | None = None,
    bench_echo: bool = False,
) -> FastAPI:
    """The webhook app.

    ``lookup`` reads the cluster (runtime, JobSet, PriorityClasses); ``now`` gives the time the
    defaulter stamps (RFC 3339; default: the wall clock); requests larger than
    ``max_body_bytes`` are refused with 413; ``ready`` backs ``/readyz`` (default: always
    ready; pass the certificate rotator's ``is_ready``); ``bench_echo`` adds the benchmark's
    two bare baselines, which check nothing: ``POST /bench-echo`` echoes the review back with
    an allowing ``response`` added (the whole review, as Kubernetes' example webhooks answer),
    and ``POST /bench-allow`` answers with the allowing response alone.
    """
    clock = now or utc_now
    is_ready = ready or (lambda: True)
    app = FastAPI(
        title="Kubeflow Trainer admission webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    def endpoint(route: Route) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            started = time.perf_counter()
            outcome: Outcome | None = None
            try:
                body = await read_body(request, max_body_bytes)
                review, uid = parse_review(body)
            except HTTPProblem as problem:
                _log_review(route, None, None, problem.status, started)
                return _problem_response(problem)
            except Exception:
                log.exception("admission request could not be read (route %s)", route.path)
                return _problem_response(
                    HTTPProblem(500, "InternalError", "internal error reading the request")
                )
            try:
                shallow = opening_brackets(body) <= MAX_OBJECT_DEPTH
                outcome = await admit(review, route, lookup, clock, shallow=shallow)
            except Denial as denial:
                outcome = Outcome(False, denial.code, denial.reason, denial.message)
            except (BuildError, QuantityError) as exc:
                # The pure layer's "this input is unusable" errors, when admission let one
                # escape instead of reporting a field error: still the user's problem, so a
                # denial (what the build error says, or an invalid quantity), not a 500.
                log.warning(
                    "admission raised %s instead of returning a field error (uid=%s)",
                    type(exc).__name__,
                    _short(uid),
                )
                if isinstance(exc, QuantityError):
                    outcome = Outcome(False, 422, "Invalid", f"invalid quantity: {exc}", errors=1)
                else:
                    outcome = Outcome(False, 403, "Forbidden", str(exc), errors=1)
            except Exception as exc:
                log.exception("admission of request uid=%s failed", _short(uid))
                outcome = Outcome(
                    False,
                    500,
                    "InternalError",
                    f"internal error in the admission webhook: {type(exc).__name__}",
                )
            try:
                response = _json_response(review_response(uid, outcome))
            except Exception:
                log.exception("admission response for uid=%s could not be written", _short(uid))
                outcome = Outcome(False, 500, "InternalError", "internal error in the response")
                response = _json_response(review_response(uid, outcome))
            _log_review(route, review, outcome, 200, started)
            return response

        handle.__name__ = route.path.strip("/").replace("-", "_")
        return handle

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

    if bench_echo:

        @app.post(PATH_BENCH_ECHO, include_in_schema=False)
        async def bench_echo_route(request: Request) -> Response:
            review = json.loads(await request.body())
            review["response"] = Outcome(allowed=True).response(review["request"]["uid"])
            return _json_response(review)

        @app.post(PATH_BENCH_ALLOW, include_in_schema=False)
        async def bench_allow_route(request: Request) -> Response:
            review = json.loads(await request.body())
            uid = review["request"]["uid"]
            return _json_response(review_response(uid, Outcome(allowed=True)))

    return app
