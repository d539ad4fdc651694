"""The admission webhook app, called in-process: every route's allow/deny/warning/patch answers,
the view it builds through the lookup, and a table of malformed requests that must get clean
4xx answers (never a 500)."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.asgi import ASGIResponse, asgi_request
from trainer.admission.defaulter import default_trainjob
from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView
from trainer.api.load import parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.jobset.types import JobSet
from trainer.machinery.errors import format_errors
from trainer.runtime.info import Runtime
from webhooks.app import (
    DEFAULT_MAX_BODY_BYTES,
    MAX_OBJECT_DEPTH,
    NOT_READY_MESSAGE,
    PATH_MUTATE_TRAINJOB,
    PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINJOB,
    create_app,
    nested_deeper_than,
    opening_brackets,
)
from webhooks.body import DRAIN_BYTES, HEAD_BYTES
from webhooks.lookup import ClusterLookup, StaticLookup, not_found_message

NOW = "2026-11-22T10:00:00Z"

TORCH_CTR = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch
spec:
  mlPolicy:
    numNodes: 1
    torch: {}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: pytorch/pytorch
"""

TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: job
  namespace: team
spec:
  runtimeRef:
    name: torch
  trainer:
    numNodes: 2
    env:
    - name: TOKEN
      value: s3cr3t-value
"""


def _load(text: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _runtime(text: str, **changes: Any) -> Runtime:
    data = _load(text)
    data["metadata"].update(changes)
    obj = parse_object(data)
    assert isinstance(obj, TrainingRuntime | ClusterTrainingRuntime)
    return obj


def torch_runtime() -> Runtime:
    return _runtime(TORCH_CTR)


def deprecated_runtime() -> Runtime:
    return _runtime(
        TORCH_CTR, name="old-torch", labels={"trainer.kubeflow.org/support": "deprecated"}
    )


def volcano_runtime() -> Runtime:
    data = _load(TORCH_CTR)
    data["metadata"]["name"] = "volcano"
    data["spec"]["podGroupPolicy"] = {"volcano": {}}
    pod = data["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["priorityClassName"] = "high"
    obj = parse_object(data)
    assert isinstance(obj, ClusterTrainingRuntime)
    return obj


def trainjob(**spec: Any) -> dict[str, Any]:
    data = _load(TRAINJOB)
    data["spec"].update(spec)
    return data


def review(
    obj: Any,
    *,
    operation: str = "CREATE",
    old: Any = None,
    uid: str = "uid-1",
    kind: str | None = None,
) -> bytes:
    kind = kind or (obj.get("kind") if isinstance(obj, dict) else None) or "TrainJob"
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": kind},
        "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "x"},
        "operation": operation,
        "userInfo": {"username": "alice"},
        "object": obj,
    }
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict):
        request["name"] = meta.get("name", "")
        if "namespace" in meta:
            request["namespace"] = meta["namespace"]
    if old is not None:
        request["oldObject"] = old
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


class SpyLookup(StaticLookup):
    """A static lookup that records what the app asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, ...]] = []

    async def runtime(
        self, kind: str, namespace: str, name: str
    ) -> tuple[Runtime | None, str | None]:
        self.calls.append(("runtime", kind, namespace, name))
        return await super().runtime(kind, namespace, name)

    async def jobset(self, namespace: str, name: str) -> JobSet | None:
        self.calls.append(("jobset", namespace, name))
        return await super().jobset(namespace, name)

    async def priority_classes(self) -> frozenset[str] | None:
        self.calls.append(("priority_classes",))
        return await super().priority_classes()


def default_lookup() -> SpyLookup:
    return SpyLookup(
        runtimes=[torch_runtime(), deprecated_runtime(), volcano_runtime()],
        priority_classes=["low"],
    )


async def post(
    body: bytes, path: str = PATH_VALIDATE_TRAINJOB, lookup: ClusterLookup | None = None, **kw: Any
) -> ASGIResponse:
    app = create_app(lookup or default_lookup(), now=lambda: NOW, **kw)
    return await asgi_request(app, "POST", path, body)


