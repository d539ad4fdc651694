"""The local JobSet controller's policy (trainer.local.executor.controllers.policy.jobset), as pure
functions: from a JobSet and the Jobs it owns to the Jobs to create or delete, the Service, the
Events and the status a user sees with ``kubectl get jobset -o yaml``."""

from __future__ import annotations

import copy
from typing import Any

from trainer.jobset import contract as jc
from trainer.local.executor.controllers.policy import jobset as core
from trainer.local.executor.controllers.policy.batch import CONTROLLER_UID
from trainer.machinery.owners import controller_reference

STAMP = "2026-01-01T00:00:00Z"
Obj = dict[str, Any]


def rjob(name: str, parallelism: int = 1, replicas: int = 1, **extra: Any) -> Obj:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "template": {
                    "metadata": {"labels": {"app": "train"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            }
        },
        **extra,
    }


def jobset(*rjobs: Obj, status: Obj | None = None, **spec: Any) -> Obj:
    return {
        "apiVersion": jc.API_VERSION,
        "kind": jc.KIND,
        "metadata": {"name": "train", "namespace": "ns", "uid": "js-uid"},
        "spec": {"replicatedJobs": list(rjobs), **spec},
        "status": status or {},
    }


def created(js: Obj, plan: core.Plan) -> list[Obj]:
    """The Jobs the plan creates, as the API would hold them."""
    return [core.new_job(js, which) for which in plan.create_jobs]


def with_condition(job: Obj, type_: str, **status: Any) -> Obj:
    job = copy.deepcopy(job)
    job["status"] = {"conditions": [{"type": type_, "status": "True"}], **status}
    return job


def applied(js: Obj, plan: core.Plan) -> Obj:
    """The JobSet once the plan's status is written."""
    return {**js, "status": plan.status if plan.status is not None else js["status"]}


def test_a_new_jobset_gets_its_jobs_service_and_status() -> None:
    js = jobset(rjob("init"), rjob("node", parallelism=2, replicas=2))
    plan = core.plan(core.Observed(js, [], STAMP, service_exists=False))

    assert [w.name for w in plan.create_jobs] == ["train-init-0", "train-node-0", "train-node-1"]
    assert plan.service is not None
    assert plan.service["metadata"]["name"] == "train"
    assert plan.service["spec"] == {
        "clusterIP": "None",
        "selector": {jc.LABEL_JOBSET_NAME: "train"},
        "publishNotReadyAddresses": True,
    }
    job = core.new_job(js, plan.create_jobs[2], {"example.com/ports": "{}"})
    labels = job["metadata"]["labels"]
    assert labels[jc.LABEL_JOBSET_NAME] == "train"
    assert labels[jc.LABEL_REPLICATED_JOB] == "node"
    assert labels[jc.LABEL_JOB_INDEX] == "1"
    assert labels[jc.LABEL_JOB_GLOBAL_INDEX] == "2"
    assert labels[jc.LABEL_GLOBAL_REPLICAS] == "3"
    assert labels[jc.LABEL_RESTART_ATTEMPT] == "0"
    assert len(labels[jc.LABEL_JOB_KEY]) == 40
    assert job["metadata"]["ownerReferences"] == [
        controller_reference("train", "js-uid", api_version=jc.API_VERSION, kind=jc.KIND)
    ]
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["app"] == "train"
    assert pod["metadata"]["annotations"]["example.com/ports"] == "{}"
    assert pod["spec"]["subdomain"] == "train"
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["suspend"] is False
    assert plan.status is not None
    assert plan.status["restarts"] == 0
    assert [s["name"] for s in plan.status["replicatedJobsStatus"]] == ["node", "init"]
    assert "terminalState" not in plan.status
    assert plan.events == []
    # The template in the JobSet is left as it was.
    assert (
        "subdomain" not in js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    )


def test_reconciling_what_was_written_changes_nothing() -> None:
    js = jobset(rjob("node"))
    first = core.plan(core.Observed(js, [], STAMP, service_exists=False))
    again = core.plan(core.Observed(applied(js, first), created(js, first), STAMP))
    assert again.create_jobs == [] and again.delete_jobs == []
    assert again.service is None and again.status is None and again.events == []


