"""Conformance of the embedded API server, driven with kubernetes_asyncio as a controller
would, expecting what kube-apiserver answers. Also runs against a real cluster when
KUBECONFIG is set; tests that need the embedded server's hooks skip there."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, watch

from tests import builders
from tests.conformance.cluster import Cluster, body, cluster_fixture, install_crds

__all__ = ["cluster_fixture"]  # the `cluster` fixture

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


async def raw(
    c: Cluster,
    method: str,
    path: str,
    payload: Any = None,
    *,
    content_type: str = "application/json",
    query: list[tuple[str, str]] | None = None,
    accept: str = "application/json",
) -> tuple[int, Any]:
    """A raw request: (HTTP status, decoded JSON or text)."""
    try:
        resp = await c.api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": accept},
            body=payload,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        data = await resp.read()
        status = resp.status
    except client.ApiException as exc:
        data, status = exc.body, exc.status
    text = data.decode() if isinstance(data, bytes) else data
    try:
        return status, json.loads(text)
    except (TypeError, ValueError):
        return status, text


async def create_tj(c: Cluster, name: str, **spec: Any) -> dict[str, Any]:
    await install_crds(c.api)
    out: dict[str, Any] = await c.custom.create_namespaced_custom_object(
        GROUP, VERSION, c.namespace, "trainjobs", builders.trainjob(name, namespace=None, **spec)
    )
    return out


# --- discovery ----------------------------------------------------------------------------------


async def test_discovery_parses_in_the_client(cluster: Cluster) -> None:
    version = await client.VersionApi(cluster.api).get_code()
    assert version.major and version.git_version
    core = await client.CoreApi(cluster.api).get_api_versions()
    assert "v1" in core.versions
    resources = await client.CoreV1Api(cluster.api).get_api_resources()
    names = {r.name for r in resources.resources}
    assert {"configmaps", "secrets", "pods", "pods/log", "namespaces"} <= names
    groups = await client.ApisApi(cluster.api).get_api_versions()
    assert {"batch", "coordination.k8s.io"} <= {g.name for g in groups.groups}
    await install_crds(cluster.api)
    status, listing = await raw(cluster, "GET", f"/apis/{GROUP}/{VERSION}")
    assert status == 200
    trainjobs = next(r for r in listing["resources"] if r["name"] == "trainjobs")
    assert trainjobs["namespaced"] is True and "watch" in trainjobs["verbs"]
    assert any(r["name"] == "trainjobs/status" for r in listing["resources"])


# --- objects and lists --------------------------------------------------------------------------


async def test_create_sets_server_fields_and_answers_201(cluster: Cluster) -> None:
    status, obj = await raw(
        cluster,
        "POST",
        f"/api/v1/namespaces/{cluster.namespace}/configmaps",
        {"metadata": {"name": "a"}, "data": {"k": "v"}},
    )
    assert status == 201
    meta = obj["metadata"]
    assert meta["uid"] and meta["resourceVersion"].isdigit() and meta["creationTimestamp"]
    assert meta["namespace"] == cluster.namespace
    tj = await create_tj(cluster, "gen")
    assert tj["metadata"]["generation"] == 1


async def test_get_not_found_and_already_exists(cluster: Cluster) -> None:
    core = cluster.core
    with pytest.raises(client.ApiException) as nf:
        await core.read_namespaced_config_map("missing", cluster.namespace)
    assert nf.value.status == 404 and body(nf.value)["reason"] == "NotFound"
    await core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "dup"}})
    with pytest.raises(client.ApiException) as ae:
        await core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "dup"}})
    assert ae.value.status == 409 and body(ae.value)["reason"] == "AlreadyExists"


async def test_list_per_namespace_and_across_namespaces(cluster: Cluster) -> None:
    core = cluster.core
    for i in range(3):
        await core.create_namespaced_config_map(
            cluster.namespace, {"metadata": {"name": f"cm-{i}", "labels": {"i": str(i)}}}
        )
    listed = await core.list_namespaced_config_map(cluster.namespace)
    names = [i.metadata.name for i in listed.items]
    assert [n for n in names if n.startswith("cm-")] == ["cm-0", "cm-1", "cm-2"]
    # Besides, a cluster's namespace holds kube-root-ca.crt once kube-controller-manager
    # publishes it (whenever that is): nothing else.
    assert set(names) - {"cm-0", "cm-1", "cm-2"} <= {"kube-root-ca.crt"}
    assert listed.metadata.resource_version.isdigit()
    everywhere = await core.list_config_map_for_all_namespaces()
    assert {i.metadata.name for i in everywhere.items} >= {"cm-0", "cm-1", "cm-2"}
    _status, raw_list = await raw(
        cluster, "GET", f"/api/v1/namespaces/{cluster.namespace}/configmaps"
    )
    assert raw_list["kind"] == "ConfigMapList"


async def test_label_and_field_selectors(cluster: Cluster) -> None:
    core = cluster.core
    for name, tier in (("a", "x"), ("b", "y"), ("c", "z")):
        await core.create_namespaced_config_map(
            cluster.namespace, {"metadata": {"name": name, "labels": {"tier": tier}}}
        )
    eq = await core.list_namespaced_config_map(cluster.namespace, label_selector="tier=x")
    assert [i.metadata.name for i in eq.items] == ["a"]
    inset = await core.list_namespaced_config_map(cluster.namespace, label_selector="tier in (x,z)")
    assert [i.metadata.name for i in inset.items] == ["a", "c"]
    notin = await core.list_namespaced_config_map(
        cluster.namespace, label_selector="tier notin (x)"
    )
    assert [i.metadata.name for i in notin.items if i.metadata.name in "abc"] == ["b", "c"]
    by_name = await core.list_namespaced_config_map(
        cluster.namespace, field_selector="metadata.name=b"
    )
    assert [i.metadata.name for i in by_name.items] == ["b"]


async def test_paging_with_limit_and_continue(cluster: Cluster) -> None:
    core = cluster.core
    for i in range(5):
        await core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": f"p{i}"}})
    seen: list[str] = []
    token = None
    while True:
        page = await core.list_namespaced_config_map(cluster.namespace, limit=2, _continue=token)
        seen += [i.metadata.name for i in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert len(page.items) == 2
    assert [n for n in seen if n.startswith("p")] == [f"p{i}" for i in range(5)]


async def test_cluster_scoped_custom_resources(cluster: Cluster) -> None:
    await install_crds(cluster.api)
    runtime = yaml.safe_load(
        """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: conformance-rt}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template: {spec: {template: {spec: {containers: [{name: node, image: x}]}}}}
