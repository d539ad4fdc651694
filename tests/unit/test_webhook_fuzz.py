"""Fuzzing the webhook app in-process (ASGI, no network) with 8,750 generated requests:
random bytes and JSON, AdmissionReview-shaped requests with random parts, TrainJob- and
runtime-shaped objects with random fields and wrong types, and realistic TrainJobs on the
built-in runtimes (which reach every admission rule).

For every request: no exception escapes the app, no 5xx, and the answer is either an
AdmissionReview (apiVersion, kind, ``response.uid`` echoed, ``response.allowed`` a bool, a
denial code that is not the last-resort 500, a JSONPatch that applies to the object) or a 4xx
JSON error. Each generated case is sent to every route it is meaningful for (a random body to
all four, a TrainJob to the validating and the mutating route...); each test asserts how many
requests it sent: 8,750 in all, from 2,650 generated cases (new ones every run). The random
bytes and the AdmissionReview envelopes are in test_webhook_fuzz_envelope.py (another xdist
worker), with the
strategies and checks of this module.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.asgi import asgi_request
from tests.strategies import wire_data
from trainer.api import constants as c
from trainer.api.load import parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSet
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.info import Runtime
from webhooks.app import (
    PATH_MUTATE_TRAINJOB,
    PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINING_RUNTIME,
    PATH_VALIDATE_TRAINJOB,
    create_app,
)
from webhooks.lookup import StaticLookup

pytestmark = pytest.mark.slow

TRAINJOB_PATHS = [PATH_VALIDATE_TRAINJOB, PATH_MUTATE_TRAINJOB]
RUNTIME_PATHS = [PATH_VALIDATE_TRAINING_RUNTIME, PATH_VALIDATE_CLUSTER_TRAINING_RUNTIME]
ALL_PATHS = TRAINJOB_PATHS + RUNTIME_PATHS
N_REVIEW = 600
SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

BUILTIN = builtin_runtimes()


def _volcano_runtime() -> Runtime:
    data = BUILTIN["torch-distributed"].to_wire()
    data["metadata"] = {"name": "volcano", "labels": {c.LABEL_SUPPORT: c.SUPPORT_DEPRECATED}}
    data["spec"]["podGroupPolicy"] = {"volcano": {}}
    pod = data["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["priorityClassName"] = "high"
    runtime = parse_object(data)
    assert isinstance(runtime, ClusterTrainingRuntime)
    return runtime


def _namespaced(name: str) -> Runtime:
    data = BUILTIN[name].to_wire()
    data["kind"] = c.KIND_TRAINING_RUNTIME
    data["metadata"] = {"name": name, "namespace": "default"}
    runtime = parse_object(data)
    assert isinstance(runtime, TrainingRuntime)
    return runtime


RUNTIMES: list[Runtime] = [
    *BUILTIN.values(),
    _volcano_runtime(),
    _namespaced("torch-distributed"),
    _namespaced("deepspeed-distributed"),
]
RUNTIME_NAMES = sorted({(r.metadata.name if r.metadata else None) or "" for r in RUNTIMES})
JOB_NAMES = ["node", "launcher", "dataset-initializer", "model-initializer", "cache-initializer"]
ACTIVE_JOBSET = JobSet.from_wire(
    {
        "apiVersion": jsc.API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": "job", "namespace": "default"},
        "status": {
            "replicatedJobsStatus": [
                {"name": n, "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
                for n in JOB_NAMES
            ]
        },
    }
)
LOOKUP = StaticLookup(runtimes=RUNTIMES, jobsets=[ACTIVE_JOBSET], priority_classes=["low"])
APP = create_app(LOOKUP, now=lambda: "2026-11-22T10:00:00Z")


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(autouse=True)
def no_error_logs() -> Iterator[None]:
    """The last-resort handler logs at ERROR: no input may reach it."""
    handler = _Errors()
    logger = logging.getLogger("webhooks.admission")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    assert not handler.records, [r.getMessage() for r in handler.records[:3]]


def check_response(resp: Any, path: str, body: bytes) -> None:
    """Check the answer to ``body`` sent to ``path`` is well formed (module docstring)."""
    assert 200 <= resp.status < 500, (resp.status, resp.body[:300])
    assert resp.header("content-type") == "application/json"
    data = json.loads(resp.body)
    assert isinstance(data, dict)
    if resp.status != 200:
        assert data["code"] == resp.status and isinstance(data["message"], str)
        return
    assert data["apiVersion"] == "admission.k8s.io/v1"
    assert data["kind"] == "AdmissionReview"
    response = data["response"]
    request = json.loads(body)["request"]
    assert response["uid"] == request["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        status = response["status"]
        assert status["code"] in (400, 403, 422), status
        assert isinstance(status["message"], str) and status["message"]
    assert all(isinstance(w, str) for w in response.get("warnings", []))
    if "patch" in response:
        assert path == PATH_MUTATE_TRAINJOB and response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"]))
        patched = jsonpatch.apply_patch(request["object"], ops)
        assert all(p.get("time") is not None for p in patched["spec"]["runtimePatches"])


# ---------------------------------------------------------------------------------------------
# Strategies

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
TEXTS = st.text(max_size=12)


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def review(request: Any, api_version: Any = "admission.k8s.io/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


@st.composite
def mutated(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one nested value (possibly the whole) replaced by random JSON or
    removed: wrong types and missing fields anywhere."""
    paths: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, [*path, k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*path, i])

    walk(value, [])
    path = draw(st.sampled_from(paths))
    out = json.loads(json.dumps(value))
    if not path:
        return draw(JSON)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(JSON)
    return out