def answer(resp: ASGIResponse, uid: str = "uid-1") -> dict[str, Any]:
    """The AdmissionReview response, after checking the envelope."""
    assert resp.status == 200, resp.body
    body = resp.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    out: dict[str, Any] = body["response"]
    assert out["uid"] == uid
    assert isinstance(out["allowed"], bool)
    return out


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


# ---------------------------------------------------------------------------------------------
# TrainJob validation


async def test_trainjob_allowed() -> None:
    out = answer(await post(review(trainjob())))
    assert out == {"uid": "uid-1", "allowed": True}


async def test_trainjob_denied_with_every_error_aggregated() -> None:
    obj = trainjob(
        trainer={"numNodes": 2, "env": [{"name": "PET_NNODES", "value": "4"}]},
        runtimePatches=[{"manager": "no-domain"}],
    )
    out = answer(await post(review(obj)))
    assert out["allowed"] is False
    status = out["status"]
    assert status["code"] == 403
    assert status["reason"] == "Forbidden"
    # Every "path: problem", joined as Kubernetes aggregates several errors.
    expected = validate_trainjob(
        TrainJob.from_wire(obj), None, ClusterView(runtime=torch_runtime())
    ).errors
    assert len(expected) >= 2
    assert status["message"] == format_errors(expected)
    message = status["message"]
    assert message.startswith("[") and message.endswith("]")
    assert (
        'spec.trainer.env: Invalid value: [{"name":"PET_NNODES","value":"4"}]: must not have '
        "reserved envs, invalid envs configured: [PET_NNODES]" in message
    )
    assert (
        'spec.runtimePatches[0].manager: Invalid value: "no-domain": must be a domain-prefixed '
        'path (such as "acme.io/foo")' in message
    )


async def test_trainjob_single_error_is_not_bracketed() -> None:
    obj = trainjob(runtimeRef={"name": "missing"})
    status = answer(await post(review(obj)))["status"]
    assert status == {
        "code": 403,
        "reason": "Forbidden",
        "message": 'spec.runtimeRef: Invalid value: {"name":"missing"}: '
        + not_found_message("ClusterTrainingRuntime", "missing")
        + ": specified clusterTrainingRuntime must be created before the TrainJob is created",
    }
    assert 'ClusterTrainingRuntime.trainer.kubeflow.org "missing" not found' in status["message"]


async def test_trainjob_warning_passed_through() -> None:
    out = answer(await post(review(trainjob(runtimeRef={"name": "old-torch"}))))
    assert out["allowed"] is True
    assert out["warnings"] == [
        'Referenced ClusterTrainingRuntime "old-torch" is deprecated and will be removed in a '
        "future release of Kubeflow Trainer. See runtime deprecation policy: "
        "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html"
        "#runtime-deprecation-policy"
    ]


async def test_namespaced_runtime_is_looked_up_in_the_trainjob_namespace() -> None:
    ns_runtime = _load(TORCH_CTR)
    ns_runtime["kind"] = "TrainingRuntime"
    ns_runtime["metadata"] = {"name": "local", "namespace": "team"}
    runtime = parse_object(ns_runtime)
    assert isinstance(runtime, TrainingRuntime)
    lookup = SpyLookup(runtimes=[runtime])
    ref = {"name": "local", "kind": "TrainingRuntime"}
    assert answer(await post(review(trainjob(runtimeRef=ref)), lookup=lookup))["allowed"]
    assert lookup.calls == [("runtime", "TrainingRuntime", "team", "local")]

    other = trainjob(runtimeRef=ref)
    other["metadata"]["namespace"] = "elsewhere"
    status = answer(await post(review(other), lookup=lookup))["status"]
    assert (
        'TrainingRuntime.trainer.kubeflow.org "local" not found: specified trainingRuntime'
        in (status["message"])
    )