"""
    )
    co = cluster.custom
    created = await co.create_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", runtime
    )
    assert "namespace" not in created["metadata"]
    got = await co.get_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", "conformance-rt"
    )
    assert got["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] == 1  # CRD default
    await co.delete_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", "conformance-rt"
    )
    with pytest.raises(client.ApiException) as nf:
        await co.get_cluster_custom_object(
            GROUP, VERSION, "clustertrainingruntimes", "conformance-rt"
        )
    assert nf.value.status == 404


async def test_jobset_crud(cluster: Cluster) -> None:
    await install_crds(cluster.api)
    co = cluster.custom
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {"containers": [{"name": "c", "image": "busybox"}]}
                            }
                        }
                    },
                }
            ]
        },
    }
    created = await co.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", cluster.namespace, "jobsets", js
    )
    assert created["spec"]["replicatedJobs"][0]["groupName"] == "default"
    listed = await co.list_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", cluster.namespace, "jobsets"
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["js"]
    await co.delete_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", cluster.namespace, "jobsets", "js"
    )


async def test_secret_string_data_becomes_data(cluster: Cluster) -> None:
    secret = await cluster.core.create_namespaced_secret(
        cluster.namespace, {"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}
    )
    assert secret.data == {"password": "aHVudGVyMg=="}
    assert secret.string_data is None
    assert secret.type == "Opaque"


async def test_configmap_strategic_merge_with_null_deletes(cluster: Cluster) -> None:
    core = cluster.core
    await core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"name": "smp"}, "data": {"a": "1", "b": "2"}}
    )
    patched = await core.patch_namespaced_config_map(
        "smp", cluster.namespace, {"data": {"a": None, "c": "3"}}
    )
    assert patched.data == {"b": "2", "c": "3"}


async def test_core_put(cluster: Cluster) -> None:
    core = cluster.core
    cm = await core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "put"}})
    cm.data = {"x": "y"}
    updated = await core.replace_namespaced_config_map("put", cluster.namespace, cm)
    assert updated.data == {"x": "y"}
    assert int(updated.metadata.resource_version) > int(cm.metadata.resource_version)


# --- patch types --------------------------------------------------------------------------------


async def test_merge_and_json_patch(cluster: Cluster) -> None:
    await create_tj(cluster, "p")
    co = cluster.custom
    merged = await co.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        "trainjobs",
        "p",
        {"metadata": {"labels": {"a": "b"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged["metadata"]["labels"] == {"a": "b"}
    jp = await co.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        "trainjobs",
        "p",
        [{"op": "replace", "path": "/spec/suspend", "value": True}],
        _content_type="application/json-patch+json",
    )
    assert jp["spec"]["suspend"] is True


async def test_failing_json_patch_test_is_422(cluster: Cluster) -> None:
    await create_tj(cluster, "t")
    with pytest.raises(client.ApiException) as err:
        await cluster.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            "trainjobs",
            "t",
            [{"op": "test", "path": "/spec/suspend", "value": True}],
            _content_type="application/json-patch+json",
        )
    assert err.value.status == 422


async def test_strategic_merge_on_a_custom_resource_is_415(cluster: Cluster) -> None:
    await create_tj(cluster, "s")
    status, _ = await raw(
        cluster,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.namespace}/trainjobs/s",
        {"spec": {"suspend": True}},
        content_type="application/strategic-merge-patch+json",
    )
    assert status == 415


async def test_strategic_merge_of_owner_references_merges_by_uid(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    refs = []
    for name in ("a", "b"):  # real owners: a dependent of absent ones would be collected
        owner = await core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
        refs.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner.metadata.uid}
        )
    owner_a, owner_b = refs
    await core.create_namespaced_config_map(
        ns, {"metadata": {"name": "owned", "ownerReferences": [owner_a]}}
    )
    patched = await core.patch_namespaced_config_map(
        "owned", ns, {"metadata": {"ownerReferences": [owner_b]}}
    )
    assert {o.uid for o in patched.metadata.owner_references} == {owner_a["uid"], owner_b["uid"]}


# --- server-side apply --------------------------------------------------------------------------


def apply_cm(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_server_side_apply(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    status, created = await raw(
        cluster,
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/ssa",
        apply_cm("ssa", {"a": "1", "b": "2"}),
        content_type="application/apply-patch+yaml",
        query=[("fieldManager", "one")],
    )
    assert status == 201
    assert created["metadata"]["managedFields"][0]["manager"] == "one"
    assert created["metadata"]["managedFields"][0]["operation"] == "Apply"
    # Re-applying without "b" removes it: the manager no longer owns it.
    status, updated = await raw(
        cluster,
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/ssa",
        apply_cm("ssa", {"a": "1"}),
        content_type="application/apply-patch+yaml",
        query=[("fieldManager", "one")],
    )
    assert status == 200 and updated["data"] == {"a": "1"}
    # Another manager changing "a" conflicts without force, wins with it.
    status, err = await raw(
        cluster,
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/ssa",
        apply_cm("ssa", {"a": "2"}),
        content_type="application/apply-patch+yaml",
        query=[("fieldManager", "two")],
    )
    assert status == 409 and err["reason"] == "Conflict"
    status, forced = await raw(
        cluster,
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/ssa",
        apply_cm("ssa", {"a": "2"}),
        content_type="application/apply-patch+yaml",
        query=[("fieldManager", "two"), ("force", "true")],
    )
    assert status == 200 and forced["data"] == {"a": "2"}
    assert (await core.read_namespaced_config_map("ssa", ns)).data == {"a": "2"}


async def test_server_side_apply_real_yaml_body(cluster: Cluster) -> None:
    # kubernetes_asyncio JSON-encodes every apply body; kubectl sends YAML, so send it raw.
    server = cluster.local()
    text = yaml.safe_dump(apply_cm("yaml", {"k": "v"}))
    url = f"{server.url}/api/v1/namespaces/{cluster.namespace}/configmaps/yaml"
    connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        resp = await session.patch(
            url,
            data=text,
            params={"fieldManager": "kubectl"},
            headers={"Content-Type": "application/apply-patch+yaml", **server.auth_headers()},
        )
        created = await resp.json()
    assert resp.status == 201 and created["data"] == {"k": "v"}


async def test_reapplying_the_same_config_bumps_nothing(cluster: Cluster) -> None:
    await install_crds(cluster.api)
    cfg = builders.trainjob("same", namespace=None)
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.namespace}/trainjobs/same"
    q = [("fieldManager", "trainer"), ("force", "true")]
    _, first = await raw(
        cluster, "PATCH", path, cfg, content_type="application/apply-patch+yaml", query=q
    )
    _, second = await raw(
        cluster, "PATCH", path, cfg, content_type="application/apply-patch+yaml", query=q
    )
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert second["metadata"]["generation"] == first["metadata"]["generation"] == 1


# --- updates, status, generation ----------------------------------------------------------------


async def test_custom_resource_put(cluster: Cluster) -> None:
    tj = await create_tj(cluster, "cput")
    tj["spec"]["suspend"] = True
    updated = await cluster.custom.replace_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, "trainjobs", "cput", tj
    )
    assert updated["spec"]["suspend"] is True


async def test_status_subresource_separation(cluster: Cluster) -> None:
    # Managed by another controller (MultiKueue's name): a cluster's Trainer controller writes
    # no status of its own between this probe's read and its PUT.
    await create_tj(cluster, "st", managedBy="kueue.x-k8s.io/multikueue")
    co = cluster.custom
    cond = {
        "type": "Complete",
        "status": "True",
        "reason": "AllJobsCompleted",
        "message": "done",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    via_status = await co.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        cluster.namespace,
        "trainjobs",
        "st",
        {"spec": {"suspend": True}, "status": {"conditions": [cond]}},
        _content_type="application/merge-patch+json",
    )
    assert via_status["spec"]["suspend"] is False  # spec ignored on /status
    assert via_status["status"]["conditions"][0]["type"] == "Complete"
    via_main = await co.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        "trainjobs",
        "st",
        {"status": {"conditions": []}},
        _content_type="application/merge-patch+json",
    )
    assert via_main["status"]["conditions"][0]["type"] == "Complete"  # status ignored on main
    via_main["status"]["jobsStatus"] = [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
    ]
    put = await co.replace_namespaced_custom_object_status(
        GROUP, VERSION, cluster.namespace, "trainjobs", "st", via_main
    )
    assert put["status"]["jobsStatus"][0]["active"] == 1


async def test_stale_resource_version_conflicts(cluster: Cluster) -> None:
    tj = await create_tj(cluster, "stale")
    co = cluster.custom
    fresh = dict(tj)
    fresh["spec"] = {**tj["spec"], "suspend": True}
    await co.replace_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, "trainjobs", "stale", fresh
    )
    with pytest.raises(client.ApiException) as put_err:
        await co.replace_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, "trainjobs", "stale", tj
        )
    assert put_err.value.status == 409
    with pytest.raises(client.ApiException) as patch_err:
        await co.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            "trainjobs",
            "stale",
            {
                "metadata": {"resourceVersion": tj["metadata"]["resourceVersion"]},
                "spec": {"suspend": False},
            },
            _content_type="application/merge-patch+json",
        )
    assert patch_err.value.status == 409


async def test_generation_bumps_only_on_spec_changes(cluster: Cluster) -> None:
    await create_tj(cluster, "g")
    co = cluster.custom
    path = (GROUP, VERSION, cluster.namespace, "trainjobs", "g")
    spec = await co.patch_namespaced_custom_object(
        *path, {"spec": {"suspend": True}}, _content_type="application/merge-patch+json"
    )
    assert spec["metadata"]["generation"] == 2
    labels = await co.patch_namespaced_custom_object(
        *path, {"metadata": {"labels": {"x": "y"}}}, _content_type="application/merge-patch+json"
    )
    assert labels["metadata"]["generation"] == 2
    status = await co.patch_namespaced_custom_object_status(
        *path,
        {
            "status": {
                "jobsStatus": [
                    {
                        "name": "n",
                        "ready": 0,
                        "succeeded": 0,
                        "failed": 0,
                        "active": 0,
                        "suspended": 1,
                    }
                ]
            }
        },
        _content_type="application/merge-patch+json",
    )
    assert status["metadata"]["generation"] == 2
    assert (
        len(
            {
                spec["metadata"]["resourceVersion"],
                labels["metadata"]["resourceVersion"],
                status["metadata"]["resourceVersion"],
            }
        )
        == 3
    )


# --- deletion -----------------------------------------------------------------------------------


async def test_finalizers_hold_deletion(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    await core.create_namespaced_config_map(
        ns, {"metadata": {"name": "fin", "finalizers": ["example.com/hold"]}}
    )
    await core.delete_namespaced_config_map("fin", ns)
    held = await core.read_namespaced_config_map("fin", ns)
    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(client.ApiException) as err:
        await core.patch_namespaced_config_map(
            "fin", ns, {"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}
        )
    assert err.value.status == 422
    await core.patch_namespaced_config_map("fin", ns, {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as gone:
        await core.read_namespaced_config_map("fin", ns)
    assert gone.value.status == 404


async def test_owner_reference_cascade(cluster: Cluster) -> None:
    server = cluster.local()
    core = cluster.core
    ns = cluster.namespace
    owner = await core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "controller": True,
    }
    await core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dep", "ownerReferences": [ref]}}
    )
    await core.delete_namespaced_config_map("owner", ns)
    await server.storage.gc.idle()
    with pytest.raises(client.ApiException) as gone:
        await core.read_namespaced_config_map("dep", ns)
    assert gone.value.status == 404


async def test_a_dependent_created_after_its_owner_is_gone_is_collected(
    cluster: Cluster,
) -> None:
    """The collector's "absent owner" rule: a dependent whose every owner no longer exists
    (here: created with the uid of a deleted owner) is deleted; one whose owner's kind is not
    served is left alone."""
    server = cluster.local()
    core = cluster.core
    ns = cluster.namespace
    owner = await core.create_namespaced_config_map(ns, {"metadata": {"name": "gone"}})
    await core.delete_namespaced_config_map("gone", ns)
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": owner.metadata.uid}
    await core.create_namespaced_config_map(
        ns, {"metadata": {"name": "late", "ownerReferences": [ref]}}
    )
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u-1"}
    await core.create_namespaced_config_map(
        ns, {"metadata": {"name": "kept", "ownerReferences": [unknown]}}
    )
    await server.storage.gc.idle()
    with pytest.raises(client.ApiException) as gone:
        await core.read_namespaced_config_map("late", ns)
    assert gone.value.status == 404
    assert (await core.read_namespaced_config_map("kept", ns)).metadata.name == "kept"


async def test_orphan_and_foreground_propagation(cluster: Cluster) -> None:
    server = cluster.local()
    core = cluster.core
    ns = cluster.namespace
    for policy in ("Orphan", "Foreground"):
        owner = await core.create_namespaced_config_map(
            ns, {"metadata": {"name": f"o-{policy.lower()}"}}
        )
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner.metadata.name,
            "uid": owner.metadata.uid,
        }
        await core.create_namespaced_config_map(
            ns, {"metadata": {"name": f"d-{policy.lower()}", "ownerReferences": [ref]}}
        )
        await core.delete_namespaced_config_map(owner.metadata.name, ns, propagation_policy=policy)
        await server.storage.gc.idle()
        with pytest.raises(client.ApiException):
            await core.read_namespaced_config_map(owner.metadata.name, ns)
    orphan = await core.read_namespaced_config_map("d-orphan", ns)
    assert not orphan.metadata.owner_references
    with pytest.raises(client.ApiException):
        await core.read_namespaced_config_map("d-foreground", ns)


async def test_delete_collection_by_label(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    for name, app in (("x1", "x"), ("x2", "x"), ("y1", "y")):
        await core.create_namespaced_config_map(
            ns, {"metadata": {"name": name, "labels": {"app": app}}}
        )
    await core.delete_collection_namespaced_config_map(ns, label_selector="app=x")
    left = await core.list_namespaced_config_map(ns, label_selector="app")
    assert [i.metadata.name for i in left.items] == ["y1"]


async def test_dry_run_is_not_persisted(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    dry = await core.create_namespaced_config_map(ns, {"metadata": {"name": "dry"}}, dry_run="All")
    assert dry.metadata.name == "dry"
    with pytest.raises(client.ApiException) as err:
        await core.read_namespaced_config_map("dry", ns)
    assert err.value.status == 404


async def test_generate_name(cluster: Cluster) -> None:
    cm = await cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"generateName": "gen-"}}
    )
    assert cm.metadata.name.startswith("gen-") and len(cm.metadata.name) == 9


# --- namespaces ---------------------------------------------------------------------------------


async def test_namespaces(cluster: Cluster) -> None:
    core = cluster.core
    with pytest.raises(client.ApiException) as missing:
        await core.create_namespaced_config_map("no-such-ns", {"metadata": {"name": "x"}})
    assert missing.value.status == 404
    ns = await core.read_namespace(cluster.namespace)
    assert ns.status.phase == "Active"
    status, _ = await raw(
        cluster,
        "POST",
        f"/api/v1/namespaces/{cluster.namespace}/configmaps",
        {"metadata": {"name": "mismatch", "namespace": "other"}},
    )
    assert status == 400


async def test_namespace_deletion_removes_its_objects(cluster: Cluster) -> None:
    server = cluster.local()
    core = cluster.core
    await core.create_namespace({"metadata": {"name": "doomed"}})
    await core.create_namespaced_config_map("doomed", {"metadata": {"name": "x"}})
    await core.create_namespaced_config_map(
        "doomed", {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    )
    await core.delete_namespace("doomed")
    # "held" keeps the namespace terminating until its finalizer is removed.
    with pytest.raises(client.ApiException) as refused:
        await core.create_namespaced_config_map("doomed", {"metadata": {"name": "late"}})
    assert refused.value.status == 403
    assert (await core.read_namespace("doomed")).status.phase == "Terminating"
    await core.patch_namespaced_config_map("held", "doomed", {"metadata": {"finalizers": None}})
    await server.storage.gc.idle()
    with pytest.raises(client.ApiException) as gone:
        await core.read_namespace("doomed")
    assert gone.value.status == 404


# --- watches ------------------------------------------------------------------------------------


ROOT_CA = "kube-root-ca.crt"
"""kube-controller-manager's root CA publisher adds it to a new namespace whenever it gets to it:
a watch of the namespace's ConfigMaps on a cluster may see it at any point."""


