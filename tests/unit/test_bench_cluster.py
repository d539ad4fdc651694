"""hack/bench/cluster.py's pure parts: the TrainJob it creates (KWOK runs its pods exactly the
drawn time) and how it counts the controller's requests in kube-apiserver's audit log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack/bench"))

from cluster import CONTROLLER_USER, audit_counts, trainjob  # noqa: E402


def test_the_trainjob_asks_kwok_for_an_exact_run_time_and_one_gpu_per_pod() -> None:
    job = trainjob("tj-00001", pods=8, run_seconds=37)
    assert job["spec"]["trainer"] == {
        "numNodes": 8,
        "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
    }
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    annotations = pod["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert annotations["annotations"]["pod-complete.stage.kwok.x-k8s.io/delay"] == "37s"
    assert annotations["annotations"]["pod-complete.stage.kwok.x-k8s.io/jitter-delay"] == "37s"


def test_audit_counts_only_the_controllers_requests_from_the_offset(tmp_path: Path) -> None:
    def event(user: str, verb: str, resource: str, sub: str = "") -> str:
        ref = {"resource": resource, **({"subresource": sub} if sub else {})}
        return json.dumps({"user": {"username": user}, "verb": verb, "objectRef": ref})

    log = tmp_path / "audit.log"
    log.write_text(event(CONTROLLER_USER, "patch", "jobsets") + "\n")
    _, _, offset = audit_counts(log, 0)
    with log.open("a") as out:
        out.write(event(CONTROLLER_USER, "patch", "trainjobs", "status") + "\n")
        out.write(event("system:kube-scheduler", "create", "bindings") + "\n")
        out.write("not json\n")
        out.write(event(CONTROLLER_USER, "update", "leases") + "\n")
    verbs, detail, end = audit_counts(log, offset)
    assert verbs == {"patch": 1, "update": 1}
    assert detail == {"patch trainjobs/status": 1, "update leases": 1}
    assert end == log.stat().st_size