async def test_view_reads_only_what_the_review_needs() -> None:
    # CREATE: the runtime only (no JobSet, no PriorityClasses without Volcano).
    lookup = default_lookup()
    await post(review(trainjob()), lookup=lookup)
    assert lookup.calls == [("runtime", "ClusterTrainingRuntime", "team", "torch")]
    # UPDATE: the JobSet of the same namespace/name too.
    lookup = default_lookup()
    await post(review(trainjob(), operation="UPDATE", old=trainjob()), lookup=lookup)
    assert lookup.calls == [
        ("runtime", "ClusterTrainingRuntime", "team", "torch"),
        ("jobset", "team", "job"),
    ]
    # Volcano runtime: the PriorityClasses.
    lookup = default_lookup()
    out = answer(await post(review(trainjob(runtimeRef={"name": "volcano"})), lookup=lookup))
    assert ("priority_classes",) in lookup.calls
    assert out["allowed"] is False
    assert 'PriorityClass \\"high\\" doesn\'t exist' in json.dumps(out["status"]["message"])
    # An unsupported runtime kind is not looked up at all.
    lookup = default_lookup()
    ref = {"name": "x", "kind": "Deployment", "apiGroup": "apps"}
    status = answer(await post(review(trainjob(runtimeRef=ref)), lookup=lookup))["status"]
    assert lookup.calls == []
    assert "unsupported runtime: Deployment.apps" in status["message"]


async def test_update_sees_the_running_jobset() -> None:
    jobset = JobSet.from_wire(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "job", "namespace": "team"},
            "status": {
                "replicatedJobsStatus": [
                    {
                        "name": "node",
                        "ready": 1,
                        "succeeded": 0,
                        "failed": 0,
                        "active": 1,
                        "suspended": 0,
                    }
                ]
            },
        }
    )
    old = trainjob(suspend=True)
    new = trainjob(suspend=True, runtimePatches=[{"manager": "kueue.x-k8s.io/manager"}])
    without = answer(await post(review(new, operation="UPDATE", old=old)))
    assert without["allowed"] is True
    lookup = SpyLookup(runtimes=[torch_runtime()], jobsets=[jobset])
    status = answer(await post(review(new, operation="UPDATE", old=old), lookup=lookup))["status"]
    assert status["message"] == (
        "spec.runtimePatches: Forbidden: RuntimePatches cannot be modified when the JobSet's "
        "ReplicatedJob node is still active"
    )


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
@pytest.mark.parametrize(
    "path",
    [
        PATH_VALIDATE_TRAINJOB,
        PATH_MUTATE_TRAINJOB,
        PATH_VALIDATE_TRAINING_RUNTIME,
        PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
    ],
)
async def test_delete_and_connect_are_allowed_unchecked(operation: str, path: str) -> None:
    lookup = default_lookup()
    # No object at all (DELETE carries oldObject only); nothing is read.
    body = review(None, operation=operation, old={"junk": True})
    out = answer(await post(body, path, lookup=lookup))
    assert out == {"uid": "uid-1", "allowed": True}
    assert lookup.calls == []


# ---------------------------------------------------------------------------------------------
# Runtime validation


BAD_RUNTIME_JOBS = [
    {
        "name": "node",
        "replicas": 2,
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}},
        },
    }
]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        (PATH_VALIDATE_TRAINING_RUNTIME, "TrainingRuntime"),
        (PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME, "ClusterTrainingRuntime"),
    ],
)
async def test_runtime_routes(path: str, kind: str) -> None:
    good = _load(TORCH_CTR)
    good["kind"] = kind
    assert answer(await post(review(good), path))["allowed"] is True

    bad = _load(TORCH_CTR)
    bad["kind"] = kind
    bad["spec"]["template"]["spec"]["replicatedJobs"] = BAD_RUNTIME_JOBS
    status = answer(await post(review(bad), path))["status"]
    base = "spec.template.spec.replicatedJobs[0]"
    assert status == {
        "code": 403,
        "reason": "Forbidden",
        "message": f"[{base}.replicas: Invalid value: 2: always must be 1, "
        f'{base}.template.spec.template.spec.containers: Invalid value: "array": must contain '
        "the required container for the ancestor: trainer]",
    }