async def collect(stream: Any, n: int, timeout: float = 5.0) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    async def run() -> None:
        async for ev in stream:
            obj = ev["object"]
            name = obj["metadata"]["name"] if isinstance(obj, dict) else obj.metadata.name
            if name == ROOT_CA:
                continue
            out.append((ev["type"], name))
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_watch_events_carry_resource_versions(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    listed = await core.list_namespaced_config_map(ns)
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )

    async def writes() -> None:
        await core.create_namespaced_config_map(ns, {"metadata": {"name": "w"}})
        await core.patch_namespaced_config_map("w", ns, {"data": {"a": "b"}})
        await core.delete_namespaced_config_map("w", ns)

    task = asyncio.create_task(writes())
    events = await collect(stream, 3)
    await task
    w.stop()
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


async def test_watch_replays_events_after_the_given_version(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    listed = await core.list_namespaced_config_map(ns)
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "r1"}})
    await core.delete_namespaced_config_map("r1", ns)
    w = watch.Watch()
    events = await collect(
        w.stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        ),
        2,
    )
    w.stop()
    assert events == [("ADDED", "r1"), ("DELETED", "r1")]
    # From the list's own version: nothing to replay.
    current = await core.list_namespaced_config_map(ns)
    w2 = watch.Watch()
    quiet = [
        ev
        async for ev in w2.stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=current.metadata.resource_version,
            timeout_seconds=1,
        )
        if ev["object"].metadata.name != ROOT_CA
    ]
    assert quiet == []


