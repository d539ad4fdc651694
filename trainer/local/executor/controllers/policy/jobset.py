"""The policy of the local JobSet controller, as pure functions: from what it observes (the
JobSet, the Jobs it owns, the pods when a wait is timed, the clock passed in) to what it
should do (Jobs to delete and create, the headless Service, suspend changes, Events) and the
status JobSet writes (conditions, ``replicatedJobsStatus``, restarts, ``terminalState``).
No client, no event loop, no I/O: :mod:`~trainer.local.executor.controllers.jobset` reads its
caches, calls :func:`plan` and makes the writes (docs/local-plane.md, "The executor").

It follows upstream's controller
(https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/controllers/jobset_controller.go):
Jobs per replicated job and replica with JobSet's names, labels and annotations, dependsOn,
success and failure policies with restarts, suspend and resume. Beyond upstream, local runs
only: with ``ready_timeout`` (``trainer run --ready-timeout``), a replicated job that has waited
that long for a ``dependsOn`` with status Ready on a job whose pods run sshd (an MPI launcher
waiting for its nodes) fails the JobSet with reason :data:`REASON_READY_TIMEOUT` and a message
naming each pod not Ready and the probe holding it
(:mod:`~trainer.local.executor.controllers.policy.waiting`). The wait is timed from when the
controller first saw it; other waits (a data cache loading, an initializer to Complete) are never
timed.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.jobset import contract as jc
from trainer.local.executor.controllers.policy.batch import (
    COMPLETE,
    FAILED,
    job_condition,
    job_finished,
    job_ready,
)
from trainer.local.executor.controllers.policy.waiting import not_ready
from trainer.local.executor.policy.sshports import is_sshd
from trainer.machinery.conditions import set_condition
from trainer.machinery.owners import controller_reference

Obj = dict[str, Any]

TRAINER_PORT = 29500
REASON_READY_TIMEOUT = "DependsOnReadyTimeout"
NORMAL, WARNING = "Normal", "Warning"
READY_RECHECK_SLACK = 0.05
"""Seconds past a ready-wait deadline at which the JobSet is looked at again."""


# --- reading the spec -----------------------------------------------------------------------
def replicated_jobs(js: Mapping[str, Any]) -> list[Obj]:
    return list((js.get("spec") or {}).get("replicatedJobs") or [])


def replicas(rjob: Mapping[str, Any]) -> int:
    return int(rjob.get("replicas", 1))


def job_template(rjob: Mapping[str, Any]) -> Obj:
    """The replicated job's Job template (``template``)."""
    return dict(rjob.get("template") or {})


def pod_template(rjob: Mapping[str, Any]) -> Obj:
    """The replicated job's pod template (``template.spec.template``)."""
    return dict((job_template(rjob).get("spec") or {}).get("template") or {})


def pod_spec(rjob: Mapping[str, Any]) -> Obj:
    return dict(pod_template(rjob).get("spec") or {})


def network(js: Mapping[str, Any]) -> Obj:
    return dict((js.get("spec") or {}).get("network") or {})


def subdomain(js: Mapping[str, Any]) -> str:
    return jc.subdomain(str(js["metadata"]["name"]), network(js).get("subdomain"))


def declared_ports(js: Mapping[str, Any]) -> list[int]:
    """The ports a JobSet's pods listen on, each mapped to a host port of its own: 29500
    (torchrun's, which the controller may add later) and every containerPort its pod templates
    declare (the data cache's 50051, say), so two JobSets never collide on one."""
    ports = {TRAINER_PORT}
    for rjob in replicated_jobs(js):
        spec = pod_spec(rjob)
        for ctr in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for port in ctr.get("ports") or []:
                number = port.get("containerPort")
                if isinstance(number, int) and 0 < number < 65536:
                    ports.add(number)
    return sorted(ports)


# --- conditions -----------------------------------------------------------------------------
def condition(status: Mapping[str, Any], type_: str) -> Obj | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


