"""What the dashboard shows of API objects: rows, reasons, pods, events, runtimes, the metric
history, and the server-rendered Runtimes page escaping what a cluster holds."""

from __future__ import annotations

from typing import Any

from trainer.dashboard.policy import summary
from trainer.dashboard.policy.history import MAX_POINTS, History
from trainer.dashboard.policy.runtimes import runtime_row
from trainer.dashboard.views import ENV
from trainer.dashboard.watch.cache import to_yaml
from trainer.jobset import contract as jsc


def job(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": status.pop("labels", {}),
        },
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {}},
        "status": status,
    }


def cond(type_: str, reason: str, message: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:01:00Z",
    }


def test_row_progress_eta_and_nodes_from_the_runtime() -> None:
    ts = {
        "progressPercentage": 140,
        "estimatedRemainingSeconds": 30,
        "lastUpdatedTime": "2026-01-01T00:00:10Z",
        "metrics": [{"name": "loss", "value": "0.5"}],
    }
    runtime = {"spec": {"mlPolicy": {"numNodes": 4}}}
    row = summary.row(job(state="Running", trainerStatus=ts), runtime)
    assert row["state"] == "Running"
    assert row["progress"] == 100.0  # clamped
    assert row["eta"] == 30.0 and row["updated"] == 1767225610.0
    assert row["nodes"] == 4
    assert row["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert summary.row(job())["state"] == "Created"
    assert summary.row(job(state="Bogus"))["state"] == "Created"


def test_state_detail_names_the_kueue_queue_the_failure_and_build_errors() -> None:
    queued = job(state="Suspended", labels={"kueue.x-k8s.io/queue-name": "team-a"})
    assert summary.state_detail(queued) == "queued by Kueue in team-a"
    assert summary.state_detail(job(state="Suspended")) == "suspended"
    failed = job(state="Failed", conditions=[cond("Failed", "FailedJobs", "first failed: x")])
    assert summary.state_detail(failed) == "FailedJobs: first failed: x"
    build = job(state="Pending", conditions=[cond("BuildFailed", "NoRuntime", "not found")])
    assert summary.state_detail(build) == "NoRuntime: not found"
    stale = job(state="Running", conditions=[cond("BuildFailed", "X", "y", status="False")])
    assert summary.state_detail(stale) == ""


def test_pods_show_restarts_and_why_containers_stopped() -> None:
    pod = {
        "metadata": {"name": "p", "labels": {jsc.LABEL_REPLICATED_JOB: "node"}},
        "spec": {"containers": [{"name": "node"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "node",
                    "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 3}},
                }
            ],
        },
    }
    [shown] = summary.pods([pod])
    assert shown["restarts"] == 2 and shown["restarted"] == ["node"]
    assert shown["node"] == "n1" and shown["step"] == "node"
    assert shown["reasons"] == [
        "node: waiting: CrashLoopBackOff",
        "node: previously Error (exit code 3)",
    ]


def test_events_are_merged_in_time_order_and_steps_count_jobs() -> None:
    late = {
        "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": "Started",
        "lastTimestamp": "2026-01-01T00:02:00Z",
    }
    early = {
        "involvedObject": {"kind": "TrainJob", "name": "j"},
        "reason": "ContainerFailed",
        "eventTime": "2026-01-01T00:01:00.000000Z",
        "count": 3,
    }
    assert [(e["object"], e["count"]) for e in summary.events([late, early])] == [
        ("TrainJob/j", 3),
        ("Pod/p", 1),
    ]
    status = {"jobsStatus": [{"name": "node", "active": 2, "ready": 1}]}
    jobs = [{"metadata": {"labels": {jsc.LABEL_REPLICATED_JOB: "node"}}}] * 2
    [step] = summary.steps(job(**status), jobs)
    assert step == {
        "name": "node",
        "jobs": 2,
        "active": 2,
        "ready": 1,
        "succeeded": 0,
        "failed": 0,
        "suspended": 0,
    }


def test_history_records_each_new_report_and_only_numbers() -> None:
    history = History()
    key = ("ns", "j")
    first = {"progressPercentage": 10, "lastUpdatedTime": "2026-01-01T00:00:00Z"}
    first["metrics"] = [{"name": "loss", "value": "0.9"}, {"name": "tag", "value": "best"}]
    assert history.record(key, first)
    assert not history.record(key, dict(first))  # the same report again: no point
    second = {**first, "progressPercentage": 50, "lastUpdatedTime": "2026-01-01T00:00:05Z"}
    second["metrics"] = [{"name": "loss", "value": "nan"}, {"name": "loss2", "value": "1e-3"}]
    assert history.record(key, second)
    charts = history.charts(key)
    assert charts["progress"] == [[1767225600.0, 10.0], [1767225605.0, 50.0]]
    assert charts["metrics"] == {"loss": [[1767225600.0, 0.9]], "loss2": [[1767225605.0, 0.001]]}
    third = {**second, "progressPercentage": 60}
    assert history.record(key, third, seen=1767225604.5)  # seen before the last: kept in order
    assert history.charts(key)["progress"][-1] == [1767225605.0, 60.0]
    for i in range(MAX_POINTS + 5):
        history.record(key, {"progressPercentage": i % 100, "lastUpdatedTime": str(i)})
    assert len(history.charts(key)["progress"]) == MAX_POINTS
    history.forget(key)
    assert history.charts(key) == {"progress": [], "metrics": {}}


def test_runtime_rows_and_the_runtimes_page_escapes_html() -> None:
    runtime = {
        "kind": "TrainingRuntime",
        "metadata": {
            "name": "rt",
            "namespace": "ns",
            "labels": {
                "trainer.kubeflow.org/framework": "torch",
                "trainer.kubeflow.org/support": "deprecated",
            },
            "annotations": {"example.com/deprecation": "<script>alert(1)</script><b>use rt2</b>"},
        },
        "spec": {
            "mlPolicy": {"numNodes": 2, "mpi": {"runLauncherAsNode": True}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "template": {
                                "spec": {"template": {"spec": {"containers": [{"image": "img:1"}]}}}
                            }
                        }
                    ]
                }
            },
        },
    }
    row = runtime_row(runtime)
    assert row["policy"] == "mpi (runLauncherAsNode=true)"
    assert row["numNodes"] == 2 and row["images"] == ["img:1"] and row["framework"] == "torch"
    assert row["deprecation"].startswith("deprecated; example.com/deprecation: <script>")
    # The page is a skeleton: the rows come from /api/, which needs the page's session key
    # (docs/dashboard.md), so nothing of the runtime, hostile text included, is in it.
    html = ENV.get_template("runtimes.html").render(runtimes=[row], scope="all", csrf="c")
    assert "alert(1)" not in html and "use rt2" not in html and "img:1" not in html


def test_pages_hold_no_cluster_data_a_replayed_cookie_could_read() -> None:
    data = {"rows": [{"name": "</script><script>alert(1)</script>"}]}
    html = ENV.get_template("trainjobs.html").render(data=data, scope="all", csrf="c")
    assert "alert(1)" not in html
    assert html.count("<script") == html.count("</script>")  # only the page's own scripts


def test_yaml_shows_scripts_as_blocks() -> None:
    text = to_yaml({"command": ["python", "-c", "import os\nprint(1)\n"]})
    assert text == "command:\n- python\n- -c\n- |\n  import os\n  print(1)\n"