async def test_watch_timeout_ends_the_stream(cluster: Cluster) -> None:
    w = watch.Watch()
    events = [
        ev
        async for ev in w.stream(
            cluster.core.list_namespaced_config_map,
            cluster.namespace,
            resource_version="1" if False else None,
            timeout_seconds=1,
        )
    ]
    assert all(ev["type"] == "ADDED" for ev in events)


async def test_label_selector_watch_sees_transitions(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    listed = await core.list_namespaced_config_map(ns)
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        ns,
        label_selector="team=a",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )

    async def writes() -> None:
        await core.create_namespaced_config_map(
            ns, {"metadata": {"name": "t", "labels": {"team": "b"}}}
        )
        await core.patch_namespaced_config_map("t", ns, {"metadata": {"labels": {"team": "a"}}})
        await core.patch_namespaced_config_map("t", ns, {"metadata": {"labels": {"team": "c"}}})

    task = asyncio.create_task(writes())
    events = await collect(stream, 2)
    await task
    w.stop()
    assert events == [("ADDED", "t"), ("DELETED", "t")]


async def test_field_selector_watch(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    listed = await core.list_namespaced_config_map(ns)
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        ns,
        field_selector="metadata.name=only",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    )

    async def writes() -> None:
        await core.create_namespaced_config_map(ns, {"metadata": {"name": "other"}})
        await core.create_namespaced_config_map(ns, {"metadata": {"name": "only"}})

    task = asyncio.create_task(writes())
    events = await collect(stream, 1)
    await task
    w.stop()
    assert events == [("ADDED", "only")]