async def test_cluster_runtime_deprecation_warning_on_create_only() -> None:
    data = _load(TORCH_CTR)
    data["metadata"]["labels"] = {"trainer.kubeflow.org/support": "deprecated"}
    path = PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME
    out = answer(await post(review(data), path))
    assert out["allowed"] is True
    assert out["warnings"][0].startswith('ClusterTrainingRuntime "torch" is deprecated')
    out = answer(await post(review(data, operation="UPDATE", old=data), path))
    assert "warnings" not in out


# ---------------------------------------------------------------------------------------------
# Mutation


def _apply(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, patch_of(response))
    return patched


async def test_create_stamps_missing_times_and_keeps_given_ones() -> None:
    obj = trainjob(
        runtimePatches=[
            {"manager": "acme.io/a"},
            {"manager": "acme.io/b", "time": "2020-01-01T00:00:00Z"},
        ]
    )
    out = answer(await post(review(obj), PATH_MUTATE_TRAINJOB))
    assert out["allowed"] is True
    assert patch_of(out) == [
        {"op": "add", "path": "/spec/runtimePatches/0/time", "value": NOW},
    ]
    patched = _apply(obj, out)
    assert [p.get("time") for p in patched["spec"]["runtimePatches"]] == [
        NOW,
        "2020-01-01T00:00:00Z",
    ]
    # Everything else is untouched.
    del patched["spec"]["runtimePatches"][0]["time"]
    assert patched == obj


async def test_no_patch_when_nothing_changes() -> None:
    for obj in (trainjob(), trainjob(runtimePatches=[{"manager": "a.io/x", "time": NOW}])):
        out = answer(await post(review(obj), PATH_MUTATE_TRAINJOB))
        assert out == {"uid": "uid-1", "allowed": True}


async def test_update_restamps_changed_patches_and_restores_unchanged_ones() -> None:
    old_time = "2025-01-01T00:00:00Z"
    old = trainjob(
        suspend=True,
        runtimePatches=[
            {"manager": "a.io/same", "time": old_time},
            {"manager": "a.io/changed", "time": old_time},
        ],
    )
    changed_spec = {"template": {"metadata": {"labels": {"x": "y"}}}}
    new = trainjob(
        suspend=True,
        runtimePatches=[
            {"manager": "a.io/same", "time": "2099-01-01T00:00:00Z"},
            {"manager": "a.io/changed", "time": old_time, "trainingRuntimeSpec": changed_spec},
            {"manager": "a.io/new"},
        ],
    )
    out = answer(await post(review(new, operation="UPDATE", old=old), PATH_MUTATE_TRAINJOB))
    patched = _apply(new, out)
    assert [p["time"] for p in patched["spec"]["runtimePatches"]] == [old_time, NOW, NOW]


# ---------------------------------------------------------------------------------------------
# Requests that are not what the route expects


async def test_wrong_kind_for_the_route_is_a_400_denial() -> None:
    runtime = _load(TORCH_CTR)
    status = answer(await post(review(runtime)))["status"]
    assert status["code"] == 400
    assert status["reason"] == "BadRequest"
    assert status["message"].startswith("request.kind: Invalid value: ")
    assert "this webhook admits trainer.kubeflow.org/v1alpha1 TrainJob" in status["message"]
    # request.kind says TrainJob but the object is a runtime.
    status = answer(await post(review(runtime, kind="TrainJob")))["status"]
    assert status["code"] == 400
    assert status["message"].startswith("request.object: Invalid value: ")


async def test_object_that_does_not_parse_is_a_422_denial() -> None:
    obj = trainjob(trainer={"numNodes": "two"})
    status = answer(await post(review(obj)))["status"]
    assert status["code"] == 422
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('spec.trainer.numNodes: Invalid value: "two": ')
    old = trainjob(suspend="yes")
    status = answer(await post(review(trainjob(), operation="UPDATE", old=old)))["status"]
    assert status["code"] == 422
    assert status["message"].startswith('oldObject.spec.suspend: Invalid value: "yes"')