def test_depends_on_complete_holds_the_next_jobs_back() -> None:
    js = jobset(rjob("init"), rjob("node", dependsOn=[{"name": "init", "status": "Complete"}]))
    first = core.plan(core.Observed(js, [], STAMP))
    assert [w.name for w in first.create_jobs] == ["train-init-0"]
    (init,) = created(js, first)
    running = core.plan(core.Observed(applied(js, first), [init], STAMP))
    assert running.create_jobs == []
    done = core.plan(
        core.Observed(applied(js, first), [with_condition(init, "Complete", succeeded=1)], STAMP)
    )
    assert [w.name for w in done.create_jobs] == ["train-node-0"]


def test_a_failed_job_without_failure_policy_fails_the_jobset() -> None:
    js = jobset(rjob("node", replicas=2))
    first = core.plan(core.Observed(js, [], STAMP))
    failed, running = created(js, first)
    plan = core.plan(
        core.Observed(applied(js, first), [with_condition(failed, "Failed"), running], STAMP)
    )
    assert plan.status is not None and plan.status["terminalState"] == jc.FAILED
    (cond,) = plan.status["conditions"]
    assert cond["type"] == jc.FAILED and cond["status"] == "True"
    assert cond["reason"] == jc.REASON_FAILED_JOBS
    assert "first failed job: train-node-0" in cond["message"]
    assert cond["lastTransitionTime"] == STAMP
    assert plan.events == [("Warning", jc.REASON_FAILED_JOBS, cond["message"])]
    assert plan.delete_jobs == ["train-node-1"]  # the unfinished one
    assert plan.create_jobs == []
    assert plan.status["replicatedJobsStatus"] == [
        {"name": "node", "ready": 0, "succeeded": 0, "failed": 1, "active": 0, "suspended": 0}
    ]


def test_max_restarts_recreates_the_jobs_then_fails() -> None:
    js = jobset(rjob("node"), failurePolicy={"maxRestarts": 1})
    first = core.plan(core.Observed(js, [], STAMP))
    (job,) = created(js, first)
    js = applied(js, first)
    restart = core.plan(core.Observed(js, [with_condition(job, "Failed")], STAMP))
    assert restart.status is not None
    assert restart.status["restarts"] == 1 and restart.status["restartsCountTowardsMax"] == 1
    assert restart.create_jobs == [] and "terminalState" not in restart.status
    js = applied(js, restart)
    # The next pass deletes the Job of attempt 0 and asks for attempt 1's (its create meets
    # AlreadyExists until the old Job is gone, and is asked for again).
    stale = core.plan(core.Observed(js, [with_condition(job, "Failed")], STAMP))
    assert stale.delete_jobs == ["train-node-0"]
    (again,) = created(js, stale)
    assert again["metadata"]["labels"][jc.LABEL_RESTART_ATTEMPT] == "1"
    final = core.plan(core.Observed(js, [with_condition(again, "Failed")], STAMP))
    assert final.status is not None and final.status["terminalState"] == jc.FAILED
    assert final.status["conditions"][0]["reason"] == jc.REASON_REACHED_MAX_RESTARTS


def test_all_jobs_complete_completes_the_jobset() -> None:
    js = jobset(rjob("node", replicas=2))
    first = core.plan(core.Observed(js, [], STAMP))
    jobs = [with_condition(j, "Complete", succeeded=1) for j in created(js, first)]
    plan = core.plan(core.Observed(applied(js, first), jobs, STAMP))
    assert plan.status is not None and plan.status["terminalState"] == jc.COMPLETED
    assert plan.events == [
        ("Normal", jc.REASON_ALL_JOBS_COMPLETED, "jobset completed successfully")
    ]
    assert plan.delete_jobs == []
    assert plan.status["replicatedJobsStatus"][0]["succeeded"] == 2
    # Done is done: nothing more happens.
    after = core.plan(core.Observed(applied(js, plan), jobs, STAMP))
    assert after.status is None and after.create_jobs == [] and after.events == []


