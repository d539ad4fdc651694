"""The Deployment, ReplicaSet and EndpointSlice decisions of the local plane
(trainer/local/executor/workloads_core.py, endpoints.py): a rolling update that never drops
below ``replicas - maxUnavailable`` available pods nor exceeds ``replicas + maxSurge``,
Recreate, the status and conditions kubectl reads, and the slice a webhook call is routed by."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from trainer.local.executor import endpoints
from trainer.local.executor import workloads_core as core
from trainer.machinery.labels import SERVICE_NAME

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
AT = "2026-01-01T00:00:00Z"


def deployment(replicas: int = 2, image: str = "a", **strategy: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "x"}},
        "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        },
    }
    if strategy:
        spec["strategy"] = strategy
    return {
        "metadata": {"name": "d", "namespace": "ns", "uid": "u-d", "generation": 1},
        "spec": spec,
    }


def as_created(rs: dict[str, Any], stamp: str, available: int | None = None) -> dict[str, Any]:
    """The ReplicaSet as stored, with ``available`` of its replicas up."""
    rs["metadata"]["creationTimestamp"] = stamp
    n = rs["spec"]["replicas"] if available is None else available
    rs["status"] = {"replicas": rs["spec"]["replicas"], "readyReplicas": n, "availableReplicas": n}
    return rs


def ready_pod(name: str, ready: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", **extra},
        "spec": {
            "nodeName": "local",
            "containers": [{"name": "c", "ports": [{"name": "webhook", "containerPort": 9443}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_a_new_deployment_gets_a_replicaset_named_by_its_template_hash() -> None:
    plan = core.plan_deployment(deployment(), [], AT)
    rs = plan.create
    assert rs is not None
    pod_hash = rs["spec"]["template"]["metadata"]["labels"][core.POD_TEMPLATE_HASH]
    assert rs["metadata"]["name"] == f"d-{pod_hash}"
    assert set(pod_hash) <= set(core.SAFE_CHARS)
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "x", core.POD_TEMPLATE_HASH: pod_hash}
    assert rs["spec"]["replicas"] == 2  # replicas + 25 % surge, but no more than replicas
    assert rs["metadata"]["annotations"][core.REVISION] == "1"
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    progressing = plan.status["conditions"][1]
    assert (progressing["reason"], progressing["message"]) == (
        "NewReplicaSetCreated",
        f'Created new replica set "d-{pod_hash}"',
    )
    # The same template always hashes the same; another does not.
    again = core.plan_deployment(deployment(), [], AT).create
    assert again is not None and again["metadata"]["name"] == rs["metadata"]["name"]
    other = core.plan_deployment(deployment(image="b"), [], AT).create
    assert other is not None and other["metadata"]["name"] != rs["metadata"]["name"]


def test_a_rolling_update_surges_one_then_drops_an_old_pod_only_when_the_new_one_is_up() -> None:
    strategy: dict[str, Any] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    old_rs = core.plan_deployment(deployment(), [], AT).create
    assert old_rs is not None
    old = as_created(old_rs, "2026-01-01T00:00:00Z")
    changed = deployment(image="b", **strategy)
    new_rs = core.plan_deployment(changed, [old], AT).create
    assert new_rs is not None
    assert new_rs["spec"]["replicas"] == 1  # 2 + 1 surge - 2 running
    assert new_rs["metadata"]["annotations"][core.REVISION] == "2"
    new = as_created(new_rs, "2026-01-01T00:01:00Z", available=0)
    # The new pod is not available yet: nothing old may go (maxUnavailable 0).
    assert core.plan_deployment(changed, [old, new], AT).scale == {}
    new = as_created(new, "2026-01-01T00:01:00Z", available=1)
    step = core.plan_deployment(changed, [old, new], AT)
    assert step.scale == {old["metadata"]["name"]: 1}
    old["spec"]["replicas"] = 1
    old = as_created(old, "2026-01-01T00:00:00Z")
    step = core.plan_deployment(changed, [old, new], AT)
    assert step.scale == {new["metadata"]["name"]: 2}
    assert (
        core.scale_message(new, 1, 2)
        == f"Scaled up replica set {new['metadata']['name']} from 1 to 2"
    )


def test_recreate_scales_the_old_set_to_zero_before_the_new_one_grows() -> None:
    old_rs = core.plan_deployment(deployment(), [], AT).create
    assert old_rs is not None
    old = as_created(old_rs, "2026-01-01T00:00:00Z")
    changed = deployment(image="b", type="Recreate")
    plan = core.plan_deployment(changed, [old], AT)
    assert plan.create is not None and plan.create["spec"]["replicas"] == 0
    new = as_created(plan.create, "2026-01-01T00:01:00Z")
    assert core.plan_deployment(changed, [old, new], AT).scale == {old["metadata"]["name"]: 0}
    old["spec"]["replicas"], old["status"] = 0, {"replicas": 1}  # a pod still stopping
    assert core.plan_deployment(changed, [old, new], AT).scale == {}
    old["status"] = {}
    assert core.plan_deployment(changed, [old, new], AT).scale == {new["metadata"]["name"]: 2}


@pytest.mark.parametrize(
    ("available", "status", "reason"),
    [
        (2, "True", "MinimumReplicasAvailable"),
        (1, "True", "MinimumReplicasAvailable"),  # 25 % of 2 rounds down to 0 unavailable...
        (0, "False", "MinimumReplicasUnavailable"),
    ],
)
def test_available_condition(available: int, status: str, reason: str) -> None:
    d = deployment(replicas=2, rollingUpdate={"maxUnavailable": 1})
    rs_new = core.plan_deployment(d, [], AT).create
    assert rs_new is not None
    rs = as_created(rs_new, AT, available=available)
    plan = core.plan_deployment(d, [rs], AT)
    condition = plan.status["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Available",
        status,
        reason,
    )
    assert plan.status.get("availableReplicas", 0) == available


def test_fenceposts_round_surge_up_and_unavailability_down() -> None:
    assert core.fenceposts(deployment(replicas=3)) == (1, 0)  # 25 %: ceil(0.75), floor(0.75)
    # Both 0 would never make progress: one pod may be unavailable.
    zero = deployment(replicas=3, rollingUpdate={"maxSurge": 0, "maxUnavailable": "0%"})
    assert core.fenceposts(zero) == (0, 1)
    d = deployment(replicas=10, rollingUpdate={"maxSurge": "50%", "maxUnavailable": "33%"})
    assert core.fenceposts(d) == (5, 3)
    with pytest.raises(ValueError, match="IntOrString"):
        core.scaled("ten", 10, round_up=True)


def test_replicaset_status_counts_active_ready_and_available_pods() -> None:
    rs = {
        "metadata": {"name": "r", "generation": 3},
        "spec": {"replicas": 3, "minReadySeconds": 10},
    }
    pods = [
        ready_pod("a"),
        ready_pod("b", ready=False),
        ready_pod("c", deletionTimestamp=AT),  # being deleted: not counted
    ]
    pods[0]["status"]["conditions"][0]["lastTransitionTime"] = "2025-12-31T23:59:55Z"
    status = core.replicaset_status(rs, pods, NOW)
    assert status == {
        "replicas": 2,
        "fullyLabeledReplicas": 2,
        "readyReplicas": 1,
        "availableReplicas": 0,  # ready 5 s of the 10 minReadySeconds
        "observedGeneration": 3,
    }
    later = core.replicaset_status(rs, pods, NOW + dt.timedelta(seconds=5))
    assert later["availableReplicas"] == 1


def test_scale_down_removes_unready_and_newest_pods_first() -> None:
    old_ready = ready_pod("old", creationTimestamp="2026-01-01T00:00:00Z")
    new_ready = ready_pod("new", creationTimestamp="2026-01-01T00:05:00Z")
    unready = ready_pod("unready", ready=False, creationTimestamp="2026-01-01T00:00:00Z")
    picked = core.pods_to_delete([old_ready, new_ready, unready], 2)
    assert [p["metadata"]["name"] for p in picked] == ["unready", "new"]


def test_endpoint_slice_lists_ready_pods_and_resolves_named_ports() -> None:
    service = {
        "metadata": {"name": "svc", "namespace": "ns", "uid": "u-s"},
        "spec": {
            "selector": {"app": "x"},
            "ports": [{"name": "webhook", "port": 443, "targetPort": "webhook"}],
        },
    }
    pods = [
        ready_pod("a"),
        ready_pod("b", ready=False),
        ready_pod("c", deletionTimestamp=AT),
        {**ready_pod("done"), "status": {"phase": "Succeeded", "podIP": "127.0.0.1"}},
    ]
    slice_ = endpoints.endpoint_slice(service, pods)
    assert slice_["ports"] == [{"name": "webhook", "protocol": "TCP", "port": 9443}]
    conditions = {e["targetRef"]["name"]: e["conditions"] for e in slice_["endpoints"]}
    assert conditions == {
        "a": {"ready": True, "serving": True, "terminating": False},
        "b": {"ready": False, "serving": False, "terminating": False},
        "c": {"ready": False, "serving": True, "terminating": True},
    }
    assert slice_["metadata"]["labels"][SERVICE_NAME] == "svc"
    assert not endpoints.differs(slice_, endpoints.endpoint_slice(service, pods))


def test_service_entries_give_routed_services_an_address_and_their_cluster_names() -> None:
    from trainer.local.executor.sandbox.servicedns import ServiceDirectory  # noqa: PLC0415

    class Cache:
        def __init__(self, items: list[dict[str, Any]]) -> None:
            self.items = items

        def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
            return self.items

    def svc(name: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}

    services = [
        svc("web", selector={"app": "x"}, ports=[{"port": 443}, {"port": 53, "protocol": "UDP"}]),
        svc("headless", selector={"app": "x"}, clusterIP="None", ports=[{"port": 1}]),
        svc("external", ports=[{"port": 80}]),  # no selector: nobody's endpoints
    ]

    async def no_dial(namespace: str, name: str, port: int) -> Any:
        raise AssertionError("not dialled")

    directory = ServiceDirectory(Cache(services), Cache([]), no_dial)  # type: ignore[arg-type]
    (entry,) = directory.entries()
    assert (entry.name, entry.address, entry.ports) == ("web", "127.96.0.2", (443,))
    assert directory.entries()[0].address == "127.96.0.2"  # stable
    assert entry.names("ns") == ["web.ns.svc.cluster.local", "web.ns.svc", "web.ns", "web"]
    assert entry.names("other") == ["web.ns.svc.cluster.local", "web.ns.svc", "web.ns"]