def _raw(request: Any) -> bytes:
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


DEEP = {"spec": {"runtimeRef": {"name": "torch"}, "x": json.loads("[" * 150 + "]" * 150)}}

#: (name, body, HTTP status, AdmissionReview status code or None for a plain JSON error,
#:  a piece of the message)
MALFORMED: list[tuple[str, bytes, int, int | None, str]] = [
    ("empty body", b"", 400, None, "request body is empty"),
    ("not JSON", b"{nope", 400, None, "not valid JSON"),
    ("not UTF-8", b"\xff\xfe\xfa", 400, None, "not valid JSON"),
    ("too deep to parse", b"[" * 5000, 400, None, "not valid JSON"),
    ("huge integer", b"1" + b"0" * 5000, 400, None, "not valid JSON"),
    ("JSON array", b"[]", 422, None, "expected a JSON object"),
    ("JSON string", b'"AdmissionReview"', 422, None, "expected a JSON object"),
    ("other kind", b'{"apiVersion": "v1", "kind": "Pod"}', 422, None, "expected apiVersion"),
    (
        "v1beta1 review",
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}
        ).encode(),
        422,
        None,
        '"admission.k8s.io/v1beta1"',
    ),
    (
        "no request",
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
        422,
        None,
        "request: Required value",
    ),
    ("request not an object", _raw([1]), 422, None, "request: Required value"),
    ("no uid", _raw({"operation": "CREATE"}), 422, None, "request.uid: Required value"),
    ("empty uid", _raw({"uid": ""}), 422, None, "request.uid: Required value"),
    ("uid not a string", _raw({"uid": 7}), 422, None, "request.uid: Required value"),
    ("no operation", _raw({"uid": "uid-1"}), 200, 400, "request.operation: Unsupported value"),
    (
        "unknown operation",
        _raw({"uid": "uid-1", "operation": "PATCH"}),
        200,
        400,
        'request.operation: Unsupported value: "PATCH"',
    ),
    (
        "no object",
        _raw({"uid": "uid-1", "operation": "CREATE"}),
        200,
        400,
        "request.object: Required value",
    ),
    (
        "object is a list",
        _raw({"uid": "uid-1", "operation": "CREATE", "object": []}),
        200,
        400,
        "request.object: Required value",
    ),
    (
        "UPDATE without oldObject",
        _raw({"uid": "uid-1", "operation": "UPDATE", "object": _load(TRAINJOB)}),
        200,
        400,
        "request.oldObject: Required value",
    ),
    (
        "object without apiVersion",
        _raw({"uid": "uid-1", "operation": "CREATE", "object": {"kind": "TrainJob"}}),
        200,
        422,
        "apiVersion: Required value",
    ),
    (
        "apiVersion is a list",
        _raw({"uid": "uid-1", "operation": "CREATE", "object": {"apiVersion": [1], "kind": 2}}),
        200,
        422,
        "[apiVersion: Invalid value: [1]: must be a string, kind: Invalid value: 2: must be",
    ),
    (
        "kind is a string",
        _raw({"uid": "uid-1", "operation": "CREATE", "kind": "TrainJob", "object": {}}),
        200,
        400,
        "request.kind: Invalid value",
    ),
    (
        "object nested too deeply",
        _raw({"uid": "uid-1", "operation": "CREATE", "object": DEEP}),
        200,
        422,
        f"nested deeper than {MAX_OBJECT_DEPTH} levels",
    ),
    (
        "spec is not an object",
        _raw(
            {
                "uid": "uid-1",
                "operation": "CREATE",
                "object": {**_load(TRAINJOB), "spec": "nope"},
            }
        ),
        200,
        422,
        "spec: Invalid value",
    ),
]


