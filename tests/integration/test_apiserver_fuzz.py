"""Fuzzing the embedded API server over HTTP with hostile metadata and top-level fields.

A running :class:`APIServer` (with the Trainer and JobSet CRDs) gets Pods, ConfigMaps,
Secrets, TrainJobs and JobSets whose metadata fields (name, generateName, labels,
annotations, finalizers, ownerReferences, generation, timestamps, managedFields, ...) or
top-level fields (apiVersion, kind, metadata, spec, status, data, ...) hold generated values
of any JSON type, through create, update (PUT), merge / JSON / strategic merge patches,
server-side apply and status updates, plus bodies that are not objects at all.

For every request: never a 5xx; every 4xx carries a Kubernetes ``Status`` body (kind, code
equal to the HTTP status, a reason); every 2xx object satisfies kube-apiserver's metadata
rules (:mod:`trainer.machinery.objectmeta`: it decodes as ObjectMeta unchanged and validates) and
ConfigMap / Secret data are maps of strings. After every generated case, a label-selector
list of pods answers 200, and a label-selector watch of pods does at the end of each test.

The same file also sends query parameters, DeleteOptions and review bodies of any shape, and
YAML values JSON lacks (dates, binary, NaN, non-string keys), which must never be stored.

The bodies an earlier version stored or answered 500 to (``labels: "x"``, ``finalizers: [{}]``,
``apiVersion: trainer.kubeflow.org/v9`` on the v1alpha1 path, integer names...) are kept as
listed cases.

Hypothesis is derandomized (the same cases on every run) and bounded: 9 generated tests of
60 cases each plus 34 listed cases, 1,988 requests in all (the last test prints the count per
test and checks each against ``FLOORS``); about 10 s on a laptop.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import itertools
import json
import os
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.api import crds
from trainer.local.apiserver import APIServer, builtin
from trainer.machinery import names, objectmeta

# celpy (the CEL rules of the CRDs) raises the recursion limit while Hypothesis runs.
pytestmark = pytest.mark.filterwarnings("ignore:The recursion limit will not be reset")

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NS = "default"
SELECTOR = "labelSelector=app%3Dx,tier%20in%20(a,b)"


NO_BODY: Any = object()

# --- a small HTTP client built from the server's own kubeconfig --------------------------------


@dataclass
class Api:
    """Synchronous HTTP to a server running in a background thread, authenticated and
    verified the way its kubeconfig says (a bearer token and a CA when it has them)."""

    server: APIServer
    sent: int = 0
    codes: Counter[int] = field(default_factory=Counter)
    per_test: Counter[str] = field(default_factory=Counter)

    def count(self) -> None:
        self.sent += 1
        current = os.environ.get("PYTEST_CURRENT_TEST", "")
        self.per_test[current.split("::")[-1].split(" ")[0].split("[")[0]] += 1

    _conn: http.client.HTTPConnection | None = field(default=None, repr=False)

    def _new_connection(self) -> http.client.HTTPConnection:
        cluster = self.server.kubeconfig()["clusters"][0]["cluster"]
        url = urlsplit(cluster["server"])
        if url.scheme != "https":
            return http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
        ca = cluster.get("certificate-authority-data")
        ctx = ssl.create_default_context(
            cafile=cluster.get("certificate-authority"),
            cadata=base64.b64decode(ca).decode() if ca else None,
        )
        return http.client.HTTPSConnection(url.hostname or "", url.port, timeout=30, context=ctx)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = self._new_connection()
        return self._conn

    def headers(self) -> dict[str, str]:
        user = self.server.kubeconfig()["users"][0]["user"]
        return {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}

    def request(
        self,
        method: str,
        path: str,
        body: Any = NO_BODY,
        content_type: str = "application/json",
        *,
        raw: bytes | None = None,
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        """Send one request (``body`` as JSON, ``null`` included, or ``raw`` bytes); the
        status and the decoded JSON answer (None if not JSON)."""
        if raw is None and body is not NO_BODY:
            raw = json.dumps(body).encode()
        headers = {**self.headers(), "Accept": accept}
        if raw is not None:
            headers["Content-Type"] = content_type
        self.count()
        for attempt in range(2):
            conn = self._connection()
            try:
                conn.request(method, path, body=raw, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                conn.close()
                self._conn = None
                if attempt:
                    raise
        self.codes[resp.status] += 1
        try:
            return resp.status, json.loads(data)
        except ValueError:
            return resp.status, None

    def watch_lines(self, path: str) -> tuple[int, list[str]]:
        """A watch that the server ends itself (``timeoutSeconds``): status and event lines."""
        self.count()
        conn = self._new_connection()
        try:
            conn.request("GET", path, headers=self.headers())
            resp = conn.getresponse()
            return resp.status, resp.read().decode().splitlines()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    """A plain ``APIServer()`` with the CRDs, served from its own event loop in a thread so
    Hypothesis can drive it synchronously."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, APIServer] = {}

    async def boot() -> None:
        server = APIServer()
        await server.start()
        for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
            server.storage.create_unadmitted(
                "apiextensions.k8s.io/v1", "CustomResourceDefinition", crd
            )
        holder["server"] = server

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(boot())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(60), "the API server did not start"
    server = holder["server"]
    try:
        yield Api(server)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()


