"""The API server's CEL outcome memo never outlives the CRD version it was built for.

A CRD is replaced with the same rule text over a field whose type changes (integer to number:
``string(self.n)`` prints ``2`` then ``2.0``), and with a changed message: the same object,
accepted before, is refused after with the new message, over HTTP.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import pytest

from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError, Kube
from trainer.local.apiserver import APIServer

WIDGETS = r.GVR("example.com", "v1", "widgets", True, "Widget")
RULE = {"rule": "string(self.n) == '2'", "message": "n must print as 2"}


def crd(field_type: str, message: str) -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "x-kubernetes-validations": [{**RULE, "message": message}],
        "properties": {"n": {"type": field_type}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec_schema},
                        }
                    },
                }
            ],
        },
    }


def widget(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"n": 2},
    }


@pytest.fixture
async def kube() -> AsyncIterator[tuple[APIServer, Kube]]:
    srv = APIServer()
    await srv.start()
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        srv.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    try:
        yield srv, Kube(api, timeout=10.0)
    finally:
        await api.close()
        await srv.stop()


async def test_a_replaced_crd_is_validated_with_its_new_schema(
    kube: tuple[APIServer, Kube],
) -> None:
    srv, client = kube
    srv.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", crd("integer", "m1")
    )
    for name in ("a", "b"):  # the second is answered from the memo
        created = await client.create(widget(name), gvr=WIDGETS)
        assert created["spec"] == {"n": 2}
    current = await client.get(r.CRDS, None, "widgets.example.com")
    assert current is not None
    replaced = copy.deepcopy(current)
    replaced["spec"] = crd("number", "n must print as 2 (v2)")["spec"]
    await client.replace(replaced, gvr=r.CRDS)
    with pytest.raises(APIError) as refused:
        await client.create(widget("c"), gvr=WIDGETS)
    assert refused.value.status == 422
    assert "spec: Invalid value" in refused.value.message
    assert "n must print as 2 (v2)" in refused.value.message
