"""One admission review, from request bytes to response bytes, in two synchronous steps around
the one asynchronous part (reading the cluster).

:func:`run_review` parses the AdmissionReview, parses the objects and, when the route needs
nothing from the cluster (the defaulter, the runtime validator, a denial), decides and writes the
answer. When it does need the cluster (the TrainJob validator: the live runtime, the JobSet on
update, the PriorityClasses), it returns :class:`Needs`: the caller reads a
:class:`~trainer.admission.types.ClusterView` through its :class:`ClusterLookup`
(:func:`read_view`) and calls :func:`run_review` again with it. The steps are pure CPU work on
bytes in and bytes out, so the app can run them inline for a small review or in a worker
process for a large one (:mod:`webhooks.offload`) with the same results.

Answers follow controller-runtime: a validator's errors deny with ``status: {code: 403,
reason: Forbidden, message}``, the message being every ``path: problem`` aggregated the way
Kubernetes does (``[a, b]`` for several); warnings are passed through; DELETE and CONNECT are
allowed unchecked. Objects are parsed leniently (:func:`trainer.api.load.parse_object`): the API
server has already applied the CRD schema. A body that is not JSON, or not an AdmissionReview
with a ``request.uid``, gets a 400/422 JSON error; with a uid, every problem is an
AdmissionReview denial (400 for a request that does not fit the route, 422 for an object that
does not parse). A ``BuildError`` or ``QuantityError`` escaping admission (it should have been a
field error) is still the user's input: denied 403/422 and logged as a warning. Any other
exception is logged and denied with code 500 as the last resort; the fuzz tests check that no
input reaches it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch

from trainer.admission.defaulter import default_trainjob
from trainer.admission.runtime import validate_runtime
from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView, Verdict
from trainer.api import constants as c
from trainer.api.load import ObjectError, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.machinery.errors import format_errors
from trainer.machinery.models.base import K8sModel
from trainer.machinery.quantity import QuantityError
from trainer.machinery.status import failure
from trainer.runtime.info import BuildError
from webhooks.body import HTTPProblem
from webhooks.lookup import ClusterLookup

log = logging.getLogger("webhooks.admission")

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"

PATH_VALIDATE_TRAINJOB = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
PATH_VALIDATE_TRAINING_RUNTIME = "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"
PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME = (
    "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime"
)
PATH_MUTATE_TRAINJOB = "/mutate-trainer-kubeflow-org-v1alpha1-trainjob"

#: Deepest nesting accepted in an object. Real objects stay under 30 levels (a pod affinity
#: inside a runtimePatch is about 25); the bound keeps serialization (pydantic stops at about
#: 250 levels) and JSONPatch diffing (recursive) well inside their limits.
MAX_OBJECT_DEPTH = 100
_CHECKED_OPERATIONS = ("CREATE", "UPDATE")
_UNCHECKED_OPERATIONS = ("DELETE", "CONNECT")


# ---------------------------------------------------------------------------------------------
# Outcomes


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


def dump(data: Mapping[str, Any]) -> bytes:
    # ensure_ascii keeps the body valid UTF-8 whatever strings (lone surrogates) came in.
    return json.dumps(data, ensure_ascii=True).encode()


def problem_body(problem: HTTPProblem) -> bytes:
    return dump(failure(problem.status, problem.reason, problem.message))


@dataclass
class Answer:
    """The HTTP answer to one review (status and JSON body), and what the log line needs:
    the request's identity (uid, namespace, name, operation; never the object) and the
    outcome."""

    status: int
    body: bytes
    meta: dict[str, str]
    outcome: Outcome | None = None
    close: bool = False
    """Close the connection after answering (part of the body was not read)."""


@dataclass(frozen=True)
class ViewKeys:
    """What to read of the cluster for a TrainJob's admission."""

    runtime_kind: str
    runtime_name: str
    namespace: str
    name: str
    update: bool


@dataclass
class Needs:
    """A review that needs the cluster: read ``keys`` (None: nothing to read, an empty view)
    and run the review again with the view."""

    uid: str
    meta: dict[str, str]
    keys: ViewKeys | None
    prepared: Prepared | None = None