# --- the kinds and their valid objects ------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    body: dict[str, Any]
    status: bool = False

    @property
    def collection(self) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{prefix}/namespaces/{NS}/{self.plural}"

    def obj(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(self.body))
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": name},
            **out,
        }


CONTAINER = {"name": "c", "image": "busybox", "command": ["true"]}
KINDS = [
    Kind("v1", "Pod", "pods", {"spec": {"containers": [CONTAINER]}}, status=True),
    Kind("v1", "ConfigMap", "configmaps", {"data": {"k": "v"}}),
    Kind("v1", "Secret", "secrets", {"data": {"k": base64.b64encode(b"v").decode()}}),
    Kind(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        "trainjobs",
        {"spec": {"runtimeRef": {"name": "torch-distributed"}}},
        status=True,
    ),
    Kind(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "jobsets",
        {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "replicas": 1,
                        "template": {"spec": {"template": {"spec": {"containers": [CONTAINER]}}}},
                    }
                ]
            }
        },
        status=True,
    ),
]
_names = itertools.count()


def fresh_name() -> str:
    return f"fz-{next(_names)}"


# --- values -------------------------------------------------------------------------------------

TRICKY_STRINGS = st.sampled_from(
    [
        "",
        "a",
        "x",
        "b",
        "A b",
        "-x",
        "x-",
        "x" * 64,
        "x" * 254,
        "a/b/c",
        "/x",
        "x/",
        "example.com/app",
        "Example.com/x",
        "..",
        ".",
        "a\n",
        "ü",
        "orphan",
        "foregroundDeletion",
        "kubernetes",
        "v1",
        "Pod",
        "Apply",
        "FieldsV1",
        "2024-01-01T00:00:00Z",
        "not-a-time",
        "djE=",
        "!!!",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    TRICKY_STRINGS,
)
KEYS = st.one_of(TRICKY_STRINGS, st.text(max_size=8))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=8,
)
STRING_MAPS = st.one_of(
    st.dictionaries(KEYS, TRICKY_STRINGS, max_size=3),
    st.dictionaries(KEYS, st.one_of(TRICKY_STRINGS, SCALARS), max_size=3),
)
STRING_LISTS = st.lists(TRICKY_STRINGS, max_size=3)
OWNER_REF = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.one_of(st.sampled_from(["v1", "a/b/c", "", "apps/v1"]), VALUES),
        "kind": st.one_of(st.sampled_from(["Pod", "Event", ""]), VALUES),
        "name": st.one_of(TRICKY_STRINGS, VALUES),
        "uid": st.one_of(st.sampled_from(["", "u-1", "u-2"]), VALUES),
        "controller": st.one_of(st.booleans(), st.booleans(), VALUES),
        "blockOwnerDeletion": st.one_of(st.booleans(), VALUES),
    },
)
MANAGED_ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "manager": st.one_of(TRICKY_STRINGS, VALUES),
        "operation": st.one_of(st.sampled_from(["Apply", "Update", "Other"]), VALUES),
        "apiVersion": st.one_of(st.sampled_from(["v1", ""]), VALUES),
        "fieldsType": st.one_of(st.sampled_from(["FieldsV1", "x"]), VALUES),
        "fieldsV1": VALUES,
        "time": st.one_of(TRICKY_STRINGS, VALUES),
    },
)
META_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "name": st.one_of(TRICKY_STRINGS, VALUES),
    "generateName": st.one_of(TRICKY_STRINGS, VALUES),
    "namespace": st.one_of(st.sampled_from([NS, "other", ""]), VALUES),
    "labels": st.one_of(STRING_MAPS, VALUES),
    "annotations": st.one_of(STRING_MAPS, VALUES),
    "finalizers": st.one_of(
        STRING_LISTS, st.lists(st.one_of(TRICKY_STRINGS, VALUES), max_size=3), VALUES
    ),
    "ownerReferences": st.one_of(st.lists(st.one_of(OWNER_REF, VALUES), max_size=3), VALUES),
    "managedFields": st.one_of(st.lists(st.one_of(MANAGED_ENTRY, VALUES), max_size=2), VALUES),
    "generation": VALUES,
    "resourceVersion": VALUES,
    "uid": VALUES,
    "creationTimestamp": st.one_of(TRICKY_STRINGS, VALUES),
    "deletionTimestamp": st.one_of(TRICKY_STRINGS, VALUES),
    "deletionGracePeriodSeconds": VALUES,
    "selfLink": VALUES,
    "zzUnknown": VALUES,
}
TOP_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "apiVersion": st.one_of(
        st.sampled_from(["v1", "trainer.kubeflow.org/v9", "jobset.x-k8s.io/v1alpha2", "a/b/c"]),
        VALUES,
    ),
    "kind": st.one_of(st.sampled_from(["Pod", "ConfigMap", "TrainJob", ""]), VALUES),
    "metadata": VALUES,
    "spec": VALUES,
    "status": VALUES,
    "data": st.one_of(STRING_MAPS, VALUES),
    "binaryData": st.one_of(STRING_MAPS, VALUES),
    "stringData": st.one_of(STRING_MAPS, VALUES),
    "type": VALUES,
    "immutable": VALUES,
    "zzUnknown": VALUES,
}