def test_suspend_and_resume() -> None:
    node = rjob("node")
    node["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    js = jobset(node, suspend=True)
    first = core.plan(core.Observed(js, [], STAMP))
    (job,) = created(js, first)
    assert job["spec"]["suspend"] is True
    assert first.status is not None
    (cond,) = first.status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Suspended", "True", "SuspendedJobs")
    assert first.events == [("Normal", jc.REASON_SUSPENDED, "jobset is suspended")]
    assert first.status["replicatedJobsStatus"][0]["suspended"] == 1

    resumed = {**applied(js, first), "spec": {**js["spec"], "suspend": False}}
    plan = core.plan(core.Observed(resumed, [job], STAMP))
    patch = plan.suspend_patches["train-node-0"]
    assert patch["spec"]["suspend"] is False
    assert patch["spec"]["template"]["spec"] == {"nodeSelector": {"zone": "a"}}
    assert patch["spec"]["template"]["metadata"] == {"labels": {"app": "train"}}
    assert plan.status is not None
    (cond,) = plan.status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", jc.REASON_RESUMED)
    assert plan.events == [("Normal", jc.REASON_RESUMED, "jobset is resumed")]


def test_resuming_waits_for_depends_on_before_resuming_the_next_jobs() -> None:
    """Suspended, every Job is created (suspended); resumed, a replicated job's Jobs are
    resumed only once the one it dependsOn is Complete (JobSet's resumeJobsIfNecessary)."""
    js = jobset(
        rjob("init"), rjob("node", dependsOn=[{"name": "init", "status": "Complete"}]), suspend=True
    )
    first = core.plan(core.Observed(js, [], STAMP))
    init, node = created(js, first)
    assert init["spec"]["suspend"] is True and node["spec"]["suspend"] is True

    resumed = {**applied(js, first), "spec": {**js["spec"], "suspend": False}}
    plan = core.plan(core.Observed(resumed, [init, node], STAMP))
    assert sorted(plan.suspend_patches) == ["train-init-0"]
    running = with_condition({**init, "spec": {**init["spec"], "suspend": False}}, "Running")
    running["status"] = {"active": 1}
    plan = core.plan(core.Observed(applied(resumed, plan), [running, node], STAMP))
    assert plan.suspend_patches == {}
    done = with_condition(running, "Complete", succeeded=1)
    plan = core.plan(core.Observed(applied(resumed, plan), [done, node], STAMP))
    assert sorted(plan.suspend_patches) == ["train-node-0"]
    assert plan.suspend_patches["train-node-0"]["spec"]["suspend"] is False


def test_a_jobset_managed_by_another_controller_is_left_alone() -> None:
    assert core.is_managed(jobset(rjob("node")))
    assert core.is_managed(jobset(rjob("node"), managedBy=jc.MANAGED_BY_JOBSET))
    assert not core.is_managed(jobset(rjob("node"), managedBy="kueue.x-k8s.io/multikueue"))


def sshd_rjob(name: str) -> Obj:
    out = rjob(name)
    out["template"]["spec"]["template"]["spec"]["containers"] = [
        {"name": "node", "command": ["/usr/sbin/sshd", "-D"]}
    ]
    return out


def test_a_ready_wait_on_sshd_nodes_is_timed() -> None:
    launcher = rjob("launcher", dependsOn=[{"name": "node", "status": "Ready"}])
    js = jobset(sshd_rjob("node"), launcher)
    first = core.plan(core.Observed(js, [], STAMP, clock=100.0, ready_timeout=30.0))
    assert [w.name for w in first.create_jobs] == ["train-node-0"]
    assert first.ready_waits == {"launcher": 100.0}
    assert first.requeue_after is not None and 30.0 < first.requeue_after < 30.1
    js = applied(js, first)
    jobs = created(js, first)
    later = core.plan(
        core.Observed(
            js, jobs, STAMP, clock=120.0, ready_timeout=30.0, ready_waits=first.ready_waits
        )
    )
    assert later.requeue_after is not None and 10.0 < later.requeue_after < 10.1
    pod = {
        "metadata": {
            "name": "train-node-0-0-abcde",
            "namespace": "ns",
            "labels": {jc.LABEL_JOBSET_NAME: "train", CONTROLLER_UID: "job-uid"},
        },
        "status": {"phase": "Pending"},
    }
    expired = core.plan(
        core.Observed(
            js,
            jobs,
            STAMP,
            clock=131.0,
            pods=[pod],
            ready_timeout=30.0,
            ready_waits=first.ready_waits,
        )
    )
    assert expired.status is not None and expired.status["terminalState"] == jc.FAILED
    message = expired.status["conditions"][0]["message"]
    assert expired.status["conditions"][0]["reason"] == core.REASON_READY_TIMEOUT
    assert "replicated job launcher waited more than 30s for node to be Ready" in message
    assert "pod ns/train-node-0-0-abcde: Pending, not Ready" in message
    assert expired.delete_jobs == ["train-node-0"]


def test_declared_ports_are_the_trainer_port_and_every_container_port() -> None:
    node = rjob("node")
    node["template"]["spec"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 8080},
        {"containerPort": 70000},
    ]
    assert core.declared_ports(jobset(node)) == [8080, 29500]
