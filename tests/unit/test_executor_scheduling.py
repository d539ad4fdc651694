"""The local scheduler's decisions (trainer/local/executor/scheduler/policy/scheduling.py):
kube-scheduler's filters and messages, and all-or-nothing gangs per JobSet."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.jobset import contract as jc
from trainer.local.executor.scheduler.policy import scheduling as sch

GPU = "nvidia.com/gpu"


def node(name: str = "local", gpus: int = 4, **allocatable: Any) -> dict[str, Any]:
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: str(gpus)}
    alloc.update({k: str(v) for k, v in allocatable.items()})
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": alloc},
    }


def pod(
    name: str,
    *,
    gpus: int = 0,
    cpu: str = "100m",
    jobset: str = "",
    node_name: str = "",
    created: str = "2026-01-01T00:00:00Z",
    phase: str = "Pending",
    **spec: Any,
) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu}
    if gpus:
        limits[GPU] = gpus
    labels = {}
    if jobset:
        labels = {jc.LABEL_JOBSET_NAME: jobset, jc.LABEL_JOBSET_UID: f"uid-{jobset}"}
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": labels,
            "creationTimestamp": created,
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": limits}}],
            "nodeName": node_name,
            **spec,
        },
        "status": {"phase": phase},
    }


def jobset(name: str, *, nodes: int = 2, gpus: int = 1, **status: Any) -> dict[str, Any]:
    template = {
        "spec": {
            "parallelism": nodes,
            "completions": nodes,
            "template": {
                "spec": {
                    "containers": [
                        {"name": "node", "resources": {"limits": {"cpu": "100m", GPU: gpus}}}
                    ]
                }
            },
        }
    }
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": template}]},
        "status": status,
    }


def run(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    jobsets: list[dict[str, Any]] = (),  # type: ignore[assignment]
    admitted: dict[str, Any] | None = None,
    all_or_nothing: bool = True,
) -> sch.Decision:
    gangs = {g.key: g for g in (sch.jobset_gang(js) for js in jobsets) if g is not None}
    return sch.schedule(
        [sch.node_view(n) for n in nodes],
        [sch.pod_view(p, all_or_nothing=all_or_nothing) for p in pods],
        gangs,
        {} if admitted is None else admitted,
    )


def bound(decision: sch.Decision) -> list[str]:
    return sorted(p.name for p, _ in decision.binds)


# --- requests ---------------------------------------------------------------------------------
def test_pod_requests_count_limits_init_containers_sidecars_and_overhead() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}},
            {"name": "b", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}},
        ],
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "big", "resources": {"requests": {"cpu": "3", "memory": "512Mi"}}},
        ],
        "overhead": {"cpu": "250m"},
    }
    got = sch.pod_requests(spec)
    # containers 1.5 + sidecar 1 = 2.5 against init 3 + the sidecar before it = 4; + overhead
    assert got["cpu"] == 4250  # thousandths of a core
    assert got["memory"] == (1 << 30) * 1000
    assert got[sch.PODS] == 1000


# --- filters and messages ---------------------------------------------------------------------
def test_a_pod_that_fits_is_bound_and_one_that_does_not_gets_kube_schedulers_message() -> None:
    d = run([node()], [pod("a", gpus=3), pod("b", gpus=2, created="2026-01-01T00:00:01Z")])
    assert bound(d) == ["a"]
    why = d.waiting["uid-b"]
    assert why.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert not why.never
    assert dict(why.shortfall) == {GPU: (2000, 1000)}


def test_a_pod_larger_than_the_node_never_fits_and_reasons_are_sorted() -> None:
    d = run([node()], [pod("huge", gpus=5, cpu="9")])
    why = d.waiting["uid-huge"]
    assert why.message == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
    )
    assert why.never


def test_bound_pods_use_the_node_and_finished_ones_do_not() -> None:
    d = run(
        [node()],
        [
            pod("running", gpus=3, node_name="local"),
            pod("done", gpus=1, node_name="local", phase="Succeeded"),
            pod("new", gpus=1),
        ],
    )
    assert bound(d) == ["new"]


def test_too_many_pods() -> None:
    d = run([node(pods=1)], [pod("a", node_name="local"), pod("b")])
    assert d.waiting["uid-b"].message == "0/1 nodes are available: 1 Too many pods."


@pytest.mark.parametrize(
    ("spec", "fits"),
    [
        ({"nodeSelector": {"kubernetes.io/hostname": "local"}}, True),
        ({"nodeSelector": {"node-type": "training"}}, False),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": ["local"],
                                        }
                                    ]
                                },
                            ]
                        }
                    }
                }
            },
            True,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "NotIn",
                                            "values": ["local"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            False,
        ),
    ],
)
def test_node_selector_and_required_node_affinity(spec: dict[str, Any], fits: bool) -> None:
    d = run([node()], [pod("a", **spec)])
    if fits:
        assert bound(d) == ["a"]
    else:
        why = d.waiting["uid-a"]
        assert why.message == (
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        )
        assert why.never


def test_taints_need_tolerations() -> None:
    tainted = node()
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    d = run(
        [tainted],
        [
            pod("plain"),
            pod(
                "tolerant",
                tolerations=[{"key": "dedicated", "operator": "Equal", "value": "training"}],
            ),
            pod("any", tolerations=[{"operator": "Exists"}]),
        ],
    )
    assert bound(d) == ["any", "tolerant"]
    assert d.waiting["uid-plain"].message == (
        "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: training}."
    )


def test_gated_pods_are_reported_not_bound() -> None:
    d = run([node()], [pod("gated", schedulingGates=[{"name": "example.com/wait"}])])
    assert [p.name for p in d.gated] == ["gated"] and not d.binds and not d.waiting


def test_no_nodes() -> None:
    assert run([], [pod("a")]).waiting["uid-a"].message == sch.NO_NODES


# --- gangs ------------------------------------------------------------------------------------
def test_two_jobsets_fit_a_third_waits_until_one_finishes() -> None:
    jobsets = [jobset("one"), jobset("two"), jobset("three")]
    pods = [
        pod(f"{js}-{i}", gpus=1, jobset=js, created=f"2026-01-01T00:00:0{n}Z")
        for n, js in enumerate(["one", "two", "three"])
        for i in range(2)
    ]
    admitted: dict[str, Any] = {}
    d = run([node()], pods, jobsets, admitted)
    assert bound(d) == ["one-0", "one-1", "two-0", "two-1"]
    assert {d.waiting[f"uid-three-{i}"].message for i in range(2)} == {
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    }
    # "one" finishes: its pods are done and its JobSet terminal; "three" goes in.
    for p in pods:
        if p["metadata"]["name"].startswith(("one", "two")):
            p["spec"]["nodeName"] = "local"
        if p["metadata"]["name"].startswith("one"):
            p["status"]["phase"] = "Succeeded"
    jobsets[0]["status"] = {"terminalState": "Completed"}
    d = run([node()], pods, jobsets, admitted)
    assert bound(d) == ["three-0", "three-1"]


def test_a_gang_holds_room_for_pods_not_created_yet() -> None:
    """Only the first pod of "first" exists; a later JobSet may not take the GPU its second
    pod will need."""
    admitted: dict[str, Any] = {}
    d = run(
        [node(gpus=2)],
        [pod("first-0", gpus=1, jobset="first")],
        [jobset("first"), jobset("second")],
        admitted,
    )
    assert bound(d) == ["first-0"]
    pods = [
        pod("first-0", gpus=1, jobset="first", node_name="local"),
        pod("second-0", gpus=1, jobset="second", created="2026-01-01T00:00:05Z"),
        pod("second-1", gpus=1, jobset="second", created="2026-01-01T00:00:05Z"),
    ]
    d = run([node(gpus=2)], pods, [jobset("first"), jobset("second")], admitted)
    assert not d.binds
    pods.append(pod("first-1", gpus=1, jobset="first", created="2026-01-01T00:00:06Z"))
    d = run([node(gpus=2)], pods, [jobset("first"), jobset("second")], admitted)
    assert bound(d) == ["first-1"]


def test_a_gang_is_bound_all_or_none_and_can_say_it_never_fits() -> None:
    """Each pod alone would fit (1 GPU free of 2) but the JobSet needs 3 at once."""
    d = run(
        [node(gpus=2)],
        [pod(f"big-{i}", gpus=1, jobset="big") for i in range(3)],
        [jobset("big", nodes=3)],
    )
    assert not d.binds
    why = d.waiting["uid-big-0"]
    assert why.never and why.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_without_all_or_nothing_jobset_pods_are_scheduled_alone() -> None:
    d = run(
        [node(gpus=2)],
        [pod(f"big-{i}", gpus=1, jobset="big") for i in range(3)],
        [jobset("big", nodes=3)],
        all_or_nothing=False,
    )
    assert bound(d) == ["big-0", "big-1"]


def test_a_pod_group_is_a_gang_even_without_all_or_nothing() -> None:
    pods = [pod(f"big-{i}", gpus=1, jobset="big") for i in range(3)]
    for p in pods:
        p["metadata"]["labels"][sch.POD_GROUP_LABEL] = "big"
    d = run([node(gpus=2)], pods, [jobset("big", nodes=3)], all_or_nothing=False)
    assert not d.binds


def test_finished_replicated_jobs_are_not_part_of_the_demand() -> None:
    js = jobset("staged", nodes=2)
    init = {
        "name": "initializer",
        "replicas": 1,
        "template": {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "i", "resources": {"limits": {GPU: 4}}}]}
                }
            }
        },
    }
    js["spec"]["replicatedJobs"].insert(0, init)
    gang = sch.jobset_gang(js)
    assert gang is not None and len(gang.slots) == 3
    js["status"] = {"replicatedJobsStatus": [{"name": "initializer", "succeeded": 1}]}
    gang = sch.jobset_gang(js)
    assert gang is not None and len(gang.slots) == 2
    js["spec"]["suspend"] = True
    assert sch.jobset_gang(js) is None


def test_phases_of_depends_on_are_held_one_at_a_time() -> None:
    """An initializer (2 CPUs) the trainer (2 x 2 CPUs) waits for to Complete needs room for
    4 CPUs, not 6; one the trainer only waits for to be Ready runs beside it."""
    js = jobset("staged", nodes=2, gpus=0)
    node_pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    node_pod["containers"][0]["resources"]["limits"]["cpu"] = "2"
    init = {
        "name": "initializer",
        "replicas": 1,
        "template": {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "i", "resources": {"limits": {"cpu": "2"}}}]}
                }
            }
        },
    }
    js["spec"]["replicatedJobs"].insert(0, init)
    js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "initializer", "status": "Complete"}]
    pods = [pod("staged-init", cpu="2", jobset="staged")]
    d = run([node(cpu=4)], pods, [js])
    assert bound(d) == ["staged-init"]
    js["spec"]["replicatedJobs"][1]["dependsOn"][0]["status"] = "Ready"
    d = run([node(cpu=4)], pods, [js])
    assert d.waiting["uid-staged-init"].never