@st.composite
def mutation(draw: st.DrawFn) -> tuple[str, str, Any]:
    """("metadata" | "top", field, value): one field set to a generated value."""
    if draw(st.integers(min_value=0, max_value=3)):
        name = draw(st.sampled_from(sorted(META_FIELDS)))
        return "metadata", name, draw(META_FIELDS[name])
    name = draw(st.sampled_from(sorted(TOP_FIELDS)))
    return "top", name, draw(TOP_FIELDS[name])


def mutate(obj: dict[str, Any], change: tuple[str, str, Any]) -> dict[str, Any]:
    where, name, value = change
    out: dict[str, Any] = json.loads(json.dumps(obj))
    if where == "top":
        out[name] = value
    else:
        meta = out.setdefault("metadata", {})
        if isinstance(meta, dict):
            meta[name] = value
    return out


CHANGES = st.lists(mutation(), min_size=1, max_size=3)


# --- what every answer must satisfy ------------------------------------------------------------


def check_answer(kind: Kind, status: int, body: Any, what: str) -> None:
    assert status < 500, f"{what}: {status} {body}"
    if status >= 400:
        assert isinstance(body, dict), f"{what}: {status} without a Status body"
        assert body.get("kind") == "Status", f"{what}: {body}"
        assert body.get("apiVersion") == "v1", f"{what}: {body}"
        assert body.get("status") == "Failure", f"{what}: {body}"
        assert body.get("code") == status, f"{what}: {body}"
        assert isinstance(body.get("reason"), str) and body["reason"], f"{what}: {body}"
        assert isinstance(body.get("message"), str), f"{what}: {body}"
        return
    assert isinstance(body, dict), f"{what}: {status} {body!r}"
    check_object(kind, body, what)


