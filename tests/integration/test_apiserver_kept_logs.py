"""The logs of a JobSet's deleted pods, kept by the local API server until the JobSet goes
(docs/local-plane.md, "Logs of deleted pods"): served with ``deletedPod=true`` to whoever may
read ``pods/log`` in that namespace, and to no one else."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from trainer.api import crds
from trainer.local.apiserver import APIServer

JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
PODS = "/api/v1/namespaces/{ns}/pods"
RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"


@dataclass
class Env:
    server: APIServer
    http: aiohttp.ClientSession

    async def call(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token or self.server.token}"}
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            headers["Content-Type"] = (
                "application/octet-stream" if isinstance(body, str) else "application/json"
            )
        async with self.http.request(
            method, self.server.url + path, data=data, headers=headers
        ) as resp:
            raw = await resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw.decode()

    async def pod(self, ns: str, name: str, jobset: str | None, log: str) -> None:
        labels = {"jobset.sigs.k8s.io/jobset-name": jobset} if jobset else {}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "node", "image": "x", "command": ["false"]}]},
        }
        assert (await self.call("POST", PODS.format(ns=ns), body))[0] == 201
        path = f"{PODS.format(ns=ns)}/{name}/log?container=node&restartCount=0"
        assert (await self.call("POST", path, log))[0] == 201

    async def delete_pod(self, ns: str, name: str) -> None:
        status, _ = await self.call("DELETE", f"{PODS.format(ns=ns)}/{name}?gracePeriodSeconds=0")
        assert status == 200
        assert self.server.storage.get_object("v1", "pods", ns, name) is None

    async def kept_log(self, ns: str, name: str, token: str | None = None) -> tuple[int, Any]:
        path = f"{PODS.format(ns=ns)}/{name}/log?container=node&deletedPod=true"
        return await self.call("GET", path, token=token)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", crds.jobset_crd()
    )
    for ns in ("default", "team-b"):
        if ns != "default":
            server.storage.create_unadmitted("v1", "Namespace", {"metadata": {"name": ns}})
        server.storage.create_unadmitted(
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"metadata": {"name": "train", "namespace": ns}, "spec": {"replicatedJobs": []}},
        )
    connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
    try:
        async with aiohttp.ClientSession(connector=connector) as http:
            yield Env(server, http)
    finally:
        await server.stop()


async def test_a_deleted_pods_log_is_kept_until_its_jobset_is_deleted(env: Env) -> None:
    await env.pod("default", "train-node-0-0-abcde", "train", "Traceback\nFileNotFoundError\n")
    await env.pod("default", "loose", None, "not kept\n")
    await env.delete_pod("default", "train-node-0-0-abcde")
    await env.delete_pod("default", "loose")
    # As on a cluster, the pod and its log are gone for kubectl logs ...
    status, answer = await env.call("GET", f"{PODS.format(ns='default')}/train-node-0-0-abcde/log")
    assert status == 404 and answer["reason"] == "NotFound"
    # ... but the log of a pod of a JobSet that stays is kept.
    assert await env.kept_log("default", "train-node-0-0-abcde") == (
        200,
        "Traceback\nFileNotFoundError\n",
    )
    status, answer = await env.kept_log("default", "loose")  # a pod of no JobSet: gone
    assert status == 404 and "no kept log" in answer["message"]
    # Not across namespaces: team-b has a JobSet of the same name but not that pod.
    assert (await env.kept_log("team-b", "train-node-0-0-abcde"))[0] == 404
    # A new pod of that name has its own log.
    await env.pod("default", "train-node-0-0-abcde", "train", "second pod\n")
    assert (await env.kept_log("default", "train-node-0-0-abcde"))[0] == 404
    await env.delete_pod("default", "train-node-0-0-abcde")
    assert await env.kept_log("default", "train-node-0-0-abcde") == (200, "second pod\n")
    # Deleting the JobSet (what deleting its TrainJob does) removes them.
    status, _ = await env.call("DELETE", f"{JOBSETS.format(ns='default')}/train")
    assert status == 200
    assert (await env.kept_log("default", "train-node-0-0-abcde"))[0] == 404


async def test_a_kept_log_needs_the_right_to_read_pod_logs_in_its_namespace(env: Env) -> None:
    await env.pod("team-b", "secret-run", "train", "API_KEY=hunter2\n")
    await env.delete_pod("team-b", "secret-run")
    status, answer = await env.call(
        "POST",
        f"{PODS.format(ns='default').replace('/pods', '/serviceaccounts')}/default/token",
        {"spec": {"expirationSeconds": 600}},
    )
    assert status == 201, answer
    token = answer["status"]["token"]
    status, answer = await env.kept_log("team-b", "secret-run", token)
    assert status == 403 and "hunter2" not in json.dumps(answer)
    assert 'cannot get resource "pods/log"' in answer["message"]
    # Granted in its own namespace only: still nothing from team-b.
    role = {
        "metadata": {"name": "logs"},
        "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}],
    }
    binding = {
        "metadata": {"name": "logs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "logs"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
    }
    assert (await env.call("POST", RBAC.format(ns="default") + "/roles", role))[0] == 201
    assert (await env.call("POST", RBAC.format(ns="default") + "/rolebindings", binding))[0] == 201
    assert (await env.kept_log("team-b", "secret-run", token))[0] == 403
    assert (await env.call("POST", RBAC.format(ns="team-b") + "/roles", role))[0] == 201
    binding["metadata"] = {"name": "logs", "namespace": "team-b"}
    assert (await env.call("POST", RBAC.format(ns="team-b") + "/rolebindings", binding))[0] == 201
    assert await env.kept_log("team-b", "secret-run", token) == (200, "API_KEY=hunter2\n")
