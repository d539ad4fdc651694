"""Voluntary evictions under PodDisruptionBudgets on the local plane: the API server's
``pods/{name}/eviction`` subresource and the executor's disruption controller, as
kube-apiserver and kube-controller-manager answer them (docs/local-plane.md, "Disruption
budgets and evictions"). Pods are made Ready by hand (no kubelet runs here); the real kubectl
drains the node where it is installed (``kubectl create --raw`` sends no Content-Type, which
this server refuses: docs/local-plane.md, "Content types"). Waits are on API writes
(Store.subscribe), never sleeps."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import Plane, local_plane
from tests.integration.kubeconfig_client import session_from_kubeconfig
from trainer.kube import resources as r
from trainer.kube.rest import APIError
from trainer.local.apiserver.store import Event
from trainer.local.executor.api import executor_kube
from trainer.local.executor.runner import Executor

NS = "default"
KUBECTL = shutil.which("kubectl")
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="needs the kubectl binary")


@dataclass
class Env:
    plane: Plane
    kubeconfig: Path
    executor: Executor | None

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.plane.get("v1", "pods", NS, name)

    def alive(self, name: str) -> dict[str, Any] | None:
        """The pod unless it is deleted: a pod running on a node is only marked for deletion
        until its kubelet confirms (none runs here), as on a cluster."""
        pod = self.pod(name)
        return None if pod is None or pod["metadata"].get("deletionTimestamp") else pod

    def budget(self, name: str = "pdb") -> dict[str, Any]:
        found = self.plane.get("policy/v1", "poddisruptionbudgets", NS, name)
        assert found is not None
        return found

    async def kubectl(self, *args: str, stdin: str = "") -> tuple[int, str, str]:
        assert KUBECTL is not None
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(self.kubeconfig),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 60)
        return proc.returncode or 0, out.decode(), err.decode()

    def kubelet_confirms(self) -> None:
        """Play the node's kubelet for deletions: a pod marked for deletion is deleted for
        good (grace period 0) once the mark is written, as a kubelet does once the pod's
        containers stopped."""
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[bool]] = set()

        def on_write(ev: Event) -> None:
            meta = ev.obj.get("metadata") or {}
            if ev.key == ("", "pods") and ev.type == "MODIFIED" and meta.get("deletionTimestamp"):
                task = loop.create_task(
                    self.plane.kube.delete(
                        r.PODS, NS, meta["name"], None, {"uid": meta["uid"]}, grace_period_seconds=0
                    )
                )
                tasks.add(task)
                task.add_done_callback(tasks.discard)

        self.plane.server.storage.store.subscribe(on_write)

    async def evict(self, name: str, **extra: Any) -> dict[str, Any]:
        """POST an Eviction with the project's client (an APIError when refused)."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": NS},
            **extra,
        }
        return await self.plane.kube.request(
            "create", "pods/eviction", "POST", r.PODS.path(NS, name, "eviction"), body=body
        )


async def _env(with_controller: bool) -> AsyncIterator[Env]:
    async with local_plane(runtimes=False) as plane:
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = Path(tmp) / "kubeconfig"
            plane.server.write_kubeconfig(str(kubeconfig))
            plane.server.storage.create_unadmitted("v1", "Node", {"metadata": {"name": "local"}})
            if not with_controller:
                yield Env(plane, kubeconfig, None)
                return
            kube = await executor_kube(str(kubeconfig))
            executor = Executor(kube, workdir=Path(tmp), state_dir=Path(tmp), kubelet=False)
            await executor.start()
            try:
                yield Env(plane, kubeconfig, executor)
            finally:
                await executor.stop()
                await kube.api.close()


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    """The plane with the executor (its disruption controller keeps budgets' status)."""
    async for e in _env(True):
        yield e


@pytest.fixture
async def bare() -> AsyncIterator[Env]:
    """The API server alone: budgets' status is whatever the test writes."""
    async for e in _env(False):
        yield e