# --- the Jobs ---------------------------------------------------------------------------------
def job_labels(
    js: Mapping[str, Any], rjob: Mapping[str, Any], index: int, global_index: int
) -> dict[str, str]:
    """The labels (and annotations) JobSet puts on Job ``index`` of ``rjob`` and its pods."""
    meta = js["metadata"]
    status = js.get("status") or {}
    rjobs = replicated_jobs(js)
    group = rjob.get("groupName") or "default"
    group_jobs = [r for r in rjobs if (r.get("groupName") or "default") == group]
    name = jc.job_name(meta["name"], rjob["name"], index)
    group_index = sum(replicas(r) for r in group_jobs[: group_jobs.index(dict(rjob))]) + index
    return {
        jc.LABEL_JOBSET_NAME: meta["name"],
        jc.LABEL_JOBSET_UID: meta["uid"],
        jc.LABEL_REPLICATED_JOB: rjob["name"],
        jc.LABEL_RESTART_ATTEMPT: str(status.get("restarts", 0)),
        jc.LABEL_REPLICATED_JOB_REPLICAS: str(replicas(rjob)),
        jc.LABEL_GLOBAL_REPLICAS: str(sum(replicas(r) for r in rjobs)),
        jc.LABEL_JOB_INDEX: str(index),
        jc.LABEL_JOB_GLOBAL_INDEX: str(global_index),
        jc.LABEL_JOB_KEY: hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
        jc.LABEL_GROUP_NAME: group,
        jc.LABEL_GROUP_REPLICAS: str(sum(replicas(r) for r in group_jobs)),
        jc.LABEL_JOB_GROUP_INDEX: str(group_index),
    }


def owner_reference(js: Mapping[str, Any]) -> Obj:
    meta = js["metadata"]
    return controller_reference(meta["name"], meta["uid"], api_version=jc.API_VERSION, kind=jc.KIND)


@dataclass(frozen=True)
class NewJob:
    """A Job to create: replica ``index`` of replicated job ``rjob`` (``global_index`` counts
    over every replicated job)."""

    name: str
    rjob: str
    index: int
    global_index: int


def new_job(
    js: Mapping[str, Any],
    which: NewJob,
    pod_annotations: Mapping[str, str] | None = None,
) -> Obj:
    """The Job JobSet creates for ``which``; ``pod_annotations`` are added to its pod template
    (the local plane's host ports)."""
    meta = js["metadata"]
    rjob = next(r for r in replicated_jobs(js) if r["name"] == which.rjob)
    template = copy.deepcopy(job_template(rjob))
    labels = job_labels(js, rjob, which.index, which.global_index)
    job_meta = template.get("metadata") or {}
    job_spec = template.get("spec") or {}
    pod = job_spec.setdefault("template", {})
    pod_meta = pod.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
    pod_meta["annotations"] = {
        **(pod_meta.get("annotations") or {}),
        **labels,
        **(pod_annotations or {}),
    }
    spec = pod.setdefault("spec", {})
    if network(js).get("enableDNSHostnames", True):
        spec["subdomain"] = subdomain(js)
    spec.setdefault("restartPolicy", "OnFailure")
    job_spec.setdefault("completionMode", "Indexed")
    job_spec["suspend"] = bool((js.get("spec") or {}).get("suspend"))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": which.name,
            "namespace": meta["namespace"],
            "labels": {**(job_meta.get("labels") or {}), **labels},
            "annotations": {**(job_meta.get("annotations") or {}), **labels},
            "ownerReferences": [owner_reference(js)],
        },
        "spec": job_spec,
    }


def headless_service(js: Mapping[str, Any]) -> Obj:
    """The headless Service that gives the JobSet's pods their DNS names."""
    meta = js["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": subdomain(js),
            "namespace": meta["namespace"],
            "labels": {jc.LABEL_JOBSET_NAME: meta["name"]},
            "ownerReferences": [owner_reference(js)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {jc.LABEL_JOBSET_NAME: meta["name"]},
            "publishNotReadyAddresses": network(js).get("publishNotReadyAddresses", True),
        },
    }