async def test_bookmarks_with_send_initial_events(cluster: Cluster) -> None:
    core = cluster.core
    ns = cluster.namespace
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "init"}})
    _status, text = await raw(
        cluster,
        "GET",
        f"/api/v1/namespaces/{ns}/configmaps",
        query=[
            ("watch", "true"),
            ("sendInitialEvents", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("timeoutSeconds", "1"),
        ],
    )
    lines = [
        json.loads(line)
        for line in (text if isinstance(text, str) else json.dumps(text)).splitlines()
        if line
    ]
    types = [e["type"] for e in lines]
    assert types[0] == "ADDED" and "BOOKMARK" in types
    mark = next(e for e in lines if e["type"] == "BOOKMARK")
    assert mark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"


async def test_too_old_resource_version_is_410(cluster: Cluster) -> None:
    server = cluster.local()
    core = cluster.core
    ns = cluster.namespace
    listed = await core.list_namespaced_config_map(ns)
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "c1"}})
    server.storage.store.compact()
    w = watch.Watch()
    with pytest.raises(client.ApiException) as err:
        async for _ in w.stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=2,
        ):
            pass
    assert err.value.status == 410


# --- validation and extension -------------------------------------------------------------------


async def test_invalid_name_is_422(cluster: Cluster) -> None:
    with pytest.raises(client.ApiException) as err:
        await cluster.core.create_namespaced_config_map(
            cluster.namespace, {"metadata": {"name": "Bad_Name"}}
        )
    assert err.value.status == 422
    assert body(err.value)["details"]["causes"][0]["field"] == "metadata.name"