async def running_pod(
    env: Env,
    name: str,
    *,
    ready: bool = True,
    phase: str = "Running",
    finalizers: tuple[str, ...] = (),
    **labels: str,
) -> None:
    """A pod on the node, its status as a kubelet reports a running one."""
    meta = {"name": name, "namespace": NS, "labels": labels or {"app": "web"}}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    await env.plane.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "nodeName": "local",
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}],
            },
        },
        gvr=r.PODS,
    )
    status = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    await env.plane.kube.patch_status(r.PODS, NS, name, {"status": status})


async def make_budget(env: Env, name: str = "pdb", **spec: Any) -> None:
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    await env.plane.kube.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        },
        gvr=r.POD_DISRUPTION_BUDGETS,
    )


async def set_budget_status(env: Env, status: dict[str, Any], name: str = "pdb") -> None:
    await env.plane.kube.patch_status(r.POD_DISRUPTION_BUDGETS, NS, name, {"status": status})


async def budget_settles(
    env: Env, allowed: int, *, healthy: int | None = None, name: str = "pdb"
) -> dict[str, Any]:
    """Wait until the disruption controller says ``allowed`` (and ``healthy`` healthy pods)
    at the budget's generation."""

    def settled() -> Any:
        found = env.plane.get("policy/v1", "poddisruptionbudgets", NS, name) or {}
        status = found.get("status") or {}
        generation = found.get("metadata", {}).get("generation")
        if status.get("observedGeneration") != generation or not status.get("conditions"):
            return None
        if healthy is not None and status.get("currentHealthy") != healthy:
            return None
        return found if status.get("disruptionsAllowed") == allowed else None

    found: dict[str, Any] = await env.plane.until(settled, what=f"disruptionsAllowed {allowed}")
    return found


def refusal(err: APIError) -> tuple[int, str, Any]:
    body = err.body if isinstance(err.body, dict) else {}
    return err.status, body.get("reason", ""), body.get("details")


async def test_a_budget_of_one_lets_one_pod_go_and_refuses_the_second(env: Env) -> None:
    await running_pod(env, "a")
    await running_pod(env, "b")
    await make_budget(env, minAvailable=1)
    settled = await budget_settles(env, 1)
    assert {k: v for k, v in settled["status"].items() if k != "conditions"} == {
        "observedGeneration": 1,
        "disruptionsAllowed": 1,
        "currentHealthy": 2,
        "desiredHealthy": 1,
        "expectedPods": 2,
    }
    [condition] = settled["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "DisruptionAllowed",
        "True",
        "SufficientPods",
    )

    assert await env.evict("a") == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    assert env.alive("a") is None
    # The controller sees "a" being deleted: one healthy pod of the one needed ("a" is still
    # expected until its kubelet confirms the deletion, none runs here).
    status = (await budget_settles(env, 0, healthy=1))["status"]
    assert (status["expectedPods"], "disruptedPods" in status) == (2, False)
    assert status["conditions"][0]["reason"] == "InsufficientPods"
    with pytest.raises(APIError) as refused:
        await env.evict("b")
    assert refusal(refused.value) == (
        429,
        "TooManyRequests",
        {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget pdb needs 1 healthy pods and has 1 currently",
                }
            ]
        },
    )
    assert env.alive("b") is not None


@needs_kubectl
async def test_kubectl_drain_evicts_what_the_budget_allows(env: Env) -> None:
    await running_pod(env, "a")
    await running_pod(env, "b")
    await make_budget(env, minAvailable=1)
    await budget_settles(env, 1)
    env.kubelet_confirms()  # kubectl drain waits for an evicted pod to be gone
    code, out, err = await env.kubectl(
        "drain", "local", "--pod-selector", "app=web", "--force", "--timeout", "3s"
    )
    assert code == 1
    assert "node/local cordoned" in out
    left = [name for name in ("a", "b") if env.alive(name) is not None]
    assert len(left) == 1
    gone = "b" if left == ["a"] else "a"
    assert f"pod/{gone} evicted" in out
    assert (
        f'error when evicting pods/"{left[0]}" -n "{NS}" (will retry after 5s): {VIOLATES}' in err
    )