def resume_patch(rjob: Mapping[str, Any], suspend: bool) -> Obj:
    """The merge patch that suspends a Job, or resumes it merging in its pod template's fields
    that may change while suspended, as JobSet does."""
    patch: Obj = {"spec": {"suspend": suspend}}
    if not suspend:
        tmpl = pod_template(rjob)
        pod_meta = tmpl.get("metadata") or {}
        spec = tmpl.get("spec") or {}
        patch["spec"]["template"] = {
            "metadata": {k: pod_meta[k] for k in jc.MUTABLE_POD_METADATA if k in pod_meta},
            "spec": {k: spec[k] for k in jc.MUTABLE_POD_SPEC if k in spec},
        }
    return patch


# --- observing and planning -----------------------------------------------------------------
@dataclass(frozen=True)
class Observed:
    """What the controller saw: ``jobs`` are every Job the JobSet owns (all restart attempts);
    ``pods`` the pods of its namespace (read only when a ready wait expires); ``clock`` is
    monotonic seconds and ``stamp`` the time written into conditions; ``ready_waits`` maps a
    replicated job to when its timed wait was first seen."""

    jobset: Obj
    jobs: list[Obj]
    stamp: str
    clock: float = 0.0
    service_exists: bool = True
    pods: list[Obj] = field(default_factory=list)
    ready_timeout: float | None = None
    ready_waits: Mapping[str, float] = field(default_factory=dict)


@dataclass
class Plan:
    """What to do, in this order: delete ``delete_jobs`` (stale restart attempts, and on a
    terminal state every unfinished Job; foreground), create ``service`` and ``create_jobs``,
    send ``suspend_patches`` (Job name -> merge patch), record ``events`` (type, reason,
    message), write ``status`` (None when unchanged); come back after ``requeue_after``
    seconds (a ready wait's deadline) with ``ready_waits`` kept."""

    delete_jobs: list[str] = field(default_factory=list)
    service: Obj | None = None
    create_jobs: list[NewJob] = field(default_factory=list)
    suspend_patches: dict[str, Obj] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    status: Obj | None = None
    requeue_after: float | None = None
    ready_waits: dict[str, float] = field(default_factory=dict)


def is_managed(js: Mapping[str, Any]) -> bool:
    """Whether JobSet's own controller reconciles it (``spec.managedBy`` unset or its own)."""
    return (js.get("spec") or {}).get("managedBy") in (None, "", jc.MANAGED_BY_JOBSET)


def _attempt(job: Mapping[str, Any]) -> str:
    return str(((job.get("metadata") or {}).get("labels") or {}).get(jc.LABEL_RESTART_ATTEMPT))


def plan(seen: Observed) -> Plan:
    """The reconcile of one JobSet (managed by JobSet, not being deleted)."""
    js = seen.jobset
    name = js["metadata"]["name"]
    spec = js.get("spec") or {}
    old_status = js.get("status") or {}
    status = copy.deepcopy(old_status)
    status.setdefault("restarts", 0)
    out = Plan(ready_waits=dict(seen.ready_waits))
    attempt = str(status.get("restarts", 0))
    owned = {j["metadata"]["name"]: j for j in seen.jobs}
    current = {n: j for n, j in owned.items() if _attempt(j) == attempt}
    out.delete_jobs = [n for n in owned if n not in current]
    suspended = bool(spec.get("suspend"))
    rjobs = replicated_jobs(js)
    terminal = status.get("terminalState")

    def finish(type_: str, reason: str, message: str) -> None:
        new = {"type": type_, "status": "True", "reason": reason, "message": message}
        status["conditions"] = set_condition(
            status.get("conditions"), new, seen.stamp, transitions_only=True
        )
        status["terminalState"] = type_
        out.events.append((NORMAL if type_ == jc.COMPLETED else WARNING, reason, message))
        out.delete_jobs += [
            n for n, j in owned.items() if not job_finished(j) and n not in out.delete_jobs
        ]

    if not terminal:
        # Policies first: a JobSet that fails or completes now creates no more Jobs.
        _policies(js, status, rjobs, current, finish)
        terminal = status.get("terminalState")
    if not terminal and not suspended:
        expired = _ready_wait(seen, rjobs, current, out)
        if expired:
            finish(jc.FAILED, REASON_READY_TIMEOUT, expired)
            terminal = status.get("terminalState")
    if not terminal and status.get("restarts", 0) == old_status.get("restarts", 0):
        if not seen.service_exists:
            out.service = headless_service(js)
        _ensure_jobs(js, rjobs, current, suspended, out)
    status["replicatedJobsStatus"] = count(rjobs, current, name)
    was = condition(old_status, jc.SUSPENDED)
    was_suspended = was is not None and was.get("status") == "True"
    if suspended:
        new = {
            "type": jc.SUSPENDED,
            "status": "True",
            "reason": jc.REASON_SUSPENDED,
            "message": "jobset is suspended",
        }
        status["conditions"] = set_condition(
            status.get("conditions"), new, seen.stamp, transitions_only=True
        )
        if not was_suspended:
            out.events.append((NORMAL, jc.REASON_SUSPENDED, "jobset is suspended"))
    elif condition(status, jc.SUSPENDED):
        new = {
            "type": jc.SUSPENDED,
            "status": "False",
            "reason": jc.REASON_RESUMED,
            "message": "jobset is resumed",
        }
        status["conditions"] = set_condition(
            status.get("conditions"), new, seen.stamp, transitions_only=True
        )
        if was_suspended:
            out.events.append((NORMAL, jc.REASON_RESUMED, "jobset is resumed"))
    if status != old_status:
        out.status = status
    return out