@pytest.mark.parametrize(
    ("body", "http_status", "code", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in MALFORMED],
)
@pytest.mark.parametrize("path", [PATH_VALIDATE_TRAINJOB, PATH_MUTATE_TRAINJOB])
async def test_malformed_requests(
    path: str, body: bytes, http_status: int, code: int | None, message: str
) -> None:
    resp = await post(body, path)
    assert resp.status == http_status, resp.body
    assert resp.header("content-type") == "application/json"
    data = resp.json()
    if code is None:
        assert data["kind"] == "Status"
        assert data["code"] == http_status
        assert message in data["message"]
    else:
        status = answer(resp)["status"]
        assert status["code"] == code
        assert message in status["message"], status["message"]


async def test_oversized_review_is_denied_413_naming_its_size_and_the_limit() -> None:
    # The uid is read from the first bytes: an AdmissionReview denial the API server passes on.
    body = review(trainjob(trainer={"env": [{"name": "BIG", "value": "x" * 5000}]}))
    for content_length in (True, False):
        resp = await asgi_request(
            create_app(default_lookup(), max_body_bytes=1000),
            "POST",
            PATH_VALIDATE_TRAINJOB,
            body,
            content_length=content_length,
            chunk_size=100,
        )
        status = answer(resp)["status"]
        assert status["code"] == 413
        assert status["reason"] == "RequestEntityTooLarge"
        assert f"is {len(body)} bytes" in status["message"]
        assert "over the webhook's limit of 1000 bytes" in status["message"]
        assert "ConfigMap" in status["message"]
        # The whole body was read (and dropped): the connection stays usable.
        assert resp.header("connection") is None


async def test_oversized_body_without_a_readable_uid_is_a_plain_413() -> None:
    app = create_app(default_lookup(), max_body_bytes=1000)
    resp = await asgi_request(app, "POST", PATH_VALIDATE_TRAINJOB, b"x" * 5000, chunk_size=100)
    assert resp.status == 413
    body = resp.json()
    assert (body["kind"], body["code"], body["reason"]) == ("Status", 413, "RequestEntityTooLarge")
    assert "request body of 5000 bytes" in body["message"]
    assert "larger than the limit of 1000 bytes" in body["message"]


async def test_a_body_declared_beyond_the_drain_bound_is_not_read_past_its_head() -> None:
    app = create_app(default_lookup(), max_body_bytes=1000)
    head = review(trainjob(), uid="huge-1")[:-1] + b" " * (HEAD_BYTES + 10)
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads > 1:
            raise AssertionError("only the head may be read")
        return {"type": "http.request", "body": head, "more_body": True}

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    declared = str(DRAIN_BYTES + 1).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": PATH_VALIDATE_TRAINJOB,
        "raw_path": PATH_VALIDATE_TRAINJOB.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-length", declared), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 443),
    }
    await app(scope, receive, send)
    assert reads == 1
    assert sent[0]["status"] == 200
    assert (b"connection", b"close") in sent[0]["headers"]
    response = json.loads(sent[1]["body"])["response"]
    assert response["uid"] == "huge-1"
    assert response["status"]["code"] == 413
    assert f"is {DRAIN_BYTES + 1} bytes" in response["status"]["message"]


async def test_at_the_limit_is_reviewed() -> None:
    at_limit = review(trainjob())
    ok = await asgi_request(
        create_app(default_lookup(), max_body_bytes=len(at_limit)),
        "POST",
        PATH_VALIDATE_TRAINJOB,
        at_limit,
        content_length=False,
        chunk_size=100,
    )
    assert answer(ok)["allowed"] is True


def test_the_default_limit_holds_an_update_of_two_3_mib_objects() -> None:
    assert DEFAULT_MAX_BODY_BYTES >= 2 * 3 * 1024 * 1024 + 64 * 1024


async def test_bad_content_length() -> None:
    app = create_app(default_lookup())
    resp = await asgi_request(
        app,
        "POST",
        PATH_VALIDATE_TRAINJOB,
        b"{}",
        content_length=False,
        headers=[("content-length", "abc")],
    )
    assert resp.status == 400
    assert resp.json()["message"] == "Content-Length is not a number"


