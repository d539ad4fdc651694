"""Unknown fields in a runtime's pod template, through the API as a client library sends them
(no ``fieldValidation`` unless asked), expecting what kube-apiserver answers with our CRDs:
``Strict`` rejects with the field's path, ``Warn`` (the server's default) and ``Ignore`` prune,
``Warn`` with a ``Warning`` header naming the path. Also runs against a real cluster."""

from __future__ import annotations

import json
import uuid
from typing import Any

from kubernetes_asyncio import client

from tests.conformance.cluster import Cluster, cluster_fixture, install_crds

__all__ = ["cluster_fixture"]  # the `cluster` fixture

PATH = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
POD_SPEC = "spec.template.spec.replicatedJobs[0].template.spec.template.spec"


def misspelt_runtime(name: str) -> dict[str, Any]:
    container = {"name": "node", "image": "python:3.12", "imagePullPolicyy": "Always"}
    pod = {"template": {"spec": {"containers": [container], "restartPolicyy": "Never"}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": pod}}]}},
        },
    }


async def create(c: Cluster, obj: dict[str, Any], validation: str | None) -> tuple[int, Any, str]:
    """POST the object: (status, decoded body, the Warning headers joined, or "")."""
    query = [("fieldValidation", validation)] if validation else []
    try:
        resp = await c.api.call_api(
            PATH,
            "POST",
            query_params=query,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=obj,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        # One Warning header per warning, as kube-apiserver sends them.
        warnings = ", ".join(resp.headers.getall("Warning", []))
        return resp.status, json.loads(await resp.read()), warnings
    except client.ApiException as exc:
        return exc.status, json.loads(exc.body or b"{}"), ""


async def delete(c: Cluster, name: str) -> None:
    await c.custom.delete_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", name
    )


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]
    return spec


async def test_strict_rejects_a_misspelt_pod_spec_field_naming_its_path(cluster: Cluster) -> None:
    await install_crds(cluster.api)
    name = f"strict-{uuid.uuid4().hex[:6]}"
    status, err, _ = await create(cluster, misspelt_runtime(name), "Strict")
    assert status == 400
    assert err["reason"] == "BadRequest"
    assert f'unknown field "{POD_SPEC}.containers[0].imagePullPolicyy"' in err["message"]
    assert f'unknown field "{POD_SPEC}.restartPolicyy"' in err["message"]


async def test_by_default_unknown_fields_are_pruned_with_a_warning(cluster: Cluster) -> None:
    await install_crds(cluster.api)
    for validation in (None, "Warn", "Ignore"):
        name = f"lenient-{uuid.uuid4().hex[:6]}"
        status, stored, warning = await create(cluster, misspelt_runtime(name), validation)
        assert status == 201, stored
        try:
            spec = pod_spec(stored)
            assert "restartPolicyy" not in spec
            assert spec["containers"] == [{"name": "node", "image": "python:3.12"}]
            if validation == "Ignore":
                assert warning == ""
            else:
                field = f"{POD_SPEC}.containers[0].imagePullPolicyy"
                assert f'299 - "unknown field \\"{field}\\""' in warning
        finally:
            await delete(cluster, name)


async def test_warnings_about_odd_field_names_still_reach_the_client(cluster: Cluster) -> None:
    """A warning text with a control character (a field named ``a\\nb``) is not sent, as
    kube-apiserver sends none it cannot quote (NewWarningHeader); the others are, and the write
    succeeds instead of the connection dropping."""
    await install_crds(cluster.api)
    name = f"odd-{uuid.uuid4().hex[:6]}"
    obj = misspelt_runtime(name)
    obj["spec"]["a\nb"] = 1
    obj["spec"]["é"] = 2
    status, stored, warning = await create(cluster, obj, "Warn")
    assert status == 201, stored
    try:
        assert 'unknown field \\"spec.é\\"' in warning
        assert "spec.a" not in warning
        assert "a\nb" not in stored["spec"] and "é" not in stored["spec"]
    finally:
        await delete(cluster, name)