def check_object(kind: Kind, obj: dict[str, Any], what: str) -> None:
    """A stored object as kube-apiserver could have stored it."""
    assert obj.get("apiVersion") == kind.api_version, f"{what}: {obj.get('apiVersion')}"
    assert obj.get("kind") == kind.kind, what
    meta = obj.get("metadata")
    decoded = objectmeta.decode_object_meta(meta)
    assert decoded == meta, f"{what}: metadata is not what ObjectMeta decodes: {meta}"
    rule = builtin.NAME_RULES.get(("", kind.plural), names.name_is_dns_subdomain)
    errors = objectmeta.validate_object_meta(decoded, namespaced=True, name_rule=rule)
    assert errors == [], f"{what}: stored metadata is invalid: {errors}"
    assert decoded["namespace"] == NS, what
    assert decoded.get("uid") and decoded.get("resourceVersion"), what
    if kind.kind == "ConfigMap":
        for key in ("data", "binaryData"):
            values = obj.get(key, {})
            assert isinstance(values, dict), what
            assert all(isinstance(v, str) for v in values.values()), what
    if kind.kind == "Secret":
        values = obj.get("data", {})
        assert isinstance(values, dict), what
        for value in values.values():
            base64.b64decode(value, validate=True)
        assert "stringData" not in obj, what


def check_selectors_answer(api: Api) -> None:
    status, body = api.request("GET", f"/api/v1/pods?{SELECTOR}")
    assert status == 200, body
    assert isinstance(body, dict) and isinstance(body.get("items"), list), body


def check_watch_answers(api: Api) -> None:
    status, lines = api.watch_lines(
        f"/api/v1/namespaces/{NS}/pods?watch=1&{SELECTOR}&timeoutSeconds=1"
    )
    assert status == 200, lines
    for line in lines:
        event = json.loads(line)
        assert event["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"), event


def target(api: Api, kind: Kind) -> dict[str, Any]:
    """The current version of an object to update or patch (created once per kind)."""
    name = f"target-{kind.plural}"
    status, body = api.request("GET", f"{kind.collection}/{name}")
    if status == 404:
        status, body = api.request("POST", kind.collection, kind.obj(name))
    assert status in (200, 201), body
    check_object(kind, body, f"target {kind.kind}")
    return {**body}


# --- the fuzz -----------------------------------------------------------------------------------

#: The fewest requests each test sends (examples x requests per example); every test sends
#: exactly this many or a few more (the first write of each target object).
FLOORS = {
    "test_create_never_stores_what_kube_refuses": 60 * 2,
    "test_update_never_stores_what_kube_refuses": 60 * 3,
    "test_patches_never_store_what_kube_refuses": 60 * 4,
    "test_server_side_apply_never_stores_what_kube_refuses": 60 * 2,
    "test_status_updates_never_store_what_kube_refuses": 60 * 4,
    "test_bodies_of_any_shape_are_answered_with_a_status": 60 * 5,
    "test_query_parameters_of_any_shape_are_answered": 60 * 5,
    "test_delete_options_of_any_shape_are_answered": 60 * 3,
    "test_review_bodies_of_any_shape_are_answered": 60 * 3,
    "test_yaml_values_json_lacks_are_never_stored": 6 * 3 * 2,
    "test_the_reported_bodies_are_refused": 10 * 3,
    "test_patches_the_fuzz_found_are_answered": 6 * 2,
}
KIND_INDEX = st.integers(min_value=0, max_value=len(KINDS) - 1)


