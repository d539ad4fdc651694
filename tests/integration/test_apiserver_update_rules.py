"""kube-apiserver's rules on every update, over HTTP: the code and Status body a client sees.

- An update (PUT) of a custom resource without ``metadata.resourceVersion`` is refused (custom
  resources do not allow unconditional updates); built-in kinds such as ConfigMaps accept it.
- ``metadata.uid`` may be left out of an update but not changed.
- An ``immutable: true`` ConfigMap or Secret keeps its data and stays immutable; a Secret
  keeps its type.
- Owner references need apiVersion, kind, name and uid.
- A custom resource gaining a finalizer without a ``domain/`` path gets a warning, as a
  header kubectl prints.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from tests.integration.harness import local_plane

TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
SECRETS = "/api/v1/namespaces/default/secrets"
FINALIZER_ADVICE = (
    "prefer a domain-qualified finalizer name including a path (/) to avoid accidental "
    "conflicts with other finalizer writers"
)


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    warnings: list[str]


@dataclass
class Api:
    url: str
    headers: dict[str, str]
    http: aiohttp.ClientSession

    async def call(self, method: str, path: str, body: Any = None, patch: bool = False) -> Reply:
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = (
                "application/merge-patch+json" if patch else "application/json"
            )
        async with self.http.request(
            method,
            self.url + path,
            data=None if body is None else json.dumps(body),
            headers=headers,
        ) as resp:
            return Reply(resp.status, await resp.json(), resp.headers.getall("Warning", []))


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with local_plane(runtimes=False) as plane:
        connector = aiohttp.TCPConnector(ssl=plane.server.client_ssl_context())
        async with aiohttp.ClientSession(connector=connector) as http:
            yield Api(plane.server.url, plane.server.auth_headers(), http)


def trainjob(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, **meta},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }


def cause(reply: Reply) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in reply.body["details"]["causes"]]


async def test_a_custom_resource_update_needs_a_resource_version(api: Api) -> None:
    created = await api.call("POST", TRAINJOBS, trainjob("job"))
    assert created.status == 201
    body = trainjob("job")
    body["spec"]["suspend"] = True
    refused = await api.call("PUT", f"{TRAINJOBS}/job", body)
    assert refused.status == 422
    assert refused.body["reason"] == "Invalid"
    assert refused.body["message"] == (
        'trainjobs.trainer.kubeflow.org "job" is invalid: metadata.resourceVersion: '
        "Invalid value: 0x0: must be specified for an update"
    )
    assert refused.body["details"]["kind"] == "trainjobs"
    assert cause(refused) == [
        (
            "FieldValueInvalid",
            "metadata.resourceVersion",
            "Invalid value: 0x0: must be specified for an update",
        )
    ]
    refused_status = await api.call("PUT", f"{TRAINJOBS}/job/status", body)
    assert refused_status.status == 422
    body["metadata"]["resourceVersion"] = created.body["metadata"]["resourceVersion"]
    updated = await api.call("PUT", f"{TRAINJOBS}/job", body)
    assert updated.status == 200 and updated.body["spec"]["suspend"] is True


async def test_a_configmap_update_without_resource_version_is_unconditional(api: Api) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}}
    assert (await api.call("POST", CONFIGMAPS, cm)).status == 201
    cm["data"] = {"a": "2"}
    updated = await api.call("PUT", f"{CONFIGMAPS}/cm", cm)
    assert updated.status == 200 and updated.body["data"] == {"a": "2"}


async def test_the_uid_cannot_change(api: Api) -> None:
    created = await api.call("POST", TRAINJOBS, trainjob("job"))
    uid = created.body["metadata"]["uid"]
    body = created.body
    body["metadata"]["uid"] = "another-uid"
    refused = await api.call("PUT", f"{TRAINJOBS}/job", body)
    assert refused.status == 422
    assert refused.body["message"] == (
        'TrainJob.trainer.kubeflow.org "job" is invalid: metadata.uid: Invalid value: '
        '"another-uid": field is immutable'
    )
    patched = await api.call("PATCH", f"{TRAINJOBS}/job", {"metadata": {"uid": "x"}}, patch=True)
    assert patched.status == 422
    assert cause(patched) == [
        ("FieldValueInvalid", "metadata.uid", 'Invalid value: "x": field is immutable')
    ]
    del body["metadata"]["uid"]  # left out: the stored one is kept
    kept = await api.call("PUT", f"{TRAINJOBS}/job", body)
    assert kept.status == 200 and kept.body["metadata"]["uid"] == uid


async def test_an_immutable_configmap_keeps_its_data(api: Api) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "frozen"},
        "data": {"a": "1"},
        "immutable": True,
    }
    assert (await api.call("POST", CONFIGMAPS, cm)).status == 201
    changed = await api.call("PATCH", f"{CONFIGMAPS}/frozen", {"data": {"a": "2"}}, patch=True)
    assert changed.status == 422
    assert changed.body["message"] == (
        'ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    thawed = await api.call("PATCH", f"{CONFIGMAPS}/frozen", {"immutable": False}, patch=True)
    assert thawed.status == 422
    assert cause(thawed) == [
        (
            "FieldValueForbidden",
            "immutable",
            "Forbidden: field is immutable when `immutable` is set",
        )
    ]
    binary = await api.call(
        "PATCH", f"{CONFIGMAPS}/frozen", {"binaryData": {"b": "AA=="}}, patch=True
    )
    assert binary.status == 422 and cause(binary)[0][1] == "binaryData"
    labelled = await api.call(
        "PATCH", f"{CONFIGMAPS}/frozen", {"metadata": {"labels": {"x": "y"}}}, patch=True
    )
    assert labelled.status == 200  # metadata stays writable


async def test_an_immutable_secret_keeps_its_data_and_a_secret_its_type(api: Api) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "frozen"},
        "stringData": {"a": "1"},
        "immutable": True,
    }
    assert (await api.call("POST", SECRETS, secret)).status == 201
    changed = await api.call("PATCH", f"{SECRETS}/frozen", {"stringData": {"a": "2"}}, patch=True)
    assert changed.status == 422
    assert changed.body["message"] == (
        'Secret "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    same = await api.call("PATCH", f"{SECRETS}/frozen", {"stringData": {"a": "1"}}, patch=True)
    assert same.status == 200
    retyped = await api.call(
        "PATCH", f"{SECRETS}/frozen", {"type": "kubernetes.io/tls"}, patch=True
    )
    assert retyped.status == 422
    assert retyped.body["message"] == (
        'Secret "frozen" is invalid: type: Invalid value: "kubernetes.io/tls": field is immutable'
    )


@pytest.mark.parametrize(
    ("ref", "field", "message"),
    [
        ({"uid": ""}, "metadata.ownerReferences.uid", 'Invalid value: "": uid must not be empty'),
        (
            {"name": ""},
            "metadata.ownerReferences.name",
            'Invalid value: "": name must not be empty',
        ),
        (
            {"kind": ""},
            "metadata.ownerReferences.kind",
            'Invalid value: "": kind must not be empty',
        ),
        (
            {"apiVersion": ""},
            "metadata.ownerReferences.apiVersion",
            'Invalid value: "": version must not be empty',
        ),
    ],
)
async def test_owner_references_need_every_identifying_field(
    api: Api, ref: dict[str, str], field: str, message: str
) -> None:
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1", **ref}
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "ownerReferences": [owner]},
    }
    refused = await api.call("POST", CONFIGMAPS, cm)
    assert refused.status == 422
    assert cause(refused) == [("FieldValueInvalid", field, message)]
    job = await api.call("POST", TRAINJOBS, trainjob("job", ownerReferences=[owner]))
    assert job.status == 422
    assert cause(job) == [("FieldValueInvalid", field, message)]


async def test_a_finalizer_without_a_domain_path_is_warned_about(api: Api) -> None:
    created = await api.call(
        "POST", TRAINJOBS, trainjob("job", finalizers=["example.com/ok", "cleanup", "orphan"])
    )
    assert created.status == 201
    assert created.warnings == [f'299 - "metadata.finalizers: \\"cleanup\\": {FINALIZER_ADVICE}"']
    again = await api.call(
        "PATCH",
        f"{TRAINJOBS}/job",
        {"metadata": {"finalizers": ["example.com/ok", "cleanup", "orphan", "more"]}},
        patch=True,
    )
    assert again.status == 200
    # only the finalizer the write adds
    assert again.warnings == [f'299 - "metadata.finalizers: \\"more\\": {FINALIZER_ADVICE}"']


async def test_exact_duplicate_owner_references_are_dropped_with_a_warning(api: Api) -> None:
    existing = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}
    uid = (await api.call("POST", CONFIGMAPS, existing)).body["metadata"]["uid"]
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    controller = {**owner, "controller": True}
    meta = {"name": "cm", "ownerReferences": [controller, owner, controller]}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    created = await api.call("POST", CONFIGMAPS, cm)
    assert created.status == 201, created.body
    assert created.body["metadata"]["ownerReferences"] == [controller, owner]
    assert created.warnings == [
        '299 - ".metadata.ownerReferences contains duplicate entries; API server dedups owner '
        "references in 1.20+, and may reject such requests as early as 1.24; please fix your "
        f'requests. Duplicate UID: \\"{uid}\\""'
    ]
    patched = await api.call(
        "PATCH", f"{CONFIGMAPS}/cm", {"metadata": {"ownerReferences": [owner, owner]}}, patch=True
    )
    assert patched.status == 200
    assert patched.body["metadata"]["ownerReferences"] == [owner]
    assert len(patched.warnings) == 1
