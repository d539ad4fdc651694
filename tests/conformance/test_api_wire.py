"""Conformance of the API server's answers a client library reads beyond objects: Table output
for kubectl, OpenAPI v2 and v3, RBAC refusals, server-side apply conflicts, list options,
content negotiation. Each expectation is kube-apiserver's answer (these probes also run
against the bed's kube-apiserver: tests/cluster/test_api_probes.py)."""

from __future__ import annotations

import json
import ssl
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tests.conformance.cluster import Cluster, cluster_fixture, install_crds
from tests.conformance.differences import DIFFERENCES
from tests.conformance.test_api import apply_cm, create_tj, raw
from trainer.api import crds

__all__ = ["cluster_fixture"]  # the `cluster` fixture

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
PROTOBUF = "application/vnd.kubernetes.protobuf"
TJ_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"


def _printer_columns() -> list[str]:
    crd = crds.trainjob_crd()
    version = crd["spec"]["versions"][0]
    return [c["name"] for c in version.get("additionalPrinterColumns") or []]


async def test_table_output_of_a_custom_resource(cluster: Cluster) -> None:
    await create_tj(cluster, "tab")
    status, table = await raw(cluster, "GET", TJ_PATH.format(ns=cluster.namespace), accept=TABLE)
    assert status == 200
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", *_printer_columns()]
    assert table["columnDefinitions"][0]["format"] == "name"
    (row,) = table["rows"]
    assert row["cells"][0] == "tab"
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["apiVersion"] == "meta.k8s.io/v1"
    assert row["object"]["metadata"]["name"] == "tab"
    assert "spec" not in row["object"]


async def test_table_output_of_configmaps(cluster: Cluster) -> None:
    await cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"name": "two"}, "data": {"a": "1", "b": "2"}}
    )
    status, table = await raw(
        cluster, "GET", f"/api/v1/namespaces/{cluster.namespace}/configmaps/two", accept=TABLE
    )
    assert status == 200
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["rows"][0]["cells"][:2] == ["two", 2]


async def test_openapi_v2_describes_the_custom_resources(cluster: Cluster) -> None:
    await create_tj(cluster, "oa2")
    status, doc = await raw(cluster, "GET", "/openapi/v2")
    assert status == 200
    definition = doc["definitions"]["org.kubeflow.trainer.v1alpha1.TrainJob"]
    assert definition["x-kubernetes-group-version-kind"] == [
        {"group": "trainer.kubeflow.org", "kind": "TrainJob", "version": "v1alpha1"}
    ]
    assert "spec" in definition["properties"]


async def test_openapi_v3_index_and_group_document(cluster: Cluster) -> None:
    await create_tj(cluster, "oa3")
    status, index = await raw(cluster, "GET", "/openapi/v3")
    assert status == 200
    entry = index["paths"]["apis/trainer.kubeflow.org/v1alpha1"]
    url = urlsplit(entry["serverRelativeURL"])
    assert url.path == "/openapi/v3/apis/trainer.kubeflow.org/v1alpha1"
    query = [(k, v) for k, _, v in (kv.partition("=") for kv in url.query.split("&") if kv)]
    status, doc = await raw(cluster, "GET", url.path, query=query)
    assert status == 200
    schemas = doc["components"]["schemas"]
    assert "org.kubeflow.trainer.v1alpha1.TrainJob" in schemas
    assert any(p.endswith("/trainjobs") for p in doc["paths"])


async def _as_service_account(cluster: Cluster, name: str) -> tuple[str, ssl.SSLContext]:
    """A token of a new ServiceAccount that RBAC grants nothing, and the server's TLS context."""
    await install_crds(cluster.api)
    await cluster.core.create_namespaced_service_account(
        cluster.namespace, {"metadata": {"name": name}}
    )
    answer = await cluster.core.create_namespaced_service_account_token(
        name, cluster.namespace, {"spec": {"expirationSeconds": 600}}
    )
    cfg = cluster.api.configuration
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    return str(answer.status.token), context