async def test_unknown_route_and_method_are_plain_4xx() -> None:
    app = create_app(default_lookup())
    assert (await asgi_request(app, "POST", "/validate-something-else", b"{}")).status == 404
    assert (await asgi_request(app, "GET", PATH_VALIDATE_TRAINJOB)).status == 405


async def test_invalid_quantity_is_a_field_denial(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The CRD schema rejects such quantities before the webhook; offline callers and direct
    # requests still get a clean denial.
    mpi = _load(TORCH_CTR)
    mpi["metadata"]["name"] = "mpi"
    mpi["spec"]["mlPolicy"] = {"numNodes": 1, "mpi": {"numProcPerNode": 1}}
    lookup = StaticLookup(runtimes=[_runtime(yaml.safe_dump(mpi))])
    obj = trainjob(
        runtimeRef={"name": "mpi"},
        trainer={"numNodes": 1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "abc"}}},
    )
    status = answer(await post(review(obj), lookup=lookup))["status"]
    assert status["code"] == 403
    assert "spec.runtimeRef" in status["message"]
    assert "invalid resource quantity: 'abc' is not a quantity" in status["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class BrokenLookup(StaticLookup):
    async def runtime(
        self, kind: str, namespace: str, name: str
    ) -> tuple[Runtime | None, str | None]:
        raise ConnectionError("apiserver unreachable")


async def test_last_resort_denies_with_500_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="webhooks.admission")
    status = answer(await post(review(trainjob()), lookup=BrokenLookup()))["status"]
    assert status == {
        "code": 500,
        "reason": "InternalError",
        "message": "internal error in the admission webhook: ConnectionError",
    }
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


# ---------------------------------------------------------------------------------------------
# Probes, logging, helpers


async def test_health_and_readiness() -> None:
    ready = False
    app = create_app(default_lookup(), ready=lambda: ready)
    health = await asgi_request(app, "GET", "/healthz")
    assert (health.status, health.body) == (200, b"ok")
    not_ready = await asgi_request(app, "GET", "/readyz")
    assert (not_ready.status, not_ready.body.decode()) == (503, NOT_READY_MESSAGE)
    ready = True
    assert (await asgi_request(app, "GET", "/readyz")).status == 200


async def test_one_log_line_per_review_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="webhooks.admission")
    obj = trainjob(trainer={"numNodes": 1, "env": [{"name": "PET_NNODES", "value": "s3cr3t"}]})
    await post(review(obj, uid="abc-123"))
    records = [r for r in caplog.records if r.name == "webhooks.admission"]
    assert len(records) == 1
    fields = records[0].__dict__["review"]
    assert fields["uid"] == "abc-123"
    assert fields["kind"] == "TrainJob"
    assert fields["object"] == "team/job"
    assert fields["operation"] == "CREATE"
    assert fields["allowed"] is False
    assert fields["code"] == 403
    assert fields["errors"] == 1
    assert fields["latency_ms"] >= 0
    line = records[0].getMessage()
    assert 'uid="abc-123"' in line and "allowed=false" in line
    assert "s3cr3t" not in line and "PET_NNODES" not in line


def test_opening_brackets_bound_the_nesting() -> None:
    # Only a body with more brackets than the limit is walked; strings can only add brackets.
    for depth in (1, 5, MAX_OBJECT_DEPTH + 1):
        value: object = "x"
        for level in range(depth):
            value = {"k": value} if level % 2 else ["[{", value]
        body = json.dumps(value).encode()
        assert nested_deeper_than(value, depth - 1)
        assert opening_brackets(body) >= depth


def test_nested_deeper_than() -> None:
    assert not nested_deeper_than({"a": [1, {"b": 2}]}, 3)
    assert nested_deeper_than({"a": [1, {"b": [2]}]}, 3)
    assert not nested_deeper_than("scalar", 0)
    assert nested_deeper_than(json.loads("[" * 900 + "]" * 900), 100)