@FUZZ
@given(kind_index=KIND_INDEX, changes=CHANGES)
def test_create_never_stores_what_kube_refuses(
    api: Api, kind_index: int, changes: list[tuple[str, str, Any]]
) -> None:
    kind = KINDS[kind_index]
    body = kind.obj(fresh_name())
    for change in changes:
        body = mutate(body, change)
    status, answer = api.request("POST", kind.collection, body)
    check_answer(kind, status, answer, f"create {kind.kind} {body}")
    check_selectors_answer(api)


@FUZZ
@given(kind_index=KIND_INDEX, changes=CHANGES)
def test_update_never_stores_what_kube_refuses(
    api: Api, kind_index: int, changes: list[tuple[str, str, Any]]
) -> None:
    kind = KINDS[kind_index]
    body = target(api, kind)
    for change in changes:
        body = mutate(body, change)
    name = f"target-{kind.plural}"
    status, answer = api.request("PUT", f"{kind.collection}/{name}", body)
    check_answer(kind, status, answer, f"update {kind.kind} {body}")
    check_selectors_answer(api)


def _json_patch_ops(change: tuple[str, str, Any]) -> list[dict[str, Any]]:
    where, name, value = change
    path = f"/metadata/{name}" if where == "metadata" else f"/{name}"
    return [{"op": "add", "path": path, "value": value}]


@FUZZ
@given(
    kind_index=KIND_INDEX,
    changes=CHANGES,
    patch_type=st.sampled_from(["merge", "json", "strategic", "raw-json"]),
    garbage=VALUES,
)
def test_patches_never_store_what_kube_refuses(
    api: Api,
    kind_index: int,
    changes: list[tuple[str, str, Any]],
    patch_type: str,
    garbage: Any,
) -> None:
    kind = KINDS[kind_index]
    target(api, kind)
    name = f"target-{kind.plural}"
    if patch_type == "json":
        body: Any = [op for change in changes for op in _json_patch_ops(change)]
        content_type = "application/json-patch+json"
    elif patch_type == "raw-json":
        body, content_type = garbage, "application/json-patch+json"
    else:
        body = {}
        for change in changes:
            body = mutate(body, change)
        content_type = (
            "application/merge-patch+json"
            if patch_type == "merge"
            else "application/strategic-merge-patch+json"
        )
    status, answer = api.request("PATCH", f"{kind.collection}/{name}", body, content_type)
    check_answer(kind, status, answer, f"{patch_type} patch {kind.kind} {body}")
    # A merge patch whose body is not an object, sent as such.
    status, answer = api.request(
        "PATCH", f"{kind.collection}/{name}", garbage, "application/merge-patch+json"
    )
    check_answer(kind, status, answer, f"merge patch {kind.kind} {garbage!r}")
    check_selectors_answer(api)


@FUZZ
@given(kind_index=KIND_INDEX, changes=CHANGES, new=st.booleans())
def test_server_side_apply_never_stores_what_kube_refuses(
    api: Api, kind_index: int, changes: list[tuple[str, str, Any]], new: bool
) -> None:
    kind = KINDS[kind_index]
    name = fresh_name() if new else f"target-{kind.plural}"
    if not new:
        target(api, kind)
    body = kind.obj(name)
    for change in changes:
        body = mutate(body, change)
    path = f"{kind.collection}/{name}?fieldManager=fuzz&force=true"
    status, answer = api.request("PATCH", path, body, "application/apply-patch+yaml")
    check_answer(kind, status, answer, f"apply {kind.kind} {body}")
    check_selectors_answer(api)