async def test_the_api_server_spends_the_budget_in_one_status_write(bare: Env) -> None:
    """Without a disruption controller the first eviction stays counted in the budget:
    ``disruptionsAllowed`` 0, the pod in ``disruptedPods``, and the second is refused on the
    figures the budget still has."""
    await running_pod(bare, "a")
    await running_pod(bare, "b")
    await make_budget(bare, minAvailable=1)
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": 1,
        "currentHealthy": 2,
        "desiredHealthy": 1,
        "expectedPods": 2,
    }
    await set_budget_status(bare, status)
    assert await bare.evict("a") == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    assert bare.alive("a") is None
    spent = bare.budget()["status"]
    assert spent["disruptionsAllowed"] == 0
    assert list(spent["disruptedPods"]) == ["a"]
    [condition] = spent["conditions"]
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "False",
        "InsufficientPods",
        1,
    )
    with pytest.raises(APIError) as refused:
        await bare.evict("b")
    assert refusal(refused.value)[2] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget pdb needs 1 healthy pods and has 2 currently",
            }
        ]
    }
    # No Retry-After: client-go leaves the retry to its caller (kubectl drain waits 5 s).
    async with session_from_kubeconfig(bare.kubeconfig) as session:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b"}}
        async with session.post(r.PODS.path(NS, "b", "eviction"), json=body) as resp:
            assert resp.status == 429
            assert "Retry-After" not in resp.headers


async def test_evictions_the_budget_does_not_decide(bare: Env) -> None:
    await running_pod(bare, "free", app="other")
    await running_pod(bare, "pending", phase="Pending")
    await running_pod(bare, "done", phase="Succeeded")
    await make_budget(bare, minAvailable=5, selector={})
    await set_budget_status(bare, {"observedGeneration": 1, "disruptionsAllowed": 0})
    with pytest.raises(APIError) as refused:
        await bare.evict("free")  # the empty selector covers it
    assert refused.value.status == 429
    await bare.plane.kube.delete(r.POD_DISRUPTION_BUDGETS, NS, "pdb")
    await make_budget(bare, minAvailable=5)
    await set_budget_status(bare, {"observedGeneration": 1, "disruptionsAllowed": 0})
    for name in ("free", "pending", "done"):
        assert (await bare.evict(name))["status"] == "Success"
        assert bare.alive(name) is None
    assert bare.budget()["status"]["disruptionsAllowed"] == 0


async def test_a_pod_under_two_budgets_is_refused_with_500(bare: Env) -> None:
    await running_pod(bare, "a")
    await make_budget(bare, "one", minAvailable=0)
    await make_budget(bare, "two", maxUnavailable=1)
    with pytest.raises(APIError) as refused:
        await bare.evict("a")
    assert refused.value.status == 500
    assert refused.value.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction "
        "subresource does not support.",
        "code": 500,
    }
    assert bare.alive("a") is not None


async def test_a_budget_status_behind_its_generation_is_still_being_processed(bare: Env) -> None:
    await running_pod(bare, "a")
    await make_budget(bare, minAvailable=0)
    await set_budget_status(bare, {"observedGeneration": 0, "disruptionsAllowed": 1})
    async with session_from_kubeconfig(bare.kubeconfig) as session:
        body = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "a"}}
        async with session.post(r.PODS.path(NS, "a", "eviction"), json=body) as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "10"
            answer = await resp.json()
    assert answer["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget pdb is still being processed by the server.",
            }
        ],
        "retryAfterSeconds": 10,
    }


@pytest.mark.parametrize(
    ("policy", "current", "evicted"),
    [
        (None, 2, True),  # IfHealthyBudget: the budget has its healthy pods
        (None, 1, False),  # ...and without them the budget decides (0 allowed)
        ("AlwaysAllow", 0, True),
    ],
)
async def test_a_pod_that_is_not_ready(
    bare: Env, policy: str | None, current: int, evicted: bool
) -> None:
    await running_pod(bare, "sick", ready=False)
    spec: dict[str, Any] = {"minAvailable": 2}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    await make_budget(bare, **spec)
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": 0,
        "currentHealthy": current,
        "desiredHealthy": 2,
    }
    await set_budget_status(bare, status)
    if evicted:
        await bare.evict("sick")
        assert bare.alive("sick") is None
        assert "disruptedPods" not in bare.budget()["status"]  # the budget is not spent
    else:
        with pytest.raises(APIError) as refused:
            await bare.evict("sick")
        assert refused.value.status == 429


