"""The real webhook registered with the embedded API server: certificates stored in a Secret,
the caBundle injected into the webhook configurations, and TrainJobs and runtimes admitted or
denied over HTTPS exactly as a kube-apiserver would call the webhook."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests import builders
from trainer.api import crds
from trainer.kube.client import new_api_client
from trainer.local.apiserver import APIServer
from webhooks.run import RunningWebhook, WebhookOptions, run_webhook

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def configurations(port: int) -> list[dict[str, Any]]:
    base = f"https://127.0.0.1:{port}"

    def hook(name: str, path: str, resource: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": base + path},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "apiVersions": [VERSION],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [resource],
                }
            ],
            **extra,
        }

    skip_builtin = {
        "matchExpressions": [
            {
                "key": "trainer.kubeflow.org/webhook-validation",
                "operator": "NotIn",
                "values": ["disabled"],
            }
        ]
    }
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validator.trainer.kubeflow.org"},
            "webhooks": [
                hook(
                    "validator.trainjob.trainer.kubeflow.org",
                    "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
                    "trainjobs",
                ),
                hook(
                    "validator.clustertrainingruntime.trainer.kubeflow.org",
                    "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime",
                    "clustertrainingruntimes",
                    objectSelector=skip_builtin,
                ),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "defaulter.trainer.kubeflow.org"},
            "webhooks": [
                hook(
                    "defaulter.trainjob.trainer.kubeflow.org",
                    "/mutate-trainer-kubeflow-org-v1alpha1-trainjob",
                    "trainjobs",
                )
            ],
        },
    ]


@dataclass
class Env:
    server: APIServer
    api: Any
    webhook: RunningWebhook
    custom: Any


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    for crd in [*crds.trainer_crds(), crds.jobset_crd()]:
        server.storage.create_unadmitted("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
    server.storage.create_unadmitted("v1", "Namespace", {"metadata": {"name": "kubeflow-system"}})
    runtime = yaml.safe_load((ROOT / "runtimes/torch-distributed.yaml").read_text())
    server.storage.create_unadmitted(f"{GROUP}/{VERSION}", "ClusterTrainingRuntime", runtime)
    port = free_port()
    for config in configurations(port):
        server.storage.create_unadmitted(config["apiVersion"], config["kind"], config)
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name)
    stop = asyncio.Event()
    started: asyncio.Future[RunningWebhook] = asyncio.get_running_loop().create_future()
    with tempfile.TemporaryDirectory() as cert_dir:
        options = WebhookOptions(
            host="127.0.0.1", port=port, cert_dir=cert_dir, extra_hosts=["127.0.0.1"]
        )
        task = asyncio.create_task(run_webhook(api, options, stop, started))
        webhook = await asyncio.wait_for(started, 30)
        try:
            yield Env(server, api, webhook, client.CustomObjectsApi(api))
        finally:
            stop.set()
            await task
            await api.close()
            await server.stop()


async def test_certificates_are_stored_and_the_ca_bundle_injected(env: Env) -> None:
    secret = env.server.storage.get_object(
        "v1", "secrets", "kubeflow-system", "kubeflow-trainer-webhook-cert"
    )
    assert secret is not None
    assert {"ca.crt", "tls.crt", "tls.key"} <= set(secret["data"])
    ca = base64.b64decode(secret["data"]["ca.crt"])
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        (config,) = env.server.storage.objects("admissionregistration.k8s.io/v1", kind)
        for hook in config["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca
            assert hook["rules"][0]["resources"]  # the strategic merge kept the rest


async def test_an_invalid_trainjob_is_denied_with_403_listing_every_error(env: Env) -> None:
    bad = builders.trainjob(
        "bad", namespace=None, trainer={"env": [{"name": "PET_NNODES", "value": "2"}]}
    )
    bad["spec"]["runtimePatches"] = [{"manager": "kueue.k8s.io/"}]
    with pytest.raises(client.ApiException) as err:
        await env.custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", bad
        )
    assert err.value.status == 403
    message = json.loads(err.value.body or b"{}")["message"]
    assert message.startswith(
        'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
    )
    assert "spec.trainer.env" in message and "spec.runtimePatches[0].manager" in message


async def test_a_missing_runtime_is_denied(env: Env) -> None:
    missing = builders.trainjob("orphan", namespace=None)
    missing["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    with pytest.raises(client.ApiException) as err:
        await env.custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", missing
        )
    assert err.value.status == 403
    assert (
        "specified clusterTrainingRuntime must be created"
        in json.loads(err.value.body or b"{}")["message"]
    )


async def test_a_just_created_runtime_is_accepted_at_once(env: Env) -> None:
    runtime = yaml.safe_load((ROOT / "runtimes/jax-distributed.yaml").read_text())
    runtime["metadata"]["name"] = "brand-new"
    await env.custom.create_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", runtime
    )
    job = builders.trainjob("on-new-runtime", namespace=None)
    job["spec"]["runtimeRef"]["name"] = "brand-new"
    created = await env.custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", job
    )
    assert created["metadata"]["name"] == "on-new-runtime"


async def test_the_defaulter_stamps_runtime_patch_times(env: Env) -> None:
    job = builders.trainjob("patched", namespace=None)
    job["spec"]["runtimePatches"] = [{"manager": "example.com/team", "trainingRuntimeSpec": {}}]
    created = await env.custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", job
    )
    assert created["spec"]["runtimePatches"][0]["time"].endswith("Z")


async def test_runtime_webhook_is_skipped_for_labelled_runtimes(env: Env) -> None:
    broken = yaml.safe_load((ROOT / "runtimes/torch-distributed.yaml").read_text())
    broken["metadata"]["name"] = "two-replicas"
    broken["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    with pytest.raises(client.ApiException) as err:
        await env.custom.create_cluster_custom_object(
            GROUP, VERSION, "clustertrainingruntimes", broken
        )
    assert err.value.status == 403
    assert "always must be 1" in json.loads(err.value.body or b"{}")["message"]
    broken["metadata"]["labels"]["trainer.kubeflow.org/webhook-validation"] = "disabled"
    await env.custom.create_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", broken)


async def test_webhook_down_fails_closed(env: Env) -> None:
    # Point the validating configuration at a port nobody serves: failurePolicy Fail denies.
    config = env.server.storage.get_object(
        "admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        "",
        "validator.trainer.kubeflow.org",
    )
    assert config is not None
    for hook in config["webhooks"]:
        hook["clientConfig"]["url"] = f"https://127.0.0.1:{free_port()}/nowhere"
    admission: Any = client.AdmissionregistrationV1Api(env.api)
    await admission.replace_validating_webhook_configuration(config["metadata"]["name"], config)
    with pytest.raises(client.ApiException) as err:
        await env.custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", builders.trainjob("x", namespace=None)
        )
    assert err.value.status == 500
    assert (
        'failed calling webhook "validator.trainjob.trainer.kubeflow.org"'
        in json.loads(err.value.body or b"{}")["message"]
    )
