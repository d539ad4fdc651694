"""``--simulate``'s file (docs/simulation.md) and the simulated kubelet's pure parts: stage
overrides from a pod's labels and annotations, and the status of each step of a pod's life."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from trainer.local.executor.simulation.config import (
    SIMULATED_LABEL,
    ZONE_LABEL,
    SimulationError,
    Stages,
    parse_simulation,
)
from trainer.local.executor.simulation.kubelet import (
    DURATION_KEY,
    EXIT_CODE_KEY,
    FAIL_PROBABILITY_KEY,
    Run,
    SimKubelet,
    end_run,
    pod_stage,
    run_seconds,
    sim_status,
    stage_keys,
)

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:30Z", "2026-01-01T00:01:00Z"


def test_templates_make_named_nodes_spread_over_zones() -> None:
    sim = parse_simulation(
        {
            "nodes": [
                {
                    "count": 3,
                    "namePrefix": "gpu",
                    "zones": ["a", "b"],
                    "capacity": {"cpu": "64", "memory": "512Gi"},
                    "gpus": {"count": 8, "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559},
                    "labels": {"pool": "train"},
                    "taints": [{"key": "gpu", "effect": "NoSchedule"}],
                },
                {"count": 1, "namePrefix": "cpu"},
            ],
            "stages": {"duration": "1.5m", "jitter": 0, "failureProbability": 0.5, "exitCode": 3},
        }
    )
    nodes = list(sim.sim_nodes())
    assert [n.name for n in nodes] == ["gpu-0", "gpu-1", "gpu-2", "cpu-0"]
    assert [n.config.labels.get(ZONE_LABEL) for n in nodes] == ["a", "b", "a", None]
    first = nodes[0]
    assert first.config.labels[SIMULATED_LABEL] == "true" and first.config.labels["pool"] == "train"
    assert len(first.gpus) == 8 and first.gpus[0].product == "NVIDIA H100 80GB HBM3"
    assert str(first.config.capacity["cpu"]) == "64"
    assert first.config.taints == ({"key": "gpu", "effect": "NoSchedule"},)
    assert nodes[3].gpus == () and str(nodes[3].config.capacity["memory"]) == "256Gi"
    assert sim.with_host_node is True
    assert sim.stages == Stages(90.0, 0.0, 0.5, 3)


def test_defaults() -> None:
    sim = parse_simulation({"nodes": [{"namePrefix": "n"}], "withHostNode": False})
    assert sim.stages == Stages(30.0, 0.2, 0.0, 1) and not sim.with_host_node
    assert [n.name for n in sim.sim_nodes()] == ["n-0"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (None, "nodes: must be a non-empty list of node templates"),
        ({"nodes": []}, "nodes: must be a non-empty list"),
        ({"nodes": [{"namePrefix": "a"}], "extra": 1}, "extra: unknown field; known:"),
        ({"nodes": [{"namePrefix": "a", "size": 1}]}, "nodes[0].size: unknown field"),
        ({"nodes": [{"count": 1}]}, "nodes[0].namePrefix: must be a non-empty string"),
        ({"nodes": [{"namePrefix": "Bad_Name"}]}, "nodes[0].namePrefix: must be a DNS label"),
        ({"nodes": [{"namePrefix": "a", "count": "2"}]}, "nodes[0].count: must be an integer"),
        ({"nodes": [{"namePrefix": "a", "count": 10_001}]}, "nodes[0].count: must be an integer"),
        (
            {"nodes": [{"namePrefix": "a", "count": 6000}, {"namePrefix": "b", "count": 6000}]},
            "nodes: at most 10000 nodes in all, got 12000",
        ),
        ({"nodes": [{"namePrefix": "a"}, {"namePrefix": "a"}]}, "nodes[1].namePrefix: 'a'"),
        (
            {"nodes": [{"namePrefix": "a", "capacity": {"cpu": "lots"}}]},
            "nodes[0].capacity.cpu:",
        ),
        (
            {"nodes": [{"namePrefix": "a", "capacity": {"gpu": "1"}}]},
            "nodes[0].capacity.gpu: unknown resource",
        ),
        ({"nodes": [{"namePrefix": "a", "gpus": {"count": 65}}]}, "nodes[0].gpus.count:"),
        ({"nodes": [{"namePrefix": "a", "gpus": 8}]}, "nodes[0].gpus: must be a mapping"),
        (
            {"nodes": [{"namePrefix": "a", "taints": [{"key": "k", "effect": "No"}]}]},
            "nodes[0].taints[0].effect: must be one of",
        ),
        ({"nodes": [{"namePrefix": "a", "labels": {"k": 1}}]}, "nodes[0].labels.k: must be"),
        ({"nodes": [{"namePrefix": "a", "zones": "a"}]}, "nodes[0].zones: must be a list"),
        (
            {"nodes": [{"namePrefix": "a", "labels": {"bad key!": "v"}}]},
            "nodes[0].labels.bad key!: name part must consist of",
        ),
        (
            {"nodes": [{"namePrefix": "a", "labels": {"k": "not a value"}}]},
            "nodes[0].labels.k: a valid label must be",
        ),
        (
            {"nodes": [{"namePrefix": "a", "zones": ["ok", "not ok"]}]},
            "nodes[0].zones[1]: a valid label must be",
        ),
        ({"nodes": [{"namePrefix": "a"}], "withHostNode": "no"}, "withHostNode: must be true"),
        ({"nodes": [{"namePrefix": "a"}], "stages": {"duration": "soon"}}, "stages.duration:"),
        ({"nodes": [{"namePrefix": "a"}], "stages": {"duration": -1}}, "stages.duration:"),
        ({"nodes": [{"namePrefix": "a"}], "stages": {"jitter": 2}}, "stages.jitter: must be"),
        (
            {"nodes": [{"namePrefix": "a"}], "stages": {"failureProbability": "x"}},
            "stages.failureProbability: must be a number from 0 to 1",
        ),
        ({"nodes": [{"namePrefix": "a"}], "stages": {"exitCode": 0}}, "stages.exitCode:"),
        ({"nodes": [{"namePrefix": "a"}], "stages": {"delay": 1}}, "stages.delay: unknown"),
    ],
)
def test_errors_name_the_field(doc: Any, message: str) -> None:
    with pytest.raises(SimulationError) as err:
        parse_simulation(doc)
    assert message in str(err.value)


def pod(restart_policy: str = "Never", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", **meta},
        "spec": {
            "nodeName": "sim-0",
            "restartPolicy": restart_policy,
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "node", "image": "torch"}],
        },
        "status": {"phase": "Pending"},
    }


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_a_pod_runs_then_succeeds() -> None:
    p = pod()
    run = Run(start_time=T0, started_at=T0)
    running = sim_status(p, run, now=T0)
    assert running["phase"] == "Running" and running["startTime"] == T0
    assert conditions(running) == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    node = running["containerStatuses"][0]
    assert node["state"] == {"running": {"startedAt": T0}} and node["ready"] and node["started"]
    assert running["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert running["podIP"]
    assert end_run(p, run, 0, T1) is False
    done = sim_status(p, run, now=T1)
    assert done["phase"] == "Succeeded"
    assert conditions(done)["Ready"] == "False"
    terminated = done["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["startedAt"] == T0 and terminated["finishedAt"] == T1
    ready = next(c for c in done["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "PodCompleted" and ready["lastTransitionTime"] == T1


def test_a_failure_with_never_fails_the_pod() -> None:
    p = pod("Never")
    run = Run(start_time=T0, started_at=T0)
    assert end_run(p, run, 3, T1) is False
    status = sim_status(p, run, now=T1)
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"


def test_on_failure_restarts_in_place_and_keeps_the_last_state() -> None:
    p = pod("OnFailure")
    run = Run(start_time=T0, started_at=T0)
    assert end_run(p, run, 3, T1) is True
    status = sim_status(p, run, now=T1)
    node = status["containerStatuses"][0]
    assert status["phase"] == "Running" and node["restartCount"] == 1
    assert node["state"] == {"running": {"startedAt": T1}}
    assert node["lastState"]["terminated"]["exitCode"] == 3
    assert end_run(p, run, 0, T2) is False
    assert sim_status(p, run, now=T2)["phase"] == "Succeeded"


def test_always_restarts_even_after_success() -> None:
    run = Run(start_time=T0, started_at=T0)
    assert end_run(pod("Always"), run, 0, T1) is True and run.restart_count == 1


def test_a_deadline_fails_the_pod_with_its_reason() -> None:
    p = pod()
    run = Run(start_time=T0, started_at=T0, exit_code=143, finished_at=T1)
    run.reason, run.message = "DeadlineExceeded", "Pod was active on the node longer than 5s"
    status = sim_status(p, run, now=T1)
    assert status["phase"] == "Failed" and status["reason"] == "DeadlineExceeded"


def test_pod_labels_and_annotations_override_the_stage() -> None:
    stages = Stages(30.0, 0.2, 0.0, 1)
    p = pod(
        labels={DURATION_KEY: "2s", EXIT_CODE_KEY: "7"},
        annotations={FAIL_PROBABILITY_KEY: "1", DURATION_KEY: "500ms"},
    )
    assert pod_stage(p, stages) == Stages(0.5, 0.2, 1.0, 7)
    # Values that do not parse keep the file's.
    bad = pod(labels={DURATION_KEY: "soon", EXIT_CODE_KEY: "0", FAIL_PROBABILITY_KEY: "x"})
    assert pod_stage(bad, stages) == stages


def test_a_trainjob_chooses_its_pods_stage_and_the_pod_wins() -> None:
    stages = Stages(30.0, 0.2, 0.0, 1)
    trainjob = stage_keys(
        {
            "metadata": {
                "name": "tj",
                "namespace": "ns",
                "labels": {DURATION_KEY: "40s", "team": "a"},
                "annotations": {DURATION_KEY: "12s", EXIT_CODE_KEY: "9", "note": "x" * 1000},
            },
            "spec": {"trainer": {"numNodes": 8}},
        }
    )
    # The watch keeps only the sim-* keys of the TrainJob.
    assert trainjob == {
        "metadata": {
            "name": "tj",
            "namespace": "ns",
            "resourceVersion": None,
            "labels": {DURATION_KEY: "40s"},
            "annotations": {DURATION_KEY: "12s", EXIT_CODE_KEY: "9"},
        }
    }
    meta = trainjob["metadata"]
    assert pod_stage(pod(), stages, meta) == Stages(12.0, 0.2, 0.0, 9)
    assert pod_stage(pod(labels={DURATION_KEY: "3s"}), stages, meta) == Stages(3.0, 0.2, 0.0, 9)


def test_jitter_stays_within_its_bounds() -> None:
    rnd = random.Random(1)
    values = [run_seconds(Stages(10.0, 0.2, 0.0, 1), rnd) for _ in range(200)]
    assert all(8.0 <= v <= 12.0 for v in values) and max(values) - min(values) > 2
    assert run_seconds(Stages(10.0, 0.0, 0.0, 1), rnd) == 10.0


class _FlakyKube:
    """Answers status writes, but lets the ``fail``-th one time out."""

    def __init__(self, fail: int) -> None:
        self.fail, self.calls = fail, 0
        self.phases: list[str] = []

    async def patch_status(self, _gvr: Any, _namespace: str, _name: str, body: Any) -> None:
        self.calls += 1
        if self.calls == self.fail:
            raise TimeoutError("no answer within 10s")
        self.phases.append(body["status"]["phase"])

    async def create(self, _body: Any, *, gvr: Any) -> None:
        pass  # Events


async def test_a_lost_status_write_is_sent_again_so_a_pod_does_not_stay_running() -> None:
    """The Succeeded write times out; it is sent again (1 s later) and lands."""
    kube = _FlakyKube(fail=2)
    simulation = parse_simulation({"nodes": [{"namePrefix": "sim", "count": 1}]})
    kubelet = SimKubelet(kube, None, simulation)  # type: ignore[arg-type]
    kubelet._on_event("ADDED", pod(annotations={DURATION_KEY: "100ms"}))
    timers = asyncio.create_task(kubelet._timers())
    try:
        for _ in range(200):
            if kube.phases[-1:] == ["Succeeded"]:
                break
            await asyncio.sleep(0.05)
    finally:
        timers.cancel()
    assert kube.phases == ["Running", "Succeeded"] and kube.calls == 3