@FUZZ
@given(kind_index=KIND_INDEX, changes=CHANGES)
def test_status_updates_never_store_what_kube_refuses(
    api: Api, kind_index: int, changes: list[tuple[str, str, Any]]
) -> None:
    kind = KINDS[kind_index]
    if not kind.status:
        kind = KINDS[0]
    current = target(api, kind)
    name = f"target-{kind.plural}"
    body = current
    for change in changes:
        body = mutate(body, change)
    status, answer = api.request("PUT", f"{kind.collection}/{name}/status", body)
    check_answer(kind, status, answer, f"status update {kind.kind} {body}")
    patch = {"status": body.get("status"), "metadata": body.get("metadata")}
    status, answer = api.request(
        "PATCH", f"{kind.collection}/{name}/status", patch, "application/merge-patch+json"
    )
    check_answer(kind, status, answer, f"status patch {kind.kind} {patch}")
    check_selectors_answer(api)


@FUZZ
@given(kind_index=KIND_INDEX, body=VALUES)
def test_bodies_of_any_shape_are_answered_with_a_status(
    api: Api, kind_index: int, body: Any
) -> None:
    kind = KINDS[kind_index]
    target(api, kind)
    name = f"target-{kind.plural}"
    for method, path, content_type in (
        ("POST", kind.collection, "application/json"),
        ("PUT", f"{kind.collection}/{name}", "application/json"),
        ("PATCH", f"{kind.collection}/{name}", "application/json-patch+json"),
        ("PATCH", f"{kind.collection}/{name}?fieldManager=fuzz", "application/apply-patch+yaml"),
    ):
        status, answer = api.request(method, path, body, content_type)
        check_answer(kind, status, answer, f"{method} {path} {body!r}")


def _pod(**meta: Any) -> dict[str, Any]:
    return {**KINDS[0].obj(fresh_name()), "metadata": {"name": fresh_name(), **meta}}


# Shapes an earlier version stored (201) or answered 500 to, with what kube-apiserver says.
REPORTED: list[tuple[str, Kind, Any, int, str]] = [
    ("labels: x", KINDS[0], _pod(labels="x"), 400, "BadRequest"),
    ("labels: {a: 5}", KINDS[0], _pod(labels={"a": 5}), 400, "BadRequest"),
    (
        "finalizers: [{}]",
        KINDS[1],
        {"metadata": {"name": "r1", "finalizers": [{}]}},
        400,
        "BadRequest",
    ),
    (
        "configmap data: {a: 5}",
        KINDS[1],
        {"metadata": {"name": "r2"}, "data": {"a": 5}},
        400,
        "BadRequest",
    ),
    (
        "apiVersion v9 on the v1alpha1 path",
        KINDS[3],
        {**KINDS[3].obj("r3"), "apiVersion": "trainer.kubeflow.org/v9"},
        400,
        "BadRequest",
    ),
    ("name: 5", KINDS[1], {"metadata": {"name": 5}}, 400, "BadRequest"),
    ("apiVersion: 5", KINDS[1], {"apiVersion": 5, "metadata": {"name": "r4"}}, 400, "BadRequest"),
    ("generateName: 5", KINDS[1], {"metadata": {"generateName": 5}}, 400, "BadRequest"),
    (
        "ownerReferences: x",
        KINDS[1],
        {"metadata": {"name": "r5", "ownerReferences": "x"}},
        400,
        "BadRequest",
    ),
    (
        "ownerReference without uid",
        KINDS[1],
        {
            "metadata": {
                "name": "r6",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}],
            }
        },
        422,
        "Invalid",
    ),
]