def _ensure_jobs(
    js: Obj, rjobs: list[Obj], current: dict[str, Obj], suspended: bool, out: Plan
) -> None:
    """Create the missing Jobs of replicated jobs whose dependencies are met (all of them while
    suspended), and bring every unfinished Job's suspend in line with the JobSet's: all are
    suspended with it, and resumed only once their dependencies are met."""
    name = js["metadata"]["name"]
    global_index = 0
    for rjob in rjobs:
        startable = suspended or dependencies_met(rjob, rjobs, current, name)
        for index in range(replicas(rjob)):
            job_name = jc.job_name(name, rjob["name"], index)
            job = current.get(job_name)
            if job is None and startable:
                out.create_jobs.append(NewJob(job_name, rjob["name"], index, global_index))
                # Counted as JobSet counts a Job it just created: nothing run yet.
                current[job_name] = {"spec": {"suspend": suspended}}
            elif (
                job is not None
                and startable
                and not job_finished(job)
                and bool((job.get("spec") or {}).get("suspend")) != suspended
            ):
                # A resumed JobSet resumes a replicated job's Jobs only once its dependsOn is
                # reached (JobSet's resumeJobsIfNecessary): those created while it was
                # suspended wait, suspended, as if not yet created.
                out.suspend_patches[job_name] = resume_patch(rjob, suspended)
            global_index += 1


def dependencies_met(
    rjob: Mapping[str, Any], rjobs: list[Obj], current: Mapping[str, Obj], name: str
) -> bool:
    """Whether every ``dependsOn`` of ``rjob`` holds: each Job of the named replicated job
    exists and is Complete (status Complete) or Ready or finished (status Ready)."""
    for dep in rjob.get("dependsOn") or []:
        other = next((r for r in rjobs if r["name"] == dep["name"]), None)
        if other is None:
            return False
        jobs = [current.get(jc.job_name(name, other["name"], i)) for i in range(replicas(other))]
        if any(j is None for j in jobs):
            return False
        if dep.get("status") == COMPLETE:
            if not all(job_condition(j, COMPLETE) for j in jobs if j):
                return False
        elif not all(job_ready(j) or job_finished(j) for j in jobs if j):
            return False
    return True


def runs_sshd(rjobs: list[Obj], name: str) -> bool:
    """Whether replicated job ``name`` runs sshd (an MPI node)."""
    rjob = next((r for r in rjobs if r.get("name") == name), {})
    return any(is_sshd(c) for c in pod_spec(rjob).get("containers") or [])


