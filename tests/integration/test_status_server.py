"""The TrainJobStatus feature on the local control plane: the controller builds the
tls-config ConfigMap and the token volume, the status server authenticates a real
TokenRequest token with a real TokenReview, applies trainerStatus as ``trainer-status``,
controller status writes keep it, and a second post replaces it."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane
from trainer.jobset import contract as jsc
from trainer.kube import resources as r

NS, NAME = "default", "reporter"
AUD = f"trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{NAME}/status"


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    p = await start_local_plane(
        work_dir=tmp_path, state_dir=tmp_path / "state", feature_gates={"TrainJobStatus": True}
    )
    try:
        yield p
    finally:
        await p.close()


async def until(plane: LocalPlane, check: Any, timeout: float = 60.0) -> Any:
    changed = asyncio.Event()
    hook = lambda _ev: changed.set()  # noqa: E731
    plane.server.storage.store.subscribe(hook)
    try:
        async with asyncio.timeout(timeout):
            while not (result := check()):
                changed.clear()
                await changed.wait()
            return result
    finally:
        plane.server.storage.store.unsubscribe(hook)


def trainjob(plane: LocalPlane) -> dict[str, Any]:
    return plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, NS, NAME) or {}


async def service_account_token(plane: LocalPlane, namespace: str, audience: str) -> str:
    if plane.server.storage.get_object("v1", "namespaces", "", namespace) is None:
        await plane.kube.request(
            "create", "namespaces", "POST", "/api/v1/namespaces",
            body={"metadata": {"name": namespace}},
        )  # fmt: skip
    answer = await plane.kube.request(
        "create",
        "serviceaccounts/token",
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token",
        body={"spec": {"audiences": [audience], "expirationSeconds": 600}},
    )
    return str(answer["status"]["token"])


async def post(url: str, ca: str, token: str, body: dict[str, Any]) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cadata=ca)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, data=json.dumps(body), headers={"Authorization": f"Bearer {token}"}, ssl=ctx
        ) as resp,
    ):
        return resp.status, await resp.json()


def status(progress: int, metrics: dict[str, str], eta: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "progressPercentage": progress,
        "metrics": [{"name": k, "value": v} for k, v in metrics.items()],
        "lastUpdatedTime": "2026-01-01T00:00:00Z",
    }
    if eta is not None:
        out["estimatedRemainingSeconds"] = eta
    return out


async def test_progress_is_applied_kept_by_the_controller_and_replaced(
    plane: LocalPlane,
) -> None:
    await plane.kube.create(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND_TRAINJOB,
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {
                "runtimeRef": {"name": "torch-local-cpu"},
                "suspend": True,
                "trainer": {"command": ["python", "-c", "print('trained')"]},
            },
        }
    )
    tls = await until(
        plane, lambda: plane.server.storage.get_object("v1", "configmaps", NS, f"{NAME}-tls-config")
    )
    secret = plane.server.storage.get_object(
        "v1", "secrets", "kubeflow-system", "kubeflow-trainer-webhook-cert"
    )
    assert secret is not None
    ca = tls["data"]["ca.crt"]
    assert tls["metadata"]["ownerReferences"][0]["name"] == NAME
    jobset = await until(
        plane, lambda: plane.server.storage.get_object(jsc.API_VERSION, "jobsets", NS, NAME)
    )
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    url = env["KUBEFLOW_TRAINER_SERVER_URL"]
    port = plane.controller_state.status_server_port
    assert (
        url
        == f"https://127.0.0.1:{port}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{NAME}/status"
    )

    token = await service_account_token(plane, NS, AUD)
    first = {"trainerStatus": status(30, {"loss": "0.9", "accuracy": "0.4"}, eta=120)}
    assert await post(url, ca, token, first) == (200, first)
    job = await until(
        plane,
        lambda: (trainjob(plane).get("status") or {}).get("trainerStatus") and trainjob(plane),
    )
    assert job["status"]["trainerStatus"] == first["trainerStatus"]
    entries = [m for m in job["metadata"]["managedFields"] if m["manager"] == "trainer-status"]
    assert [(m["operation"], m.get("subresource")) for m in entries] == [("Apply", "status")]

    # Someone else's token (another namespace, this job's audience): forbidden by namespace.
    stranger = await service_account_token(plane, "elsewhere", AUD)
    code, answer = await post(url, ca, stranger, first)
    assert (code, answer["message"]) == (403, "Forbidden")
    # This namespace's token for another TrainJob's endpoint: the audience does not match.
    other_aud = await service_account_token(plane, NS, AUD.replace(NAME, "other"))
    assert (await post(url, ca, other_aud, first))[0] == 403

    # The controller writes status (resumed, running, complete); trainerStatus stays.
    await plane.kube.patch(
        r.TRAINJOBS,
        NS,
        NAME,
        {"spec": {"suspend": False}},
    )
    done = await until(
        plane,
        lambda: (
            (trainjob(plane).get("status") or {}).get("state") == "Complete" and trainjob(plane)
        ),
    )
    types = {cond["type"]: cond["status"] for cond in done["status"]["conditions"]}
    assert types["Suspended"] == "False" and types["Complete"] == "True"
    assert done["status"]["trainerStatus"] == first["trainerStatus"]

    # A second post replaces: no merged metrics, the unset ETA is gone.
    second = {"trainerStatus": status(100, {"loss": "0.1"})}
    assert await post(url, ca, token, second) == (200, second)
    replaced = await until(
        plane,
        lambda: (
            (trainjob(plane)["status"]["trainerStatus"].get("progressPercentage") == 100)
            and trainjob(plane)
        ),
    )
    assert replaced["status"]["trainerStatus"] == second["trainerStatus"]