async def test_dry_run_and_the_body_checks(bare: Env) -> None:
    await running_pod(bare, "a", finalizers=("example.com/keep",))
    await make_budget(bare, minAvailable=0)
    await set_budget_status(bare, {"observedGeneration": 1, "disruptionsAllowed": 1})
    before = bare.budget()["metadata"]["resourceVersion"]
    await bare.evict("a", deleteOptions={"dryRun": ["All"]})
    assert bare.alive("a") is not None
    assert bare.budget()["metadata"]["resourceVersion"] == before
    with pytest.raises(APIError) as renamed:
        await bare.plane.kube.request(
            "create",
            "pods/eviction",
            "POST",
            r.PODS.path(NS, "a", "eviction"),
            body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b"}},
        )
    assert (renamed.value.status, renamed.value.message) == (
        400,
        "name in URL does not match name in Eviction object",
    )
    with pytest.raises(APIError) as reading:
        await bare.plane.kube.request(
            "get", "pods/eviction", "GET", r.PODS.path(NS, "a", "eviction")
        )
    assert reading.value.status == 405
    with pytest.raises(APIError) as missing:
        await bare.evict("absent")
    assert missing.value.status == 404
    # The evicted pod is marked as kube-apiserver marks it, then deleted (its finalizer keeps
    # it in the API here).
    await bare.evict("a")
    kept = bare.pod("a")
    assert kept is not None
    assert kept["metadata"]["deletionTimestamp"]
    [target] = [c for c in kept["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )


async def test_discovery_advertises_the_subresource(bare: Env) -> None:
    listing = await bare.plane.kube.request("get", "", "GET", "/api/v1")
    [entry] = [e for e in listing["resources"] if e["name"] == "pods/eviction"]
    assert entry == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    }


async def test_rbac_is_create_on_pods_eviction(bare: Env) -> None:
    await running_pod(bare, "a", app="other")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "evictor", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "evictor", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "evictor"},
        "subjects": [{"kind": "User", "name": "alice"}],
    }
    bare.plane.server.storage.create_unadmitted("rbac.authorization.k8s.io/v1", "Role", role)
    bare.plane.server.storage.create_unadmitted(
        "rbac.authorization.k8s.io/v1", "RoleBinding", binding
    )
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}}
    path = r.PODS.path(NS, "a", "eviction")
    async with session_from_kubeconfig(bare.kubeconfig) as session:
        async with session.post(path, json=body, headers={"Impersonate-User": "bob"}) as resp:
            assert resp.status == 403
            assert '"pods/eviction"' in (await resp.json())["message"]
        async with session.post(path, json=body, headers={"Impersonate-User": "alice"}) as resp:
            assert resp.status == 201
    assert bare.alive("a") is None


async def test_the_controller_says_why_a_budget_cannot_be_computed(env: Env) -> None:
    """A percentage over a Job's pods (no scale subresource): SyncFailed, as upstream."""
    await running_pod(env, "worker", app="train")
    await env.plane.kube.patch(
        r.PODS,
        NS,
        "worker",
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "train",
                        "uid": "job-uid",
                        "controller": True,
                    }
                ]
            }
        },
    )
    await make_budget(env, "train", minAvailable="50%", selector={"matchLabels": {"app": "train"}})

    def failed() -> Any:
        status = (env.budget("train").get("status")) or {}
        return [c for c in status.get("conditions") or [] if c.get("reason") == "SyncFailed"]

    [condition] = await env.plane.until(failed, what="SyncFailed")
    assert condition["message"] == "jobs.batch does not implement the scale subresource"
    assert env.budget("train")["status"]["disruptionsAllowed"] == 0

    def warned() -> Any:
        return [
            (e["involvedObject"]["kind"], e["source"]["component"], e["message"])
            for e in env.plane.server.storage.objects("v1", "events", NS)
            if e["reason"] == "CalculateExpectedPodCountFailed"
        ]

    events = await env.plane.until(warned, what="a Warning")
    assert events[0] == (
        "PodDisruptionBudget",
        "controllermanager",
        "Failed to calculate the number of expected pods: jobs.batch does not implement the "
        "scale subresource",
    )