# ---------------------------------------------------------------------------------------------
# Reading the request


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
            f"got {short(api_version)} and {short(kind)}",
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise HTTPProblem(422, "Invalid", "request: Required value: an AdmissionRequest object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise HTTPProblem(422, "Invalid", "request.uid: Required value: a non-empty string")
    return request, uid


def short(value: Any, limit: int = 80) -> str:
    """A value for an error message: JSON, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = "<unprintable>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def request_meta(request: Mapping[str, Any] | None) -> dict[str, str]:
    """The request's identity, for the log line."""
    req = request or {}
    return {k: string(req.get(k)) for k in ("uid", "namespace", "name", "operation")}


# ---------------------------------------------------------------------------------------------
# Parsing the objects


@dataclass
class Prepared:
    """One review, parsed: the objects and where they live."""

    request: dict[str, Any]
    operation: str
    namespace: str
    name: str
    new: K8sModel
    old: K8sModel | None


@dataclass(frozen=True)
class Route:
    """One admission route: which kind it admits and how. ``decide`` gets the parsed review,
    the cluster view (when ``needs_view``) and the time to stamp."""

    path: str
    model: type[K8sModel]
    kind: str
    decide: Callable[[Prepared, ClusterView | None, str], Outcome]
    needs_view: bool = False


def _check_kind(request: dict[str, Any], route: Route) -> None:
    gvk = request.get("kind")
    if gvk is None:
        return  # Only the object's own apiVersion/kind is checked below.
    expected = {"group": c.GROUP, "version": c.VERSION, "kind": route.kind}
    if not isinstance(gvk, dict) or any(gvk.get(k) != v for k, v in expected.items()):
        raise _bad_request(
            f"request.kind: Invalid value: {short(gvk)}: this webhook admits "
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
        f"{prefix}{key}: Invalid value: {short(data[key])}: must be a string"
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
            f"request.{field}: Invalid value: {short(data.get('apiVersion'))} "
            f"{short(data.get('kind'))}: this webhook admits {c.API_VERSION} {route.kind}"
        )
    return obj


def prepare(request: dict[str, Any], route: Route, *, shallow: bool = False) -> Prepared | Outcome:
    """Parse one review's objects (the outcome itself for DELETE/CONNECT, allowed unchecked).
    Problems with the request raise :class:`Denial`. ``shallow``: the caller knows no value in
    the request nests deeper than :data:`MAX_OBJECT_DEPTH` (see :func:`opening_brackets`), so
    the objects are not walked to check it."""
    operation = request.get("operation")
    if operation in _UNCHECKED_OPERATIONS:
        return Outcome(allowed=True)
    if operation not in _CHECKED_OPERATIONS:
        raise _bad_request(
            f"request.operation: Unsupported value: {short(operation)}: supported values: "
            '"CREATE", "UPDATE", "DELETE", "CONNECT"'
        )
    assert isinstance(operation, str)
    _check_kind(request, route)
    new = _parse(request.get("object"), "object", route, shallow)
    old = (
        _parse(request.get("oldObject"), "oldObject", route, shallow)
        if operation == "UPDATE"
        else None
    )
    meta = getattr(new, "metadata", None)
    namespace = string(request.get("namespace")) or string(getattr(meta, "namespace", None))
    name = string(request.get("name")) or string(getattr(meta, "name", None))
    return Prepared(request, operation, namespace or "default", name, new, old)


# ---------------------------------------------------------------------------------------------
# The cluster view


def view_keys(prepared: Prepared) -> ViewKeys | None:
    """What a TrainJob's admission must read: the runtime of ``spec.runtimeRef`` (when its
    kind is one admission supports), and the JobSet on update. None: nothing."""
    new = prepared.new
    spec = new.spec if isinstance(new, TrainJob) else None
    if spec is None:
        return None
    ref = spec.runtime_ref
    if ref.api_group != c.GROUP or ref.kind not in (
        c.KIND_TRAINING_RUNTIME,
        c.KIND_CLUSTER_TRAINING_RUNTIME,
    ):
        return None  # validate_trainjob reports the unsupported kind.
    update = isinstance(prepared.old, TrainJob)
    return ViewKeys(ref.kind, ref.name, prepared.namespace, prepared.name, update)


async def read_view(lookup: ClusterLookup, keys: ViewKeys | None) -> ClusterView:
    """The cluster as ``keys`` asks: the live runtime, the JobSet (updates only), the
    PriorityClasses (only when the runtime uses Volcano)."""
    if keys is None:
        return ClusterView()
    runtime, error = await lookup.runtime(keys.runtime_kind, keys.namespace, keys.runtime_name)
    jobset = await lookup.jobset(keys.namespace, keys.name) if keys.update else None
    priority_classes = None
    if runtime is not None and runtime.spec is not None:
        policy = runtime.spec.pod_group_policy
        if policy is not None and policy.volcano is not None:
            priority_classes = await lookup.priority_classes()
    return ClusterView(runtime, error, jobset, priority_classes)


# ---------------------------------------------------------------------------------------------
# Deciding


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


def _validate_trainjob(p: Prepared, view: ClusterView | None, now: str) -> Outcome:
    assert isinstance(p.new, TrainJob)
    old = p.old if isinstance(p.old, TrainJob) else None
    return _verdict_outcome(validate_trainjob(p.new, old, view or ClusterView()))


def _validate_runtime(p: Prepared, view: ClusterView | None, now: str) -> Outcome:
    assert isinstance(p.new, TrainingRuntime | ClusterTrainingRuntime)
    old = p.old if isinstance(p.old, TrainingRuntime | ClusterTrainingRuntime) else None
    return _verdict_outcome(validate_runtime(p.new, old))


def _runtime_patches(job: TrainJob) -> dict[str, Any]:
    """The part of ``job``'s wire form the defaulter may change: ``spec.runtimePatches``."""
    patches = job.spec.runtime_patches if job.spec is not None else None
    if patches is None:
        return {}
    return {"spec": {"runtimePatches": [patch.to_wire() for patch in patches]}}


def _default_trainjob(p: Prepared, view: ClusterView | None, now: str) -> Outcome:
    assert isinstance(p.new, TrainJob)
    old = p.old if isinstance(p.old, TrainJob) else None
    # The defaulter changes nothing but runtimePatches[].time, so diffing that part alone gives
    # the JSONPatch a diff of the whole objects would (same paths, same operations) without
    # serialising and walking the rest (seconds for a TrainJob with tens of thousands of env).
    before = _runtime_patches(p.new)
    after = _runtime_patches(default_trainjob(p.new, old, now))
    patch = jsonpatch.make_patch(before, after).patch if before != after else []
    return Outcome(allowed=True, patch=patch or None)


ROUTES = (
    Route(PATH_VALIDATE_TRAINJOB, TrainJob, c.KIND_TRAINJOB, _validate_trainjob, needs_view=True),
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
ROUTES_BY_PATH = {route.path: route for route in ROUTES}


def guarded(uid: str, decide: Callable[[], Outcome | Needs]) -> Outcome | Needs:
    """``decide()``, with every exception turned into a denial (see the module docstring)."""
    try:
        return decide()
    except Denial as denial:
        return Outcome(False, denial.code, denial.reason, denial.message)
    except (BuildError, QuantityError) as exc:
        # The pure layer's "this input is unusable" errors, when admission let one escape
        # instead of reporting a field error: still the user's problem, so a denial (what the
        # build error says, or an invalid quantity), not a 500.
        log.warning(
            "admission raised %s instead of returning a field error (uid=%s)",
            type(exc).__name__,
            short(uid),
        )
        if isinstance(exc, QuantityError):
            return Outcome(False, 422, "Invalid", f"invalid quantity: {exc}", errors=1)
        return Outcome(False, 403, "Forbidden", str(exc), errors=1)
    except Exception as exc:
        log.exception("admission of request uid=%s failed", short(uid))
        return internal_error(exc)


def internal_error(exc: BaseException) -> Outcome:
    message = f"internal error in the admission webhook: {type(exc).__name__}"
    return Outcome(False, 500, "InternalError", message)


def answer(uid: str, meta: dict[str, str], outcome: Outcome) -> Answer:
    """The AdmissionReview answering ``uid`` with ``outcome``, as bytes."""
    try:
        body = dump(review_response(uid, outcome))
    except Exception:
        log.exception("admission response for uid=%s could not be written", short(uid))
        outcome = Outcome(False, 500, "InternalError", "internal error in the response")
        body = dump(review_response(uid, outcome))
    return Answer(200, body, meta, outcome)


def run_review(
    body: bytes,
    path: str,
    now: str,
    view: ClusterView | None = None,
    *,
    keep: bool = False,
) -> Answer | Needs:
    """Review ``body`` on route ``path`` (the module docstring): the answer, or what must be
    read of the cluster first (pass it as ``view`` to a second call). ``keep``: the
    :class:`Needs` keeps the parsed review, for :func:`finish_review` in the same process."""
    route = ROUTES_BY_PATH[path]
    try:
        request, uid = parse_review(body)
    except HTTPProblem as problem:
        return Answer(problem.status, problem_body(problem), request_meta(None))
    meta = request_meta(request)
    shallow = opening_brackets(body) <= MAX_OBJECT_DEPTH

    def decide() -> Outcome | Needs:
        prepared = prepare(request, route, shallow=shallow)
        if isinstance(prepared, Outcome):
            return prepared
        if route.needs_view and view is None:
            return Needs(uid, meta, view_keys(prepared), prepared if keep else None)
        return route.decide(prepared, view, now)

    result = guarded(uid, decide)
    if isinstance(result, Needs):
        return result
    return answer(uid, meta, result)


def finish_review(needs: Needs, path: str, view: ClusterView, now: str) -> Answer:
    """The answer to a review :func:`run_review` kept parsed (``keep=True``), given its view."""
    route = ROUTES_BY_PATH[path]
    prepared = needs.prepared
    assert prepared is not None
    result = guarded(needs.uid, lambda: route.decide(prepared, view, now))
    assert isinstance(result, Outcome)
    return answer(needs.uid, needs.meta, result)