async def _get_as(token: str, context: ssl.SSLContext, cluster: Cluster, path: str) -> Any:
    host = str(cluster.api.configuration.host)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(host + path, headers=headers, ssl=context) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def test_rbac_refuses_what_is_not_granted_in_kube_apiservers_words(cluster: Cluster) -> None:
    ns = cluster.namespace
    token, context = await _as_service_account(cluster, "nobody")
    user = f"system:serviceaccount:{ns}:nobody"
    status, body = await _get_as(token, context, cluster, TJ_PATH.format(ns=ns))
    assert status == 403
    assert body["reason"] == "Forbidden" and body["code"] == 403
    assert body["message"] == (
        f'trainjobs.trainer.kubeflow.org is forbidden: User "{user}" cannot list resource '
        f'"trainjobs" in API group "trainer.kubeflow.org" in the namespace "{ns}"'
    )
    assert body["details"] == {"group": "trainer.kubeflow.org", "kind": "trainjobs"}
    status, body = await _get_as(token, context, cluster, f"/api/v1/namespaces/{ns}/configmaps/x")
    assert status == 403
    assert body["message"] == (
        f'configmaps "x" is forbidden: User "{user}" cannot get resource "configmaps" in API '
        f'group "" in the namespace "{ns}"'
    )
    assert body["details"] == {"name": "x", "kind": "configmaps"}


async def test_server_side_apply_conflict_names_the_manager_and_field(cluster: Cluster) -> None:
    path = f"/api/v1/namespaces/{cluster.namespace}/configmaps/owned"
    kind = "application/apply-patch+yaml"
    status, _ = await raw(
        cluster,
        "PATCH",
        path,
        apply_cm("owned", {"a": "1"}),
        content_type=kind,
        query=[("fieldManager", "one")],
    )
    assert status == 201
    status, err = await raw(
        cluster,
        "PATCH",
        path,
        apply_cm("owned", {"a": "2"}),
        content_type=kind,
        query=[("fieldManager", "two")],
    )
    assert status == 409
    assert err["message"] == 'Apply failed with 1 conflict: conflict with "one": .data.a'
    assert err["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "one"', "field": ".data.a"}
    ]


async def test_resource_version_match_needs_a_resource_version(cluster: Cluster) -> None:
    path = f"/api/v1/namespaces/{cluster.namespace}/configmaps"
    status, listed = await raw(cluster, "GET", path)
    assert status == 200
    rv = listed["metadata"]["resourceVersion"]
    status, exact = await raw(
        cluster, "GET", path, query=[("resourceVersion", rv), ("resourceVersionMatch", "Exact")]
    )
    assert status == 200 and exact["metadata"]["resourceVersion"] == rv
    status, newer = await raw(
        cluster,
        "GET",
        path,
        query=[("resourceVersion", rv), ("resourceVersionMatch", "NotOlderThan")],
    )
    assert status == 200 and int(newer["metadata"]["resourceVersion"]) >= int(rv)
    status, err = await raw(cluster, "GET", path, query=[("resourceVersionMatch", "Exact")])
    assert status == 422
    assert err["reason"] == "Invalid"
    assert "resourceVersionMatch is forbidden unless resourceVersion is provided" in err["message"]


async def test_a_subresource_a_kind_does_not_have_is_404(cluster: Cluster) -> None:
    await create_tj(cluster, "noscale")
    status, err = await raw(cluster, "GET", TJ_PATH.format(ns=cluster.namespace) + "/noscale/scale")
    assert status == 404
    assert err["reason"] == "NotFound"


async def test_protobuf_is_answered_to_who_accepts_it(cluster: Cluster) -> None:
    """client-go's typed clients for built-in kinds ask for protobuf first, JSON second."""
    await cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"name": "pb"}, "data": {"k": "v"}}
    )
    resp = await cluster.api.call_api(
        f"/api/v1/namespaces/{cluster.namespace}/configmaps/pb",
        "GET",
        header_params={"Accept": f"{PROTOBUF}, application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    data = await resp.read()
    assert resp.status == 200
    if cluster.server is not None:  # the listed difference: JSON, which the client accepts
        assert "test_protobuf_is_answered_to_who_accepts_it" in DIFFERENCES
        assert resp.headers["Content-Type"] == "application/json"
        assert json.loads(data)["data"] == {"k": "v"}
        return
    assert resp.headers["Content-Type"] == PROTOBUF
    assert data[:4] == b"k8s\x00"


async def test_an_unknown_resource_of_a_custom_group_is_a_plain_404(cluster: Cluster) -> None:
    """Custom resources' groups fall through to the last handler: plain text, no Status."""
    await install_crds(cluster.api)
    for path in (
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{cluster.namespace}/nopes",
        "/apis/nope.example.com/v1/widgets",
    ):
        status, text = await raw(cluster, "GET", path)
        assert (status, text) == (404, "404 page not found\n"), path


async def test_an_unknown_resource_of_a_built_in_group_is_a_404_status(cluster: Cluster) -> None:
    status, err = await raw(cluster, "GET", f"/api/v1/namespaces/{cluster.namespace}/nopes")
    assert status == 404
    assert (err["kind"], err["reason"]) == ("Status", "NotFound")
    assert err["message"] == "the server could not find the requested resource"