@pytest.mark.parametrize(
    ("what", "kind", "obj", "code", "reason"), REPORTED, ids=[r[0] for r in REPORTED]
)
def test_the_reported_bodies_are_refused(
    api: Api, what: str, kind: Kind, obj: Any, code: int, reason: str
) -> None:
    status, answer = api.request("POST", kind.collection, obj)
    assert (status, answer.get("reason")) == (code, reason), f"{what}: {answer}"
    check_answer(kind, status, answer, what)
    # An annotation whose value is null is stored as "" (what Go decodes), never as null.
    status, answer = api.request(
        "POST",
        KINDS[1].collection,
        {"metadata": {"name": fresh_name(), "annotations": {"a": None}}},
    )
    assert status == 201 and answer["metadata"]["annotations"] == {"a": ""}, answer
    check_selectors_answer(api)


# Patches longer runs of this fuzz (400 random cases per test) once answered 500 with.
FOUND: list[tuple[str, Any]] = [
    ("application/merge-patch+json", {"metadata": 1}),
    ("application/merge-patch+json", {"metadata": [1]}),
    ("application/strategic-merge-patch+json", {"metadata": {"finalizers": [[]]}}),
    ("application/strategic-merge-patch+json", {"metadata": {"finalizers": [{}, {}]}}),
    ("application/strategic-merge-patch+json", {"$deleteFromPrimitiveList/finalizers": 5}),
    (
        "application/strategic-merge-patch+json",
        {"metadata": {"$deleteFromPrimitiveList/finalizers": [[]]}},
    ),
]


@pytest.mark.parametrize(("content_type", "patch"), FOUND)
def test_patches_the_fuzz_found_are_answered(api: Api, content_type: str, patch: Any) -> None:
    kind = KINDS[0]
    target(api, kind)
    status, answer = api.request("PATCH", f"{kind.collection}/target-pods", patch, content_type)
    check_answer(kind, status, answer, f"{content_type} {patch}")


QUERY_KEYS = [
    "limit",
    "continue",
    "labelSelector",
    "fieldSelector",
    "resourceVersion",
    "resourceVersionMatch",
    "includeObject",
    "propagationPolicy",
    "dryRun",
    "fieldManager",
    "fieldValidation",
]
QUERY_VALUES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "abc",
            "-1",
            "0",
            "1",
            "99999999999999999999999",
            "1.5",
            "a in (",
            "!!a",
            "a,,b",
            "a notin (x),b!=c",
            "metadata.name",
            "metadata.name=x,spec.y!=z",
            "eyJydiI6ImEiLCJucyI6MSwibmFtZSI6Mn0=",
            "NotOlderThan",
            "Exact",
            "Bogus",
            "All",
        ]
    ),
)


@FUZZ
@given(
    params=st.dictionaries(st.sampled_from(QUERY_KEYS), QUERY_VALUES, min_size=1, max_size=3),
    table=st.booleans(),
)
def test_query_parameters_of_any_shape_are_answered(
    api: Api, params: dict[str, str], table: bool
) -> None:
    query = urlencode(params)
    tail = urlencode({"tailLines": params.get("limit", "2")})
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io" if table else "application/json"
    for kind in (KINDS[0], KINDS[3]):
        status, answer = api.request("GET", f"{kind.collection}?{query}", accept=accept)
        assert status < 500, f"list {query}: {answer}"
        if status >= 400:
            check_answer(kind, status, answer, f"list {query}")
    status, answer = api.request(
        "GET",
        f"/api/v1/namespaces/{NS}/pods/target-pods/log?{query}&{tail}",
    )
    assert status < 500, f"log {query}: {answer}"
    name = fresh_name()
    api.request("POST", KINDS[1].collection, KINDS[1].obj(name))
    status, answer = api.request("DELETE", f"{KINDS[1].collection}/{name}?{query}")
    assert status < 500, f"delete {query}: {answer}"


