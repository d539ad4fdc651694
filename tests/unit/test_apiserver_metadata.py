"""Object metadata as kube-apiserver decodes and validates it: a table of request bodies and
the answer each gets (code, reason, the field a 422 names), the exact messages of the
k8s.io/apimachinery validation helpers, DeleteOptions and query parameters, and selectors
that never trust a stored type."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from trainer.local.apiserver import builtin, metadata
from trainer.local.apiserver.errors import APIError, invalid
from trainer.local.apiserver.resources import ResourceType
from trainer.local.apiserver.selectors import matcher
from trainer.machinery import names
from trainer.machinery import objectmeta as om

REGISTRY = builtin.new_registry()
TRAINJOB = ResourceType(
    "trainer.kubeflow.org",
    "v1alpha1",
    "TrainJob",
    "trainjobs",
    True,
    builtin=False,
    schema={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
)


def rt(plural: str) -> ResourceType:
    if plural == "trainjobs":
        return TRAINJOB
    for t in builtin.builtin_types():
        if t.plural == plural:
            return t
    raise KeyError(plural)


def body(plural: str, meta: Any = None, **top: Any) -> dict[str, Any]:
    t = rt(plural)
    out: dict[str, Any] = {"apiVersion": t.api_version, "kind": t.kind}
    out["metadata"] = {"name": "ok"} if meta is None else meta
    out.update(top)
    return out


def answer(plural: str, obj: Any, namespace: str = "default", name: str = "") -> APIError | None:
    t = rt(plural)
    try:
        checked = metadata.check(t, obj, namespace if t.namespaced else "", name)
    except APIError as err:
        return err
    if t.schema is not None:
        # A custom resource's metadata is checked in admission, with its schema and rules.
        errors = metadata.validate(t, checked)
        if errors:
            return invalid(t.kind, t.group, checked["metadata"].get("name", ""), errors)
    return None


# --- accepted --------------------------------------------------------------------------------

VALID = [
    ("configmaps", {"name": "a"}),
    ("configmaps", {"name": "a.b-c", "labels": {"app": "x", "example.com/app": "", "a_b": "A.b"}}),
    ("configmaps", {"name": "a", "labels": {"k": "x" * 63, "p" * 63: ""}}),
    ("configmaps", {"name": "a", "annotations": {"Example.com/Key": "any text\nat all"}}),
    ("configmaps", {"name": "a", "finalizers": ["example.com/f", "orphan", "kubernetes"]}),
    ("configmaps", {"name": "a", "finalizers": ["foregroundDeletion"]}),
    (
        "configmaps",
        {
            "name": "a",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "controller": True},
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u2"},
            ],
        },
    ),
    ("configmaps", {"generateName": "job-"}),
    ("configmaps", {"generateName": "x" * 200}),  # truncated to 58 when the name is generated
    ("configmaps", {"name": "a" * 253}),
    ("configmaps", {"name": "a", "labels": None, "annotations": {"a": None}}),
    ("configmaps", {"name": "a", "generation": 3, "resourceVersion": "7", "uid": "u"}),
    ("configmaps", {"name": "a", "creationTimestamp": "2024-01-01T00:00:00Z"}),
    ("configmaps", {"name": "a", "creationTimestamp": None, "zzUnknown": 1}),
    ("namespaces", {"name": "team-a"}),
    ("services", {"name": "svc-1"}),
    ("clusterroles", {"name": "system:aggregate-to-edit"}),
    ("rolebindings", {"name": "Any:Thing_at.all"}),
    ("trainjobs", {"name": "my-job", "labels": {"kueue.x-k8s.io/queue-name": "q"}}),
    ("pods", {"name": "p", "namespace": "default"}),
]


@pytest.mark.parametrize(("plural", "meta"), VALID)
def test_valid_metadata_is_accepted(plural: str, meta: dict[str, Any]) -> None:
    assert answer(plural, body(plural, meta)) is None


def test_decoding_normalises_what_go_reads_as_zero_values() -> None:
    obj = metadata.check(
        rt("configmaps"),
        body("configmaps", {"name": "a", "labels": None, "annotations": {"a": None}, "zz": 1}),
        "default",
    )
    assert obj["metadata"] == {"name": "a", "annotations": {"a": ""}, "namespace": "default"}
    assert obj["apiVersion"] == "v1" and obj["kind"] == "ConfigMap"
    # A custom resource keeps fields ObjectMeta lacks: its schema's pruning reports them.
    cr = metadata.check(TRAINJOB, body("trainjobs", {"name": "a", "zz": 1}), "default")
    assert cr["metadata"]["zz"] == 1


# --- 400 BadRequest: what does not decode ------------------------------------------------------

CANNOT_HANDLE = 'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal'
BAD_REQUESTS: list[tuple[str, Any, str]] = [
    (
        "configmaps",
        body("configmaps", {"name": "a", "labels": "x"}),
        f"{CANNOT_HANDLE} string into Go struct field ObjectMeta.metadata.labels of type "
        "map[string]string",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "labels": {"a": 5}}),
        f"{CANNOT_HANDLE} number into Go struct field ObjectMeta.metadata.labels of type string",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "annotations": {"a": True}}),
        f"{CANNOT_HANDLE} bool into Go struct field ObjectMeta.metadata.annotations of type string",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "finalizers": [{}]}),
        f"{CANNOT_HANDLE} object into Go struct field ObjectMeta.metadata.finalizers of type "
        "string",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "finalizers": "x"}),
        "ObjectMeta.metadata.finalizers of type []string",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "ownerReferences": "x"}),
        "ObjectMeta.metadata.ownerReferences of type []v1.OwnerReference",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "ownerReferences": [5]}),
        "number into Go struct field ObjectMeta.metadata.ownerReferences of type v1.OwnerReference",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "ownerReferences": [{"uid": 5}]}),
        "OwnerReference.metadata.ownerReferences.uid of type string",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "ownerReferences": [{"controller": "yes"}]}),
        "OwnerReference.metadata.ownerReferences.controller of type bool",
    ),
    ("configmaps", body("configmaps", {"name": 5}), "ObjectMeta.metadata.name of type string"),
    (
        "configmaps",
        body("configmaps", {"generateName": 5}),
        "ObjectMeta.metadata.generateName of type string",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "generation": 1.5}),
        "ObjectMeta.metadata.generation of type int64",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "generation": 2**63}),
        f"number {2**63} into Go struct field ObjectMeta.metadata.generation of type int64",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "generation": True}),
        "bool into Go struct field ObjectMeta.metadata.generation of type int64",
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "creationTimestamp": "yesterday"}),
        'parsing time "yesterday"',
    ),
    (
        "configmaps",
        body("configmaps", {"name": "a", "deletionTimestamp": 5}),
        "ObjectMeta.metadata.deletionTimestamp of type string",
    ),
    (
        "configmaps",
        body("configmaps", "hello"),
        "cannot unmarshal string into Go struct field .metadata of type v1.ObjectMeta",
    ),
    (
        "configmaps",
        [],
        "the object provided is unrecognized (must be of type ConfigMap): json: cannot "
        "unmarshal array into Go value of type ConfigMap",
    ),
    ("configmaps", "x", "must be of type ConfigMap"),
    ("configmaps", None, "must be of type ConfigMap"),
    (
        "configmaps",
        {**body("configmaps"), "apiVersion": 5},
        "couldn't get version/kind; json parse error: json: cannot unmarshal number into Go "
        "struct field .apiVersion of type string",
    ),
    (
        "trainjobs",
        {**body("trainjobs"), "apiVersion": "trainer.kubeflow.org/v9"},
        "the API version in the data (trainer.kubeflow.org/v9) does not match the expected API "
        "version (trainer.kubeflow.org/v1alpha1)",
    ),
    (
        "trainjobs",
        body("trainjobs", {"name": "a", "labels": "x"}),
        'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: json: cannot unmarshal '
        "string into Go struct field ObjectMeta.metadata.labels of type map[string]string",
    ),
    ("pods", {**body("pods"), "apiVersion": "batch/v1"}, "expected API version (v1)"),
    ("configmaps", {**body("configmaps"), "kind": "Pod"}, "cannot be handled as a ConfigMap"),
    (
        "configmaps",
        body("configmaps", data={"a": 5}),
        f"{CANNOT_HANDLE} number into Go struct field ConfigMap.data of type string",
    ),
    ("configmaps", body("configmaps", binaryData={"a": "!!"}), "illegal base64 data"),
    ("secrets", body("secrets", data={"a": "!!"}), "illegal base64 data"),
    ("secrets", body("secrets", stringData={"a": 5}), "Secret.stringData of type string"),
    ("pods", body("pods", spec="x"), "Pod.spec of type v1.PodSpec"),
    (
        "pods",
        body("pods", spec={"containers": [{"name": 5}]}),
        "Container.spec.containers.name of type string",
    ),
    (
        "validatingwebhookconfigurations",
        body("validatingwebhookconfigurations", webhooks="x"),
        "of type []v1.Webhook",
    ),
    ("clusterroles", body("clusterroles", rules=[{"verbs": 5}]), "PolicyRule.rules.verbs"),
    (
        "configmaps",
        body("configmaps", {"name": "a", "namespace": "other"}),
        "the namespace of the provided object does not match the namespace sent on the request",
    ),
]


@pytest.mark.parametrize(("plural", "obj", "message"), BAD_REQUESTS)
def test_what_does_not_decode_is_a_bad_request(plural: str, obj: Any, message: str) -> None:
    err = answer(plural, obj)
    assert err is not None
    assert (err.code, err.reason) == (400, "BadRequest")
    assert message in err.message
    assert err.status()["kind"] == "Status"


def test_a_name_that_is_not_the_urls_is_a_bad_request() -> None:
    err = answer("configmaps", body("configmaps", {"name": "a"}), name="b")
    assert err is not None and err.code == 400
    assert err.message == "the name of the object (a) does not match the name on the URL (b)"
    ok = metadata.check(rt("configmaps"), body("configmaps", {}), "default", "b")
    assert ok["metadata"]["name"] == "b"


# --- 422 Invalid: what decodes but is not valid ------------------------------------------------

INVALID: list[tuple[str, Any, str, str]] = [
    ("configmaps", {"name": "Bad_Name"}, "metadata.name", "FieldValueInvalid"),
    ("configmaps", {"name": "a" * 254}, "metadata.name", "FieldValueInvalid"),
    ("configmaps", {"name": "a\n"}, "metadata.name", "FieldValueInvalid"),
    ("namespaces", {"name": "a.b"}, "metadata.name", "FieldValueInvalid"),
    ("services", {"name": "1abc"}, "metadata.name", "FieldValueInvalid"),
    ("clusterroles", {"name": "a/b"}, "metadata.name", "FieldValueInvalid"),
    ("clusterroles", {"name": ".."}, "metadata.name", "FieldValueInvalid"),
    ("trainjobs", {"name": "My_Job"}, "metadata.name", "FieldValueInvalid"),
    ("configmaps", {"generateName": "Bad-"}, "metadata.generateName", "FieldValueInvalid"),
    ("configmaps", {"name": "a", "labels": {"a b": "c"}}, "metadata.labels", "FieldValueInvalid"),
    (
        "configmaps",
        {"name": "a", "labels": {"a": "x" * 64}},
        "metadata.labels",
        "FieldValueInvalid",
    ),
    ("configmaps", {"name": "a", "labels": {"a/b/c": ""}}, "metadata.labels", "FieldValueInvalid"),
    ("configmaps", {"name": "a", "labels": {"/a": ""}}, "metadata.labels", "FieldValueInvalid"),
    ("configmaps", {"name": "a", "labels": {"x" * 64: ""}}, "metadata.labels", "FieldValueInvalid"),
    ("configmaps", {"name": "a", "labels": {"a": "-x"}}, "metadata.labels", "FieldValueInvalid"),
    ("configmaps", {"name": "a", "labels": {"a": "x\n"}}, "metadata.labels", "FieldValueInvalid"),
    ("configmaps", {"name": "a", "labels": {"": "x"}}, "metadata.labels", "FieldValueInvalid"),
    (
        "configmaps",
        {"name": "a", "annotations": {"a b": ""}},
        "metadata.annotations",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {"name": "a", "annotations": {"big": "x" * (256 * 1024)}},
        "metadata.annotations",
        "FieldValueTooLong",
    ),
    (
        "configmaps",
        {"name": "a", "finalizers": ["a b"]},
        "metadata.finalizers",
        "FieldValueInvalid",
    ),
    ("configmaps", {"name": "a", "finalizers": [""]}, "metadata.finalizers", "FieldValueInvalid"),
    (
        "configmaps",
        {"name": "a", "finalizers": ["orphan", "foregroundDeletion"]},
        "metadata.finalizers",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]},
        "metadata.ownerReferences.uid",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {"name": "a", "ownerReferences": [{"kind": "Pod", "name": "p", "uid": "u"}]},
        "metadata.ownerReferences.apiVersion",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {"name": "a", "ownerReferences": [{"apiVersion": "v1", "name": "p", "uid": "u"}]},
        "metadata.ownerReferences.kind",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "uid": "u"}]},
        "metadata.ownerReferences.name",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {"name": "a", "ownerReferences": [{}]},
        "metadata.ownerReferences.uid",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {
            "name": "a",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": n, "uid": n, "controller": True}
                for n in ("p", "q")
            ],
        },
        "metadata.ownerReferences",
        "FieldValueInvalid",
    ),
    (
        "configmaps",
        {
            "name": "a",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"}],
        },
        "metadata.ownerReferences",
        "FieldValueInvalid",
    ),
    ("configmaps", {"name": "a", "generation": -1}, "metadata.generation", "FieldValueInvalid"),
    (
        "configmaps",
        {"name": "a", "managedFields": [{"operation": "Bogus", "manager": "m"}]},
        "metadata.managedFields[0].operation",
        "FieldValueInvalid",
    ),
]


@pytest.mark.parametrize(("plural", "meta", "field", "cause"), INVALID)
def test_invalid_metadata_is_unprocessable(plural: str, meta: Any, field: str, cause: str) -> None:
    err = answer(plural, body(plural, meta))
    assert err is not None
    assert (err.code, err.reason) == (422, "Invalid")
    causes = err.details["causes"]
    assert any(c["field"] == field and c["reason"] == cause for c in causes), causes
    assert err.message.startswith(
        f"{rt(plural).kind}{'.' + rt(plural).group if rt(plural).group else ''} "
    )


def test_messages_are_kubernetes_words() -> None:
    err = answer("configmaps", body("configmaps", {"name": "a", "labels": {"a b": "c"}}))
    assert err is not None
    assert err.message == (
        'ConfigMap "a" is invalid: metadata.labels: Invalid value: "a b": name part must '
        "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
        "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )
    err = answer(
        "configmaps",
        body(
            "configmaps",
            {"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]},
        ),
    )
    assert err is not None
    assert err.message == (
        'ConfigMap "a" is invalid: metadata.ownerReferences.uid: Invalid value: "": uid must '
        "not be empty"
    )
    assert names.is_dns1123_subdomain("A") == [
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
        "'-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    ]
    assert names.is_qualified_name("a/b/c")[0].startswith("a qualified name must consist of")
    assert names.is_qualified_name("/a") == ["prefix part must be non-empty"]
    assert names.is_valid_label_value("x" * 64)[0] == "must be no more than 63 characters"
    assert names.name_is_dns_subdomain("job-", True) == []  # a generateName may end in '-'
    assert names.is_config_map_key("..a") == ["must not start with '..'"]


def test_namespace_finalizers_are_standard_or_qualified() -> None:
    ok = {"spec": {"finalizers": ["kubernetes", "example.com/cleanup"]}}
    assert builtin.prepare(rt("namespaces"), ok) == []
    bad = {"spec": {"finalizers": ["cleanup", "a b/c"]}}
    errors = builtin.prepare(rt("namespaces"), bad)
    assert {e.path for e in errors} == {"spec.finalizers"}
    assert any("neither a standard finalizer name" in e.message for e in errors)
    assert any(e.value == "a b/c" for e in errors)


def test_data_keys_and_sizes_of_configmaps_and_secrets() -> None:
    cm = {"data": {"a b": "x", "ok": "y", "dup": "z"}, "binaryData": {"dup": "eA==", "..": ""}}
    fields = {(e.path, e.type) for e in builtin.prepare(rt("configmaps"), cm)}
    assert fields == {
        ("data[a b]", "Invalid value"),
        ("data[dup]", "Invalid value"),
        ("binaryData[..]", "Invalid value"),
    }
    big = {"data": {"k": "x" * (1024 * 1024 + 1)}}
    assert [e.type for e in builtin.prepare(rt("configmaps"), big)] == ["Too long"]
    secret: dict[str, Any] = {"stringData": {"a b": "v", "k": "v"}}
    errors = builtin.prepare(rt("secrets"), secret)
    assert [e.path for e in errors] == ["data[a b]"]
    assert secret["data"]["k"] == "dg==" and "stringData" not in secret


# --- other request shapes ----------------------------------------------------------------------


def test_delete_options_are_decoded_and_validated() -> None:
    assert metadata.delete_options({}, {})["propagationPolicy"] is None
    assert metadata.delete_options({}, {"propagationPolicy": "Orphan"})["propagationPolicy"] == (
        "Orphan"
    )
    assert metadata.delete_options({"orphanDependents": True}, {})["propagationPolicy"] == "Orphan"
    bad: Any
    for bad in ({"propagationPolicy": 5}, {"preconditions": "x"}, {"dryRun": "All"}, [1]):
        with pytest.raises(APIError) as err:
            metadata.delete_options(bad, {})
        assert err.value.code == 400, bad
    for bad_query, bad_body in (({"propagationPolicy": "Bogus"}, {}), ({}, {"dryRun": ["x"]})):
        with pytest.raises(APIError) as err:
            metadata.delete_options(bad_body, bad_query)
        assert (err.value.code, err.value.reason) == (422, "Invalid")


def test_integer_query_parameters() -> None:
    assert metadata.int_param({}, "limit") is None
    assert metadata.int_param({"limit": "5"}, "limit") == 5
    for bad in ("abc", "1.5", "9" * 30, "0x10"):
        with pytest.raises(APIError) as err:
            metadata.int_param({"limit": bad}, "limit")
        assert err.value.code == 400
    assert metadata.int_param({"tailLines": "-1"}, "tailLines") == -1
    with pytest.raises(APIError) as err:
        metadata.int_param({"tailLines": "-1"}, "tailLines", options="PodLogOptions")
    assert (err.value.code, err.value.details["causes"][0]["field"]) == (422, "tailLines")


def test_review_bodies_are_decoded() -> None:
    ok = metadata.check_review("authentication.k8s.io", "TokenReview", {"spec": {"token": "t"}})
    assert ok["spec"] == {"token": "t"}
    bad: Any
    for bad in ([], {"spec": "x"}, {"spec": {"token": 5}}, {"metadata": "x"}):
        with pytest.raises(APIError) as err:
            metadata.check_review("authentication.k8s.io", "TokenReview", bad)
        assert err.value.code == 400


@pytest.mark.parametrize("labels", ["x", ["a"], 5, None, {"app": 5}])
def test_selectors_never_trust_a_stored_type(labels: Any) -> None:
    match = matcher("app=x,tier in (a,b)", None)
    assert match is not None
    assert match({"metadata": {"labels": labels}}) is False
    one = matcher("!app", None)
    assert one is not None
    assert one({"metadata": {"labels": labels}}) is (not isinstance(labels, dict))
    assert matcher("app", "metadata.name=a") is not None
    assert matcher("app", None) is not None
    assert matcher("app", None)({"metadata": "x"}) is False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("before", "policy", "after"),
    [
        (["orphan"], "Foreground", ["foregroundDeletion"]),
        (["foregroundDeletion", "example.com/f"], "Orphan", ["example.com/f", "orphan"]),
    ],
)
async def test_a_deletion_policy_replaces_the_other_policys_finalizer(
    before: list[str], policy: str, after: list[str]
) -> None:
    from trainer.local.apiserver import APIServer  # noqa: PLC0415

    server = APIServer()
    cms = server.storage.resource("v1", "configmaps")
    server.storage.create_unadmitted(
        "v1", "ConfigMap", {"metadata": {"name": "f", "finalizers": before}}
    )
    deleted = await server.storage.delete(cms, "default", "f", policy=policy)
    assert deleted["metadata"]["finalizers"] == after
    assert om.validate_finalizers(deleted["metadata"]["finalizers"], "metadata.finalizers") == []


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": [value]}
    return value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"spec": {"when": datetime.date(2024, 1, 1)}}, "spec.when: a date"),
        ({"spec": {"raw": b"x"}}, "spec.raw: a bytes is not JSON data"),
        ({"data": {1: "x"}}, "data: the key 1 is not a string"),
        ({"spec": {"x": [1.0, float("nan")]}}, "spec.x[1]: nan is not a JSON number"),
        ({"spec": {"x": float("inf")}}, "spec.x: inf is not a JSON number"),
        (_nested(60), "the object nests more than 100 levels deep"),
    ],
)
def test_only_plain_json_data_is_stored(value: Any, message: str) -> None:
    with pytest.raises(om.DecodeError) as err:
        om.check_json_data(value)
    assert message in str(err.value)
    bad = answer("configmaps", {**body("configmaps"), "zz": value})
    assert bad is not None and bad.code == 400


def test_json_data_within_bounds_passes() -> None:
    om.check_json_data(_nested(49))  # 98 levels: a dict and a list per step
    om.check_json_data({"a": [1, 2.5, True, None, "x", {"b": []}], "c": 10**30})


def test_stored_objects_are_judged_by_the_same_rules() -> None:
    cms = rt("configmaps")
    good = {**body("configmaps", {"name": "a", "namespace": "default"}), "data": {"k": "v"}}
    assert metadata.stored_problem(cms, good) == ""
    assert "labels of type map[string]string" in metadata.stored_problem(
        cms, body("configmaps", {"name": "a", "namespace": "default", "labels": "x"})
    )
    assert "uid must not be empty" in metadata.stored_problem(
        cms,
        body(
            "configmaps",
            {"name": "a", "namespace": "default", "ownerReferences": [{"kind": "Pod"}]},
        ),
    )
    assert metadata.stored_problem(cms, body("configmaps", {"namespace": "default"})) != ""
    assert metadata.stored_problem(cms, ["x"]) == "not an object: array"