def _ready_wait(seen: Observed, rjobs: list[Obj], current: dict[str, Obj], out: Plan) -> str:
    """The failure message when a replicated job waited longer than ``ready_timeout`` for a
    dependsOn on Ready, else ``""`` (and ``requeue_after`` for when it would expire)."""
    if seen.ready_timeout is None:
        return ""
    name = seen.jobset["metadata"]["name"]
    for rjob in rjobs:
        deps = [
            d
            for d in rjob.get("dependsOn") or []
            if d.get("status") != COMPLETE and runs_sshd(rjobs, str(d.get("name")))
        ]
        key = str(rjob["name"])
        if not deps or dependencies_met(rjob, rjobs, current, name):
            out.ready_waits.pop(key, None)
            continue
        started = out.ready_waits.setdefault(key, seen.clock)
        left = started + seen.ready_timeout - seen.clock
        if left > 0:
            due = left + READY_RECHECK_SLACK
            out.requeue_after = due if out.requeue_after is None else min(out.requeue_after, due)
            continue
        waits = ", ".join(str(d.get("name")) for d in deps)
        pods = not_ready(seen.pods, name)
        detail = "; ".join(pods) if pods else "no pod of it is Ready yet"
        return (
            f"replicated job {rjob['name']} waited more than {seen.ready_timeout:g}s for "
            f"{waits} to be Ready (trainer run --ready-timeout): {detail}"
        )
    return ""


def count(rjobs: list[Obj], current: Mapping[str, Obj], name: str) -> list[Obj]:
    """``replicatedJobsStatus``: per replicated job, its Jobs that are ready, succeeded,
    failed, active and suspended; sorted by name, descending, as JobSet writes it."""
    counts = []
    for rjob in rjobs:
        jobs = [
            j
            for i in range(replicas(rjob))
            if (j := current.get(jc.job_name(name, rjob["name"], i)))
        ]
        unfinished = [j for j in jobs if not job_finished(j)]
        counts.append(
            {
                "name": rjob["name"],
                "ready": sum(1 for j in unfinished if job_ready(j)),
                "succeeded": sum(1 for j in jobs if job_condition(j, COMPLETE)),
                "failed": sum(1 for j in jobs if job_condition(j, FAILED)),
                "active": sum(
                    1 for j in unfinished if int((j.get("status") or {}).get("active") or 0) > 0
                ),
                "suspended": sum(1 for j in unfinished if (j.get("spec") or {}).get("suspend")),
            }
        )
    return sorted(counts, key=lambda c: c["name"], reverse=True)


def _policies(
    js: Obj,
    status: Obj,
    rjobs: list[Obj],
    current: Mapping[str, Obj],
    finish: Callable[[str, str, str], None],
) -> None:
    """The failure policy (fail, or restart every Job while restarts remain), then the success
    policy (all or any of the target replicated jobs' Jobs Complete)."""
    spec = js.get("spec") or {}
    name = js["metadata"]["name"]
    failed = [j for j in current.values() if job_condition(j, FAILED)]
    if failed:
        first = sorted(failed, key=lambda j: j["metadata"]["name"])[0]["metadata"]["name"]
        policy = spec.get("failurePolicy")
        if policy is None:
            finish(
                jc.FAILED,
                jc.REASON_FAILED_JOBS,
                f"jobset failed due to one or more job failures (first failed job: {first})",
            )
            return
        max_restarts = int(policy.get("maxRestarts") or 0)
        towards_max = status.get("restartsCountTowardsMax", status.get("restarts"))
        if int(towards_max or 0) >= max_restarts:
            finish(
                jc.FAILED,
                jc.REASON_REACHED_MAX_RESTARTS,
                f"jobset failed due to reaching max number of restarts (first failed job: {first})",
            )
            return
        status["restarts"] = int(status.get("restarts", 0)) + 1
        status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax", 0)) + 1
        return
    success = spec.get("successPolicy") or {"operator": "All"}
    targets = success.get("targetReplicatedJobs") or [r["name"] for r in rjobs]
    target_jobs = [
        current.get(jc.job_name(name, r["name"], i))
        for r in rjobs
        if r["name"] in targets
        for i in range(replicas(r))
    ]
    done = [j is not None and job_condition(j, COMPLETE) for j in target_jobs]
    if target_jobs and (all(done) if success.get("operator", "All") == "All" else any(done)):
        finish(jc.COMPLETED, jc.REASON_ALL_JOBS_COMPLETED, "jobset completed successfully")