def _object_request(obj: Any, operation: str, old: Any, uid: str) -> dict[str, Any]:
    req: dict[str, Any] = {"uid": uid, "operation": operation, "object": obj}
    if isinstance(obj, dict):
        kind = obj.get("kind")
        if isinstance(kind, str):
            req["kind"] = {"group": c.GROUP, "version": c.VERSION, "kind": kind}
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            for key in ("name", "namespace"):
                if isinstance(meta.get(key), str):
                    req[key] = meta[key]
    if old is not None:
        req["oldObject"] = old
    return req


ENV_NAMES = st.sampled_from(
    [
        "PET_NNODES",
        "PET_NODE_RANK",
        "OMPI_MCA_orte_default_hostfile",
        "DMLC_NUM_WORKER",
        "DATA_CACHE_ENDPOINT",
        "JAX_NUM_PROCESSES",
        "FOO",
        "",
    ]
)
ENV = st.lists(st.fixed_dictionaries({"name": ENV_NAMES}, optional={"value": TEXTS}), max_size=3)
QUANTITIES = st.sampled_from(["1", "2", "0", "100m", "4Gi", "1.5", "-1", "abc", "8"])
RESOURCES = st.fixed_dictionaries(
    {},
    optional={
        "limits": st.dictionaries(
            st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "amd.com/gpu"]), QUANTITIES
        ),
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), QUANTITIES),
    },
)
COMMANDS = st.sampled_from(
    [["tune", "run"], ["torchrun", "train.py"], ["python"], [], ["tune", "run", "x"]]
)
ARGS = st.lists(
    st.sampled_from(
        [
            "--config",
            "llama3_2/1B_lora",
            "qwen2_5/1.5B_full",
            "model.lora_rank=8",
            "dataset=x",
            "epochs=1",
            "--rdzv_endpoint=x",
        ]
    ),
    max_size=4,
)
TRAINER = st.fixed_dictionaries(
    {},
    optional={
        "numNodes": st.integers(min_value=-2, max_value=150),
        "image": TEXTS,
        "command": COMMANDS,
        "args": ARGS,
        "env": ENV,
        "resourcesPerNode": RESOURCES,
        "numProcPerNode": st.one_of(st.integers(min_value=0, max_value=16), st.just("auto")),
    },
)
INITIALIZER_SOURCE = st.fixed_dictionaries(
    {},
    optional={
        "storageUri": st.sampled_from(["hf://a/b", "cache://schema/table", "s3://b/k", ""]),
        "env": ENV,
        "secretRef": st.fixed_dictionaries({"name": st.just("s")}),
    },
)
CONTAINER_PATCH = st.fixed_dictionaries(
    {"name": st.sampled_from(["node", "launcher", "dataset-initializer", "sidecar"])},
    optional={"env": ENV, "resources": RESOURCES, "image": TEXTS},
)
JOB_PATCH = st.fixed_dictionaries(
    {"name": st.sampled_from([*JOB_NAMES, "ghost"])},
    optional={
        "template": st.fixed_dictionaries(
            {},
            optional={
                "metadata": st.fixed_dictionaries({}, optional={"labels": st.just({"a": "b"})}),
                "spec": st.fixed_dictionaries(
                    {},
                    optional={
                        "template": st.fixed_dictionaries(
                            {},
                            optional={
                                "spec": st.fixed_dictionaries(
                                    {},
                                    optional={
                                        "containers": st.lists(CONTAINER_PATCH, max_size=2),
                                        "initContainers": st.lists(CONTAINER_PATCH, max_size=1),
                                        "nodeSelector": st.just({"zone": "a"}),
                                        "priorityClassName": st.sampled_from(["high", "low"]),
                                    },
                                )
                            },
                        )
                    },
                ),
            },
        )
    },
)
RUNTIME_PATCH = st.fixed_dictionaries(
    {
        "manager": st.sampled_from(
            ["acme.io/team", "kueue.x-k8s.io/manager", "kueue.k8s.io/", "no-domain", "A.io/x"]
        )
    },
    optional={
        "time": st.sampled_from(["2025-01-01T00:00:00Z", "2026-11-22T10:00:00Z"]),
        "trainingRuntimeSpec": st.fixed_dictionaries(
            {},
            optional={
                "template": st.fixed_dictionaries(
                    {},
                    optional={
                        "metadata": st.just({"labels": {"x": "y"}}),
                        "spec": st.fixed_dictionaries(
                            {}, optional={"replicatedJobs": st.lists(JOB_PATCH, max_size=2)}
                        ),
                    },
                )
            },
        ),
    },
)
NAMES = st.one_of(st.just("job"), st.from_regex(r"[a-z]([-a-z0-9]{0,60}[a-z0-9])?", fullmatch=True))


