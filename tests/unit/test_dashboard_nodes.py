"""The dashboard's Nodes page as a pure function of Node and Pod objects: readiness, GPU labels,
and allocation summed as ``kubectl describe node`` does (non-terminated pods bound to the node),
on the local plane's node and on what real clusters hold (many nodes, missing fields)."""

from __future__ import annotations

from typing import Any

from trainer.dashboard.policy import nodes
from trainer.machinery.podresources import amounts

GPU = "nvidia.com/gpu"


def node(name: str = "local", **status: Any) -> dict[str, Any]:
    labels = status.pop("labels", {})
    spec = status.pop("spec", {})
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": status,
    }


def gpu_node() -> dict[str, Any]:
    offer = {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "4"}
    return node(
        labels={
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "4",
            "nvidia.com/gpu.memory": "81559",
        },
        capacity=offer,
        allocatable=offer,
        conditions=[{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    )


def pod(
    name: str,
    *,
    node_name: str | None = "local",
    phase: str = "Running",
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    body: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": resources}],
        **spec,
    }
    if node_name:
        body["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": "default", "resourceVersion": "1"},
        "spec": body,
        "status": {"phase": phase},
    }


def usage(row: dict[str, Any], resource: str) -> dict[str, Any]:
    found: dict[str, Any] = next(u for u in row["resources"] if u["name"] == resource)
    return found


def test_the_local_node_with_gpus_and_what_its_pods_take() -> None:
    pods = [
        pod("a", requests={"cpu": "1", "memory": "1Gi", GPU: "1"}, limits={"memory": "2Gi"}),
        pod("b", requests={"cpu": "500m", "memory": "512Mi"}, limits={"cpu": "2", GPU: "1"}),
        pod("done", phase="Succeeded", requests={"cpu": "8", GPU: "2"}),
        pod("failed", phase="Failed", requests={"cpu": "8"}),
    ]
    v = nodes.view([gpu_node()], pods)
    assert v["resources"] == ["cpu", "memory", GPU, "pods"]
    assert v["podsKnown"] is True and v["pending"] is None
    (row,) = v["nodes"]
    assert (row["name"], row["ready"], row["readyDetail"]) == ("local", "Ready", "")
    assert row["gpuProduct"] == "NVIDIA-H100-80GB-HBM3" and row["gpuMemoryMiB"] == "81559"
    cpu = usage(row, "cpu")
    assert cpu["text"] == {"allocatable": "16", "requests": "1.5", "limits": "2", "free": "14.5"}
    assert cpu["percent"] == 9.4
    memory = usage(row, "memory")
    assert memory["text"] == {
        "allocatable": "64Gi",
        "requests": "1.5Gi",
        "limits": "2Gi",
        "free": "62.5Gi",
    }
    assert memory["requests"] == 1.5 * 2**30
    # b sets only a GPU limit: it requests it (the API server defaults the request to it).
    gpus = usage(row, GPU)
    assert (gpus["allocatable"], gpus["requests"], gpus["limits"], gpus["free"]) == (4, 2, 1, 2)
    assert gpus["percent"] == 50.0
    count = usage(row, "pods")
    assert (count["requests"], count["allocatable"], count["limits"]) == (2, 110, None)
    assert count["text"]["free"] == "108"


def test_pods_waiting_unschedulable_are_counted_with_the_oldest_ones_message() -> None:
    def waiting(name: str, created: str, message: str) -> dict[str, Any]:
        p = pod(name, node_name=None, phase="Pending", requests={GPU: "2"})
        p["metadata"]["creationTimestamp"] = created
        p["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ]
        return p

    gated = pod("gated", node_name=None, phase="Pending")
    gated["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]
    first = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    v = nodes.view(
        [gpu_node()],
        [
            waiting("late", "2026-01-01T00:00:09Z", "later message"),
            waiting("early", "2026-01-01T00:00:01Z", first),
            gated,
            pod("fresh", node_name=None, phase="Pending"),
        ],
    )
    assert v["pending"] == {"count": 2, "pod": "default/early", "message": first}
    # Pods not bound to the node take none of it.
    assert usage(v["nodes"][0], GPU)["requests"] == 0


def test_init_containers_sidecars_and_overhead_count_as_kube_scheduler_counts_them() -> None:
    p = pod(
        "p",
        requests={"cpu": "1", "memory": "1Gi"},
        limits={"memory": "1Gi"},
        initContainers=[
            {"name": "big-init", "resources": {"requests": {"cpu": "3"}}},
            {
                "name": "sidecar",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m"}},
            },
        ],
        overhead={"cpu": "100m", "memory": "64Mi"},
    )
    requests, limits = nodes.pod_requests_and_limits(p)
    # max(1 + 0.25 sidecar, 3 init) + 0.1 overhead
    assert float(requests["cpu"]) == 3.1
    assert requests["memory"] == 2**30 + 64 * 2**20
    # Limits: the overhead is added where the pod sets a limit; no cpu limit on the main
    # container, so the sidecar's alone.
    assert float(limits["cpu"]) == 0.6 and limits["memory"] == 2**30 + 64 * 2**20


def test_a_real_clusters_nodes_many_and_partial() -> None:
    bare = node("b-bare")  # no labels, conditions, capacity, allocatable
    old = node("c-old", capacity={"cpu": "8", "memory": "32Gi", "pods": "110"})  # no allocatable
    sick = node(
        "a-sick",
        allocatable={"cpu": "4", "memory": "lots", "pods": True, "amd.com/gpu": "2"},
        conditions=[
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
            }
        ],
        spec={
            "unschedulable": True,
            "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}],
        },
    )
    odd = {"metadata": None, "spec": "x", "status": {"conditions": "nope", "allocatable": []}}
    pods = [
        pod("on-old", node_name="c-old", requests={"cpu": "2"}),
        pod("on-sick", node_name="a-sick", requests={"amd.com/gpu": "1", "memory": "bad"}),
        pod("elsewhere", node_name="gone-node", requests={"cpu": "64"}),
        {"spec": None, "status": None},
        {"metadata": {"name": "x"}, "spec": {"nodeName": "c-old", "containers": "bad"}},
    ]
    v = nodes.view([old, bare, sick, odd], pods)
    assert v["resources"] == ["cpu", "memory", "amd.com/gpu", "pods"]
    assert [n["name"] for n in v["nodes"]] == ["", "a-sick", "b-bare", "c-old"]
    by_name = {n["name"]: n for n in v["nodes"]}

    s = by_name["a-sick"]
    assert (s["ready"], s["schedulable"]) == ("NotReady", False)
    assert s["readyDetail"] == "NodeStatusUnknown: Kubelet stopped posting node status."
    assert s["taints"] == ["node.kubernetes.io/unreachable:NoSchedule"]
    assert usage(s, "amd.com/gpu")["text"]["free"] == "1"
    assert usage(s, "memory")["allocatable"] is None  # "lots" is not a quantity
    assert usage(s, "pods")["allocatable"] is None and usage(s, "pods")["requests"] == 1

    b = by_name["b-bare"]
    assert (b["ready"], b["gpuProduct"]) == ("Unknown", "")
    assert b["readyDetail"] == "the node reports no Ready condition"
    assert all(u["allocatable"] is None and u["free"] is None for u in b["resources"])

    c = by_name["c-old"]  # capacity stands in for the missing allocatable
    assert usage(c, "cpu")["text"]["allocatable"] == "8"
    assert usage(c, "cpu")["text"]["requests"] == "2"
    assert usage(c, "amd.com/gpu")["allocatable"] is None
    assert usage(c, "pods")["requests"] == 2


def test_allocation_unknown_when_pods_cannot_be_listed() -> None:
    v = nodes.view([gpu_node()], [], pods_known=False)
    assert v["podsKnown"] is False
    cpu = usage(v["nodes"][0], "cpu")
    assert (cpu["allocatable"], cpu["requests"], cpu["limits"], cpu["free"]) == (
        16,
        None,
        None,
        None,
    )
    assert cpu["text"]["allocatable"] == "16" and cpu["text"]["requests"] == ""


def test_no_gpu_column_without_gpus_and_no_nodes_at_all() -> None:
    cpu_only = node(allocatable={"cpu": "2", "memory": "3800Mi", "pods": "110"})
    v = nodes.view([cpu_only], [])
    assert v["resources"] == ["cpu", "memory", "pods"]
    assert usage(v["nodes"][0], "memory")["text"]["allocatable"] == "3.7Gi"
    assert nodes.view([], [pod("p")]) == {
        "resources": ["cpu", "memory", "pods"],
        "nodes": [],
        "pending": None,
        "podsKnown": True,
    }


def test_a_slim_pod_counts_as_the_whole_pod() -> None:
    full = pod(
        "p",
        requests={"cpu": "1", GPU: "1"},
        limits={"memory": "1Gi"},
        initContainers=[{"name": "i", "image": "x", "command": ["big"] * 100}],
        overhead={"cpu": "10m"},
    )
    full["metadata"]["annotations"] = {"big": "x" * 10_000}
    full["status"]["conditions"] = [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    waiting = pod("w", node_name=None, phase="Pending")
    waiting["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
    ]
    slim = [nodes.slim_pod(p) for p in (full, waiting)]
    assert nodes.view([gpu_node()], slim) == nodes.view([gpu_node()], [full, waiting])
    assert len(str(slim[0])) < len(str(full)) / 10
    assert slim[0]["metadata"] == {"name": "p", "namespace": "default", "resourceVersion": "1"}


def test_amounts_read_as_people_write_them() -> None:
    text = nodes.amount_text
    assert [text("cpu", amounts({"x": v})["x"]) for v in ("250m", "2", "1500m", 0)] == [
        "0.25",
        "2",
        "1.5",
        "0",
    ]
    mem = [amounts({"x": v})["x"] for v in ("2Ti", "16Gi", "1536Mi", "100Mi", "2000", "0")]
    assert [text("memory", v) for v in mem] == ["2Ti", "16Gi", "1.5Gi", "100Mi", "2Ki", "0"]
    assert text("cpu", None) == ""


def test_updates_send_only_the_rows_that_changed() -> None:
    a, b = gpu_node(), gpu_node()
    b["metadata"]["name"] = "other"
    before = nodes.view([a, b], [])
    assert nodes.update(before, nodes.view([a, b], [])) is None
    busy = nodes.view([a, b], [pod("p", requests={GPU: "1"})])
    kind, body = nodes.update(before, busy) or ("", {})
    assert kind == "update" and body["gone"] == [] and body["pending"] is None
    assert [row["name"] for row in body["nodes"]] == ["local"]
    kind, body = nodes.update(busy, nodes.view([a], [])) or ("", {})
    assert kind == "update" and body["gone"] == ["other"]
    assert [row["name"] for row in body["nodes"]] == ["local"]
    # New columns (a first GPU node, or the last one gone) redraw everything.
    cpu_only = node(allocatable={"cpu": "2"})
    kind, body = nodes.update(nodes.view([cpu_only], []), before) or ("", {})
    assert kind == "nodes" and body == before
