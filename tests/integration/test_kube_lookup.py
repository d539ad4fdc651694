"""The webhook's Kubernetes-backed lookup, against the embedded API server."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.api import crds
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.kube.client import new_api_client
from trainer.local.apiserver import APIServer
from webhooks.kubelookup import KubeLookup

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def lookup() -> AsyncIterator[tuple[APIServer, KubeLookup]]:
    server = APIServer()
    await server.start()
    for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    try:
        yield server, KubeLookup(api)
    finally:
        await api.close()
        await server.stop()


def runtime_doc(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "runtimes/torch-distributed.yaml").read_text())
    doc["kind"] = kind
    doc["metadata"] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return doc


async def test_a_just_created_runtime_is_found_without_a_cache(
    lookup: tuple[APIServer, KubeLookup],
) -> None:
    server, kube = lookup
    server.storage.create_unadmitted(
        "trainer.kubeflow.org/v1alpha1",
        "ClusterTrainingRuntime",
        runtime_doc("ClusterTrainingRuntime", "fresh"),
    )
    runtime, problem = await kube.runtime("ClusterTrainingRuntime", "default", "fresh")
    assert isinstance(runtime, ClusterTrainingRuntime) and problem is None
    server.storage.create_unadmitted(
        "trainer.kubeflow.org/v1alpha1",
        "TrainingRuntime",
        runtime_doc("TrainingRuntime", "mine", "default"),
    )
    namespaced, _ = await kube.runtime("TrainingRuntime", "default", "mine")
    assert isinstance(namespaced, TrainingRuntime)


async def test_missing_objects(lookup: tuple[APIServer, KubeLookup]) -> None:
    _, kube = lookup
    runtime, problem = await kube.runtime("ClusterTrainingRuntime", "default", "absent")
    assert runtime is None
    assert problem == 'ClusterTrainingRuntime.trainer.kubeflow.org "absent" not found'
    assert await kube.jobset("default", "absent") is None
    assert await kube.priority_classes() == frozenset()


async def test_cache_is_consulted_first(lookup: tuple[APIServer, KubeLookup]) -> None:
    server, kube = lookup
    cached = runtime_doc("ClusterTrainingRuntime", "cached-only")
    kube.cache = lambda kind, ns, name: cached if name == "cached-only" else None
    runtime, _ = await kube.runtime("ClusterTrainingRuntime", "", "cached-only")
    assert runtime is not None  # served from the cache, although the API has no such object
    server.storage.create_unadmitted(
        "scheduling.k8s.io/v1", "PriorityClass", {"metadata": {"name": "high"}, "value": 1000}
    )
    assert await kube.priority_classes() == frozenset({"high"})


async def test_a_runtime_is_parsed_again_only_when_it_changes(
    lookup: tuple[APIServer, KubeLookup],
) -> None:
    _, kube = lookup
    doc = runtime_doc("ClusterTrainingRuntime", "steady")
    doc["metadata"].update(uid="u-1", resourceVersion="10")
    kube.cache = lambda kind, ns, name: doc if name == "steady" else None
    first, _ = await kube.runtime("ClusterTrainingRuntime", "", "steady")
    again, _ = await kube.runtime("ClusterTrainingRuntime", "", "steady")
    assert first is not None and again is first

    # An update (new resourceVersion) is seen at once.
    changed = runtime_doc("ClusterTrainingRuntime", "steady")
    changed["metadata"].update(uid="u-1", resourceVersion="11")
    changed["spec"]["mlPolicy"]["numNodes"] = 7
    doc = changed
    updated, _ = await kube.runtime("ClusterTrainingRuntime", "", "steady")
    assert updated is not first
    assert updated is not None and updated.spec is not None
    assert updated.spec.ml_policy is not None and updated.spec.ml_policy.num_nodes == 7

    # So is a runtime deleted and created again under the same name (new uid).
    recreated = runtime_doc("ClusterTrainingRuntime", "steady")
    recreated["metadata"].update(uid="u-2", resourceVersion="11")
    doc = recreated
    fresh, _ = await kube.runtime("ClusterTrainingRuntime", "", "steady")
    assert fresh is not updated and fresh is not None