async def established(ext: Any, name: str) -> None:
    """Until the CRD is Established: kube-apiserver serves its resource only from then on."""
    stream = watch.Watch()
    async with asyncio.timeout(30):
        async for event in stream.stream(
            ext.list_custom_resource_definition, field_selector=f"metadata.name={name}"
        ):
            conds = event["object"].status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                stream.stop()
                return


async def test_crd_post_makes_a_new_resource_served(cluster: Cluster) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wd"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "size": {"type": "integer", "minimum": 1, "default": 3}
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    ext: Any = client.ApiextensionsV1Api(cluster.api)
    await ext.create_custom_resource_definition(crd)
    await established(ext, "widgets.example.com")
    co = cluster.custom
    created = await co.create_namespaced_custom_object(
        "example.com",
        "v1",
        cluster.namespace,
        "widgets",
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}},
    )
    assert created["spec"]["size"] == 3
    with pytest.raises(client.ApiException) as err:
        await co.create_namespaced_custom_object(
            "example.com",
            "v1",
            cluster.namespace,
            "widgets",
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w2"},
                "spec": {"size": 0},
            },
        )
    assert err.value.status == 422
    assert body(err.value)["details"]["causes"][0]["field"] == "spec.size"
    if cluster.server is not None:
        await client.ApiextensionsV1Api(cluster.api).delete_custom_resource_definition(
            "widgets.example.com"
        )


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"trainer": {"numNodes": -1}}, "spec.trainer.numNodes", "greater than or equal to 0"),
        (
            {"trainer": {"numProcPerNode": 0}},
            "spec.trainer.numProcPerNode",
            "numProcPerNode must be greater than or equal to 1",
        ),
        ({"managedBy": "x.io/y"}, "spec.managedBy", "ManagedBy must be"),
        (
            {"initializer": {"dataset": {"storageUri": "invalid-uri"}}},
            "spec.initializer.dataset.storageUri",
            "storageUri may be empty",
        ),
    ],
)
async def test_trainjob_crd_rules_answer_422_with_upstream_messages(
    cluster: Cluster, spec: dict[str, Any], field: str, message: str
) -> None:
    await install_crds(cluster.api)
    with pytest.raises(client.ApiException) as err:
        await cluster.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            "trainjobs",
            builders.trainjob("bad", namespace=None, **spec),
        )
    assert err.value.status == 422
    causes = body(err.value)["details"]["causes"]
    assert any(c["field"] == field and message in c["message"] for c in causes), causes