async def test_static_lookup() -> None:
    ns_rt = _load(TORCH_CTR)
    ns_rt["kind"] = "TrainingRuntime"
    ns_rt["metadata"]["namespace"] = "a"
    objs = [parse_object(_load(TORCH_CTR)), parse_object(ns_rt), parse_object(_load(TRAINJOB))]
    lookup = StaticLookup.from_objects(objs, priority_classes=["p"])
    assert isinstance(lookup, ClusterLookup)
    found, err = await lookup.runtime("ClusterTrainingRuntime", "anything", "torch")
    assert found is not None and err is None
    found, err = await lookup.runtime("TrainingRuntime", "a", "torch")
    assert found is not None and found.kind == "TrainingRuntime"
    found, err = await lookup.runtime("TrainingRuntime", "b", "torch")
    assert found is None
    assert err == 'TrainingRuntime.trainer.kubeflow.org "torch" not found'
    assert await lookup.jobset("a", "x") is None
    assert await lookup.priority_classes() == frozenset({"p"})
    assert await StaticLookup().priority_classes() is None


async def test_no_benchmark_endpoints_in_the_production_app() -> None:
    body = review(trainjob())
    for path in ("/bench-echo", "/bench-allow"):
        assert (await post(body, path)).status == 404


def _patch(manager: str, pool: str, time: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {"spec": {"network": {"publishNotReadyAddresses": pool == "a"}}}
        },
    }
    if time is not None:
        out["time"] = time
    return out


@pytest.mark.parametrize(
    ("new_patches", "old_patches"),
    [
        pytest.param([_patch("a.io/x", "a")], None, id="create-stamped"),
        pytest.param([_patch("a.io/x", "a", "2025-01-01T00:00:00Z")], None, id="create-kept"),
        pytest.param(
            [_patch("a.io/x", "b", "2025-01-01T00:00:00Z"), _patch("b.io/y", "a")],
            [_patch("a.io/x", "a", "2025-01-01T00:00:00Z")],
            id="update-changed-and-new",
        ),
        pytest.param(
            [_patch("a.io/x", "a", "2026-01-01T00:00:00Z")],
            [_patch("a.io/x", "a", "2025-01-01T00:00:00Z")],
            id="update-unchanged-keeps-old-time",
        ),
        pytest.param([], None, id="empty-list"),
    ],
)
async def test_the_defaulting_patch_is_the_whole_object_diff(
    new_patches: list[dict[str, Any]], old_patches: list[dict[str, Any]] | None
) -> None:
    # The webhook diffs only spec.runtimePatches: the result must be the whole-object diff.
    obj = trainjob(runtimePatches=new_patches, suspend=True)
    old = trainjob(runtimePatches=old_patches, suspend=True) if old_patches is not None else None
    operation = "UPDATE" if old is not None else "CREATE"
    resp = await post(review(obj, operation=operation, old=old), PATH_MUTATE_TRAINJOB)
    got = answer(resp)
    new_model, old_model = TrainJob.from_wire(obj), TrainJob.from_wire(old) if old else None
    expected = jsonpatch.make_patch(
        new_model.to_wire(), default_trainjob(new_model, old_model, NOW).to_wire()
    ).patch
    patch = json.loads(base64.b64decode(got["patch"])) if "patch" in got else []
    assert patch == expected
    assert new_model.to_wire() == TrainJob.from_wire(obj).to_wire()  # input untouched


@pytest.mark.parametrize("value", ["9" * 5000, "99999999999999999999", "-5", "1e9"])
async def test_odd_content_lengths_are_a_4xx(value: str) -> None:
    resp = await asgi_request(
        create_app(default_lookup()),
        "POST",
        PATH_VALIDATE_TRAINJOB,
        review(trainjob()),
        content_length=False,
        headers=[("content-length", value)],
    )
    assert resp.status < 500, resp.body
    if resp.status != 200:
        assert resp.json()["kind"] == "Status"
    else:
        assert answer(resp).get("status", {}).get("code", 200) < 500