@st.composite
def realistic_trainjob(draw: st.DrawFn) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": draw(st.sampled_from([*RUNTIME_NAMES, "missing"]))}
    if draw(st.booleans()):
        ref["kind"] = draw(
            st.sampled_from([c.KIND_TRAINING_RUNTIME, c.KIND_CLUSTER_TRAINING_RUNTIME, "Job"])
        )
    spec: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "trainer": TRAINER,
                "initializer": st.fixed_dictionaries(
                    {}, optional={"dataset": INITIALIZER_SOURCE, "model": INITIALIZER_SOURCE}
                ),
                "runtimePatches": st.lists(
                    RUNTIME_PATCH, max_size=3, unique_by=lambda p: str(p["manager"])
                ),
                "suspend": st.booleans(),
                "managedBy": st.sampled_from([c.MANAGED_BY_TRAINER, c.MANAGED_BY_MULTIKUEUE]),
            },
        )
    )
    spec["runtimeRef"] = ref
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND_TRAINJOB,
        "metadata": {"name": draw(NAMES), "namespace": "default"},
        "spec": spec,
    }


# Built once: building these strategies costs more than drawing from them.
WIRE: dict[type[Any], st.SearchStrategy[dict[str, Any]]] = {
    m: wire_data(m) for m in (TrainJob, TrainingRuntime, ClusterTrainingRuntime)
}