async def test_immutable_trainjob_fields(cluster: Cluster) -> None:
    await create_tj(cluster, "imm", trainer={"numNodes": 2})
    with pytest.raises(client.ApiException) as err:
        await cluster.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            "trainjobs",
            "imm",
            {"spec": {"trainer": {"numNodes": 3}}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422
    assert "field is immutable" in body(err.value)["message"]


async def test_runtime_with_two_policies_is_422(cluster: Cluster) -> None:
    await install_crds(cluster.api)
    runtime = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "two-policies"},
        "spec": {
            "mlPolicy": {"torch": {}, "mpi": {}},
            "template": {"spec": {"replicatedJobs": []}},
        },
    }
    with pytest.raises(client.ApiException) as err:
        await cluster.custom.create_cluster_custom_object(
            GROUP, VERSION, "clustertrainingruntimes", runtime
        )
    assert err.value.status == 422
    assert "Only one of the policy can be configured" in body(err.value)["message"]


async def test_unknown_fields_are_rejected_with_strict_field_validation(cluster: Cluster) -> None:
    await install_crds(cluster.api)
    status, err = await raw(
        cluster,
        "POST",
        f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.namespace}/trainjobs",
        builders.trainjob("unknown", namespace=None, trainer={"numNode": 2}),
        query=[("fieldValidation", "Strict")],
    )
    assert status == 400
    assert 'unknown field "spec.trainer.numNode"' in err["message"]
    status, pruned = await raw(
        cluster,
        "POST",
        f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.namespace}/trainjobs",
        builders.trainjob("pruned", namespace=None, trainer={"numNode": 2}),
        query=[("fieldValidation", "Ignore")],
    )
    assert status == 201 and pruned["spec"]["trainer"] == {}


# --- test hooks ---------------------------------------------------------------------------------


async def test_fault_injection_and_request_log(cluster: Cluster) -> None:
    from trainer.local.apiserver.hooks import Fault  # noqa: PLC0415

    server = cluster.local()
    server.storage.hooks.inject(Fault("create", "configmaps", 500, nth=2))
    core = cluster.core
    await core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "f1"}})
    with pytest.raises(client.ApiException) as err:
        await core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "f2"}})
    assert err.value.status == 500
    with pytest.raises(client.ApiException):
        await core.read_namespaced_config_map("f2", cluster.namespace)  # state unchanged
    await core.create_namespaced_config_map(cluster.namespace, {"metadata": {"name": "f2"}})
    creates = [
        r for r in server.storage.hooks.log if r.verb == "create" and r.resource == "configmaps"
    ]
    assert [r.code for r in creates][-3:] == [201, 500, 201]


async def test_adjustable_clock(cluster: Cluster) -> None:
    server = cluster.local()
    server.storage.hooks.clock.advance(3600)
    cm = await cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"name": "late"}}
    )
    import datetime as dt  # noqa: PLC0415

    assert cm.metadata.creation_timestamp > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=50)