@FUZZ
@given(
    options=st.one_of(
        VALUES,
        st.fixed_dictionaries(
            {},
            optional={
                "propagationPolicy": st.one_of(
                    st.sampled_from(["Orphan", "Background", "Foreground", "x"]), VALUES
                ),
                "preconditions": st.one_of(
                    st.fixed_dictionaries({}, optional={"uid": VALUES, "resourceVersion": VALUES}),
                    VALUES,
                ),
                "dryRun": st.one_of(st.just(["All"]), VALUES),
                "gracePeriodSeconds": VALUES,
                "orphanDependents": VALUES,
            },
        ),
    )
)
def test_delete_options_of_any_shape_are_answered(api: Api, options: Any) -> None:
    kind = KINDS[1]
    name = fresh_name()
    status, _ = api.request("POST", kind.collection, kind.obj(name))
    assert status == 201
    status, answer = api.request("DELETE", f"{kind.collection}/{name}", options)
    assert status < 500, f"delete {options!r}: {answer}"
    if status >= 400:
        check_answer(kind, status, answer, f"delete {options!r}")
    status, answer = api.request("DELETE", f"{kind.collection}?labelSelector=none%3Dnone", options)
    assert status < 500, f"deletecollection {options!r}: {answer}"


@FUZZ
@given(
    body=st.one_of(VALUES, st.fixed_dictionaries({"spec": VALUES}, optional={"metadata": VALUES}))
)
def test_review_bodies_of_any_shape_are_answered(api: Api, body: Any) -> None:
    for path in (
        "/apis/authentication.k8s.io/v1/tokenreviews",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        f"/api/v1/namespaces/{NS}/serviceaccounts/default/token",
    ):
        status, answer = api.request("POST", path, body)
        assert status < 500, f"{path} {body!r}: {answer}"
        if status >= 400:
            assert isinstance(answer, dict) and answer.get("kind") == "Status", answer


# Values YAML has and JSON lacks: each is refused or converted, never stored as is.
YAML_VALUES = ["2024-01-01", "2024-01-01T10:00:00Z", "!!binary aGVsbG8=", ".nan", ".inf", "-.inf"]


@pytest.mark.parametrize("value", YAML_VALUES)
@pytest.mark.parametrize("where", ["labels", "data", "spec"])
def test_yaml_values_json_lacks_are_never_stored(api: Api, value: str, where: str) -> None:
    kind = KINDS[1] if where != "spec" else KINDS[0]
    name = fresh_name()
    lines = [
        f"apiVersion: {kind.api_version}",
        f"kind: {kind.kind}",
        "metadata:",
        f"  name: {name}",
    ]
    if where == "labels":
        lines += ["  labels:", f"    a: {value}"]
    elif where == "data":
        lines += ["data:", f"  a: {value}", "  1: x"]
    else:
        lines += ["spec:", "  containers: [{name: c, image: busybox}]", f"  zz: {value}"]
    raw = ("\n".join(lines) + "\n").encode()
    path = f"{kind.collection}/{name}?fieldManager=fuzz"
    status, answer = api.request(
        "PATCH", path, raw=raw, content_type="application/apply-patch+yaml"
    )
    check_answer(kind, status, answer, f"apply {raw!r}")
    status, answer = api.request("GET", kind.collection)
    assert status == 200, answer


def test_label_selector_list_and_watch_keep_answering(api: Api) -> None:
    """Runs after the fuzz (tests run in file order): every selector read still answers."""
    check_selectors_answer(api)
    check_watch_answers(api)
    status, body = api.request("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector=!app")
    assert status == 200, body
    for item in body["items"]:
        check_object(KINDS[0], item, "listed pod")
    for kind in KINDS:  # whatever the fuzz stored, every object still reads back valid
        status, body = api.request("GET", kind.collection)
        assert status == 200, body
        for item in body["items"]:
            check_object(kind, item, f"listed {kind.kind}")
    for test, floor in FLOORS.items():
        if api.per_test[test]:  # the test ran (not deselected)
            assert api.per_test[test] >= floor, (test, api.per_test[test])
    print(f"\nmetadata fuzz: {api.sent} requests sent, answers {sorted(api.codes.items())}")
    for test, sent in sorted(api.per_test.items()):
        print(f"  {test}: {sent}")