@st.composite
def shaped(
    draw: st.DrawFn, model: type[TrainJob | TrainingRuntime | ClusterTrainingRuntime]
) -> Any:
    """Any-typed wire data for ``model`` (random fields, unknown fields), mostly pointing at a
    runtime that exists so validation goes past the lookup."""
    data = draw(WIRE[model])
    data["apiVersion"], data["kind"] = c.API_VERSION, model.model_fields["kind"].default
    if model is TrainJob and draw(st.integers(0, 4)) and isinstance(data.get("spec"), dict):
        data["spec"]["runtimeRef"] = {"name": draw(st.sampled_from(RUNTIME_NAMES))}
    return data


# ---------------------------------------------------------------------------------------------
# Tests


def _run(
    runner: asyncio.Runner,
    strategy: st.SearchStrategy[tuple[list[str], bytes]],
    examples: int,
) -> int:
    """Run ``examples`` generated cases, each sent to each of its routes; the request count."""
    sent = 0

    @settings(max_examples=examples, deadline=None, suppress_health_check=SUPPRESSED)
    @given(strategy)
    def prop(case: tuple[list[str], bytes]) -> None:
        nonlocal sent
        paths, body = case

        async def send_all() -> list[Any]:
            return [await asgi_request(APP, "POST", path, body) for path in paths]

        for path, resp in zip(paths, runner.run(send_all()), strict=True):
            check_response(resp, path, body)
            sent += 1

    prop()
    return sent


@st.composite
def trainjob_review(draw: st.DrawFn) -> tuple[list[str], bytes]:
    obj = draw(st.one_of(shaped(TrainJob), realistic_trainjob()))
    if draw(st.integers(0, 2)) == 0:
        obj = draw(mutated(obj))
    operation = draw(st.sampled_from(["CREATE", "UPDATE"]))
    old = None
    if operation == "UPDATE":
        old = draw(st.one_of(st.just(obj), mutated(obj), realistic_trainjob(), shaped(TrainJob)))
    uid = draw(st.text(min_size=1, max_size=36))
    request = _object_request(obj, operation, old, uid)
    return TRAINJOB_PATHS, dumps(review(request))


def test_trainjob_shaped(runner: asyncio.Runner) -> None:
    # 400 drawn cases a run (new ones every run): the whole suite must stay under CI's budget.
    assert _run(runner, trainjob_review(), 400) >= 800


@st.composite
def runtime_review(draw: st.DrawFn) -> tuple[list[str], bytes]:
    obj = draw(
        st.one_of(
            shaped(TrainingRuntime),
            shaped(ClusterTrainingRuntime),
            st.sampled_from(RUNTIMES).map(lambda r: r.to_wire()),
        )
    )
    if draw(st.booleans()):
        obj = draw(mutated(obj))
    operation = draw(st.sampled_from(["CREATE", "UPDATE"]))
    old = draw(mutated(obj)) if operation == "UPDATE" else None
    # Both runtime routes (one of them gets the wrong kind) and the TrainJob route.
    paths = [*RUNTIME_PATHS, PATH_VALIDATE_TRAINJOB]
    return paths, dumps(review(_object_request(obj, operation, old, "uid-r")))


def test_runtime_shaped(runner: asyncio.Runner) -> None:
    assert _run(runner, runtime_review(), 250) >= 750


def test_realistic_trainjobs_on_builtin_runtimes(runner: asyncio.Runner) -> None:
    @st.composite
    def case(draw: st.DrawFn) -> tuple[list[str], bytes]:
        obj = draw(realistic_trainjob())
        operation = draw(st.sampled_from(["CREATE", "UPDATE"]))
        old = draw(realistic_trainjob()) if operation == "UPDATE" else None
        if old is not None:
            old["metadata"] = obj["metadata"]
        request = _object_request(obj, operation, old, "uid-t")
        return TRAINJOB_PATHS, dumps(review(request))

    assert _run(runner, case(), 400) >= 800
