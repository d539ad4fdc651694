"""One reconcile of a TrainJob (docs/design.md, "One reconcile"):

observe (watch caches) -> skip foreign managedBy and stop building once finished -> runtime
from the snapshot (or the live runtime, snapshotted now) -> pure render -> server-side apply of
the objects that differ from what is cached -> pure status -> ``/status`` merge patch only
when it changed. A settled TrainJob costs no API writes.

The reconciler names no plugin: it builds through the framework the registry gives it
(render, the Status phase), and fills the build's Observed from the plugins' declared watches
(:func:`trainer.runtime.watch.observe`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer.api import constants as c
from trainer.api.conditions import is_true
from trainer.api.load import ObjectError, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob, TrainJobStatus
from trainer.controller import events as ev
from trainer.controller.applydiff import (
    AppliedConfigs,
    any_active,
    being_deleted,
    drops_mutable,
    jobset_suspended,
    needs_recreate,
    refused_as_immutable,
)
from trainer.controller.failures import (
    ContainerFailure,
    FailedPods,
    describe,
    event_message,
    jobset_failures,
)
from trainer.controller.lifecycle import deadline_remaining, is_finished, run_policy, ttl_remaining
from trainer.controller.status import BuildFailure, desired_status, unserved_message
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSet
from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.rest import APIError, Kube
from trainer.machinery.messages import truncate
from trainer.machinery.times import format_time
from trainer.machinery.workqueue import Result
from trainer.plugins.registry import framework_for, render
from trainer.runtime.credentials import generate_credential
from trainer.runtime.framework import Framework
from trainer.runtime.info import BuildContext, BuildError, Observed, Runtime, SSHKeyPair
from trainer.runtime.snapshot import read_snapshot, snapshot_name
from trainer.runtime.watch import observe

log = logging.getLogger(__name__)

FIELD_MANAGER = c.FIELD_MANAGER
RUNTIME_RETRY_SECONDS = 60.0
RECREATE_RETRY_SECONDS = 1.0
EVENT_CONTAINER_FAILED = "ContainerFailed"
"""Beyond upstream (Training Operator v1 said ``ExitedWithCode``): one Warning Event per failed
container termination of a TrainJob's pods (docs/troubleshooting.md)."""


@dataclass
class Caches:
    """The watch caches a reconcile reads (dict objects, never mutated).

    The controller's own: TrainJobs, runtimes, JobSets, and the ConfigMaps and Secrets builds
    create (they carry the TrainJob-name label; the runtime snapshot is one). ``watched``: the
    caches of the plugins' declared watches, by watch name (watches of the same kind, namespace
    and selectors share one cache, also with the controller's own)."""

    trainjobs: Informer
    jobsets: Informer
    config_maps: Informer
    secrets: Informer
    cluster_runtimes: Informer
    runtimes: Informer
    pods: Informer | None = None
    watched: dict[str, Informer] = field(default_factory=dict)

    def informers(self) -> list[Informer]:
        """Every distinct cache, the controller's own first."""
        out = [
            self.trainjobs,
            self.jobsets,
            self.config_maps,
            self.secrets,
            self.cluster_runtimes,
            self.runtimes,
            *([self.pods] if self.pods is not None else []),
        ]
        for informer in self.watched.values():
            if not any(informer is known for known in out):
                out.append(informer)
        return out


def without_trainer_status(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` without ``trainerStatus`` (the status server's field)."""
    return {k: v for k, v in status.items() if k != "trainerStatus"}


ADDITIVE_STATUS_FIELDS = frozenset({"state", "startTime", "completionTime"})
"""Status fields this project adds to upstream's (README, "Additive API fields")."""


def upstream_status(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` without our additive fields and ``trainerStatus``: what upstream's
    controller writes too."""
    return {
        k: v for k, v in without_trainer_status(status).items() if k not in ADDITIVE_STATUS_FIELDS
    }


def status_patch(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch for ``/status`` that takes ``current`` to ``desired``, or None when
    nothing the controller owns differs, or when it would be the TrainJob's first status and
    would carry only our additive fields.

    ``trainerStatus`` belongs to the status server (SSA manager ``trainer-status``): it is
    left out of both the comparison and the patch, so a merge patch built from a cached copy
    never puts back an older trainerStatus than the one the server just wrote.

    The additive fields (``state``, ``startTime``, ``completionTime``) ride along with a
    write of upstream's own fields, never cost one of their own on a TrainJob without a
    status: upstream's first write carries ``jobsStatus`` (once JobSet reports its status) or
    a condition, and so does ours, so a TrainJob costs the status writes upstream's
    controller makes (docs/design.md, "One reconcile", step 5). A TrainJob that has a status
    (written by us or by upstream's controller before it) gets them as soon as they differ."""
    status = without_trainer_status(desired)
    now = without_trainer_status(current)
    if now == status:
        return None
    if not now and not upstream_status(status):
        return None
    return {"status": status}


STATUS_HOLD_SECONDS = 1.0
"""How long a change of ``jobsStatus``'s counts alone waits before it is written (docs/design.md,
"One reconcile", step 5)."""


def counts_only(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether ``desired`` differs from an existing ``current`` status in ``jobsStatus`` alone:
    the same conditions, state and times, only a replicated job's counts moved."""
    now, want = without_trainer_status(current), without_trainer_status(desired)
    if not now or now == want:
        return False
    return {k: v for k, v in now.items() if k != "jobsStatus"} == {
        k: v for k, v in want.items() if k != "jobsStatus"
    }


def build_context(
    *,
    ssh_keygen: Callable[[], SSHKeyPair],
    feature_gates: dict[str, bool] | None = None,
    status_server_url: str | None = None,
    status_server_secret: tuple[str, str] | None = None,
    credential_gen: Callable[[], str] = generate_credential,
) -> BuildContext:
    """The controller's build context. ``status_server_url`` (base URL, ``https://host:port``)
    and ``status_server_secret`` (namespace and name of the webhook certificate Secret) are
    used when the TrainJobStatus gate is on."""
    namespace, name = status_server_secret or (
        c.DEFAULT_OPERATOR_NAMESPACE,
        c.DEFAULT_WEBHOOK_SECRET_NAME,
    )
    return BuildContext(
        ssh_keygen=ssh_keygen,
        credential_gen=credential_gen,
        feature_gates=feature_gates or {},
        status_server_url=status_server_url,
        status_server_secret_name=name,
        status_server_secret_namespace=namespace,
    )


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        caches: Caches,
        *,
        ctx: BuildContext,
        framework: Framework | None = None,
        now: Callable[[], dt.datetime] | None = None,
        on_ttl_deletion: Callable[[float], None] | None = None,
        failed_pods: FailedPods | None = None,
    ) -> None:
        """``framework``: the plugins (default: the registry's for the context's feature
        gates); ``caches.watched`` holds a cache for each watch they declare.
        ``on_ttl_deletion``: called with how late (seconds after expiry) each TrainJob whose
        TTL after finishing expired was deleted (the metrics hook)."""
        self.on_ttl_deletion = on_ttl_deletion
        self.failed_pods = failed_pods
        self._announced: set[tuple[str, str, str]] = set()
        self.kube = kube
        self.caches = caches
        self.now = now or (lambda: dt.datetime.now(dt.UTC))
        self.ctx = ctx
        self.framework = framework or framework_for(ctx)
        self.watches = self.framework.watches(ctx)
        self.events = ev.EventRecorder(kube, lambda: format_time(self.now()))
        self.applied = AppliedConfigs()
        self.status_held: dict[str, dt.datetime] = {}
        """When a counts-only status change was first seen, per TrainJob (:meth:`_status_hold`)."""
        """What this process last applied for each TrainJob it builds (the skip-if-unchanged
        check; forgotten once the TrainJob is gone or finished)."""

    # --- observing ------------------------------------------------------------------------
    def _runtime(self, job: TrainJob) -> tuple[Runtime | None, str | None, BuildFailure | None]:
        """(runtime, unsupported-message, build failure): from the snapshot, else live."""
        assert job.spec is not None and job.metadata is not None
        ref = job.spec.runtime_ref
        if ref.api_group != c.GROUP or ref.kind not in (
            c.KIND_TRAINING_RUNTIME,
            c.KIND_CLUSTER_TRAINING_RUNTIME,
        ):
            return None, f"unsupported runtime: {ref.kind}.{ref.api_group}", None
        namespace = job.metadata.namespace or "default"
        snapshot = self.caches.config_maps.get(namespace, snapshot_name(job.metadata.name or ""))
        if snapshot is not None:
            try:
                return read_snapshot(job, snapshot), None, None
            except BuildError as exc:
                return None, None, BuildFailure("InvalidRuntimeSnapshot", str(exc))
        if ref.kind == c.KIND_TRAINING_RUNTIME:
            data = self.caches.runtimes.get(namespace, ref.name)
            missing = f"TrainingRuntime specified in TrainJob is not found: {namespace}/{ref.name}"
        else:
            data = self.caches.cluster_runtimes.get(None, ref.name)
            missing = f"not found ClusterTrainingRuntime specified in TrainJob: {ref.name}"
        if data is None:
            return None, None, BuildFailure("RuntimeNotFound", missing)
        try:
            runtime = parse_object(data)
        except ObjectError as exc:
            return None, None, BuildFailure("InvalidRuntime", str(exc))
        if not isinstance(runtime, TrainingRuntime | ClusterTrainingRuntime):
            return None, None, BuildFailure("InvalidRuntime", f"{ref.name} is not a runtime")
        return runtime, None, None

    def _observed(self, job: TrainJob, runtime: Runtime, jobset: dict[str, Any] | None) -> Observed:
        """The JobSet and runtime snapshot (the controller's own), and what each plugin's
        watches collect for this TrainJob."""
        assert job.metadata is not None
        namespace, name = job.metadata.namespace or "default", job.metadata.name or ""
        config_maps = {}
        snapshot = self.caches.config_maps.get(namespace, snapshot_name(name))
        if snapshot is not None:
            config_maps[snapshot_name(name)] = snapshot
        base = Observed(
            jobset=JobSet.from_wire(jobset) if jobset is not None else None,
            config_maps=config_maps,
        )
        return observe(self.watches, self.caches.watched, job, runtime, base)

    # --- the reconcile --------------------------------------------------------------------
    async def reconcile(self, key: str) -> Result:
        namespace, _, name = key.partition("/")
        data = self.caches.trainjobs.get(namespace, name)
        if data is None:
            self.applied.forget(key)
            self.status_held.pop(key, None)
            if self.failed_pods is not None:
                self.failed_pods.forget(namespace, name)
            return Result()  # deleted: garbage collection removes what it owned
        try:
            job = TrainJob.from_wire(data)
        except Exception as exc:  # an object stored under an unexpected schema
            log.error("TrainJob %s cannot be read: %s", key, exc)
            return Result()
        if job.spec is None or job.metadata is None:
            return Result()
        if job.spec.managed_by != c.MANAGED_BY_TRAINER:
            return Result()  # MultiKueue delegation: no objects, no status

        now = self.now()
        jobset = self.caches.jobsets.get(namespace, name)
        failure: BuildFailure | None = None
        unsupported: str | None = None
        requeue: float | None = None
        error: Exception | None = None
        deadline_exceeded = False
        written: list[dict[str, Any]] = []

        runtime: Runtime | None = None
        finished = is_finished(job)
        # Nothing is built for a finished TrainJob; its runtime only for a TTL it does not set.
        if finished:
            self.applied.forget(key)
        if not finished:
            runtime, unsupported, failure = self._runtime(job)
        elif job.spec.ttl_seconds_after_finished is None:
            runtime, _, _ = self._runtime(job)
        policy = run_policy(job, runtime)
        if not finished:
            if runtime is not None:
                try:
                    jobset, requeue = await self._apply_objects(key, job, runtime, jobset, written)
                except BuildError as exc:
                    failure = BuildFailure("BuildError", str(exc))
                except APIError as exc:
                    if exc.is_namespace_terminating:
                        # The namespace is being deleted with everything in it, this TrainJob
                        # included: nothing to build, report or retry (seen on kube-apiserver).
                        log.debug("%s/%s: namespace terminating, nothing built", namespace, name)
                        return Result()
                    # Transient answers (conflicts, throttling, server errors) are retried with
                    # backoff and stay out of the status; what retrying cannot fix is shown.
                    if not (exc.is_retryable or exc.is_conflict):
                        failure = BuildFailure("ApplyFailed", f"{exc.reason}: {exc.message}")
                    error = exc
            elif failure is not None and failure.reason == "RuntimeNotFound":
                requeue = RUNTIME_RETRY_SECONDS
            remaining = deadline_remaining(job, policy.active_deadline_seconds, now)
            if remaining is not None and remaining <= 0:
                deadline_exceeded = True
                await self._delete_jobset(namespace, name)
            elif remaining is not None:
                requeue = (
                    max(1.0, remaining) if requeue is None else min(requeue, max(1.0, remaining))
                )

        failures = self._failures(namespace, name, jobset)
        status = desired_status(
            job,
            JobSet.from_wire(jobset) if jobset is not None else None,
            now,
            build_failure=failure,
            deadline_exceeded=deadline_exceeded,
            runtime_missing=unsupported,
            framework=self.framework,
            failure_cause=describe(failures[0]) if failures else None,
        )
        wire = status.to_wire()
        held = self._status_hold(key, data, wire, now)
        if held is not None:
            requeue = held if requeue is None else min(requeue, held)
        elif not await self._write_status(job, data, wire):
            # Deleted while this reconcile ran: what it applied may postdate the deletion, and
            # a garbage collector only collects dependents it sees when the owner goes.
            await self._delete_written(written)
            return Result()
        if failure is not None:
            await self.events.record(
                data,
                ev.WARNING,
                c.EVENT_RESOURCES_CREATION_FAILED,
                c.EVENT_ACTION_RECONCILING,
                "TrainJob resources reconciliation failed: " + truncate(failure.message, 950),
            )
        await self._announce(data, failures)
        if error is not None:
            return Result(error=error)
        ttl = ttl_remaining(
            job.model_copy(update={"status": status}), policy.ttl_seconds_after_finished, now
        )
        if ttl is not None and job.metadata.deletion_timestamp is None:
            if ttl <= 0:
                return await self._delete_expired(namespace, name, -ttl)
            requeue = ttl if requeue is None else min(requeue, ttl)
        return Result(requeue_after=requeue)

    def _failures(
        self, namespace: str, name: str, jobset: dict[str, Any] | None
    ) -> list[ContainerFailure]:
        """The failed containers of the TrainJob's JobSet (this incarnation of it), earliest
        first (trainer/controller/failures.py)."""
        if self.failed_pods is None:
            return []
        uid = (jobset or {}).get("metadata", {}).get("uid")
        return jobset_failures(self.failed_pods.pods(namespace, name), uid)

    async def _announce(self, data: dict[str, Any], failures: list[ContainerFailure]) -> None:
        """A Warning Event ``ContainerFailed`` on the TrainJob for each failed container
        termination, once per controller process."""
        for failed in failures:
            if failed.key in self._announced:
                continue
            self._announced.add(failed.key)
            await self.events.record(
                data, ev.WARNING, EVENT_CONTAINER_FAILED, "Reconciling", event_message(failed)
            )

    async def _delete_expired(self, namespace: str, name: str, late: float) -> Result:
        """Delete a TrainJob whose TTL after finishing expired ``late`` seconds ago, as
        Kubernetes' TTL-after-finished controller deletes a Job: foreground (its JobSet, pods
        and side objects go first), and only the very object judged (UID and resourceVersion
        preconditions: a TTL raised meanwhile wins, the update's event brings it back)."""
        live = self.caches.trainjobs.get(namespace, name) or {}
        meta = live.get("metadata") or {}
        preconditions = {
            "uid": str(meta.get("uid")),
            "resourceVersion": str(meta.get("resourceVersion")),
        }
        try:
            await self.kube.delete(
                r.TRAINJOBS, namespace, name, propagation="Foreground", preconditions=preconditions
            )
        except APIError as exc:
            if exc.is_conflict:
                return Result(requeue_after=RECREATE_RETRY_SECONDS)
            return Result(error=exc)
        log.info(
            "deleted TrainJob %s/%s: ttlSecondsAfterFinished expired %.1fs ago",
            namespace,
            name,
            late,
        )
        if self.on_ttl_deletion is not None:
            self.on_ttl_deletion(late)
        return Result()

    async def _apply_objects(
        self,
        key: str,
        job: TrainJob,
        runtime: Runtime,
        jobset: dict[str, Any] | None,
        written: list[dict[str, Any]],
    ) -> tuple[dict[str, Any] | None, float | None]:
        """Apply what changed for the TrainJob ``key``; returns the JobSet as now known and a
        requeue delay. What changed: what this process did not apply last, or what the cached
        object no longer holds (:class:`AppliedConfigs`). Every object the API returned from an
        apply is appended to ``written`` and recorded in its watch cache, so the next reconcile
        reads what was written even before the watch delivers it (no second apply, no status
        patch from a stale TrainJob)."""
        assert job.metadata is not None
        namespace, name = job.metadata.namespace or "default", job.metadata.name or ""
        observed = self._observed(job, runtime, jobset)
        objects = render(job, runtime, observed=observed, ctx=self.ctx, framework=self.framework)
        for obj in objects:
            kind = obj["kind"]
            if kind == jsc.KIND and jobset is not None:
                if being_deleted(jobset):
                    # A JobSet on its way out (a recreate's Foreground delete lasts until the
                    # garbage collector has deleted its Jobs): an apply would update, even
                    # resume, the object that goes away. Create it anew once it is gone.
                    return jobset, RECREATE_RETRY_SECONDS
                if self.applied.unchanged(key, jobset, obj):
                    continue
                active = any_active(jobset)
                if needs_recreate(jobset, obj):
                    if active is not None:
                        raise BuildError(
                            f"the JobSet must be recreated to change fields JobSet does not let "
                            f"change, but its replicated job {active} is still active"
                        )
                    log.info("recreating JobSet %s/%s for an immutable change", namespace, name)
                    await self.kube.delete(r.JOBSETS, namespace, name, propagation="Foreground")
                    return None, RECREATE_RETRY_SECONDS
                if active is None and jobset_suspended(jobset) and drops_mutable(jobset, obj):
                    # While suspended and idle: recreate so no Job keeps what was taken away.
                    log.info(
                        "recreating suspended JobSet %s/%s: its pod templates lose fields its "
                        "Jobs would keep on resume",
                        namespace,
                        name,
                    )
                    await self.kube.delete(r.JOBSETS, namespace, name, propagation="Foreground")
                    return None, RECREATE_RETRY_SECONDS
            elif kind != jsc.KIND and self.applied.unchanged(key, self._cached(obj), obj):
                continue
            try:
                applied = await self.kube.apply(obj, FIELD_MANAGER, force=True)
            except APIError as exc:
                if exc.is_unserved:
                    raise APIError(404, "NotFound", unserved_message(obj), exc.body) from exc
                if (
                    kind == jsc.KIND
                    and jobset is not None
                    and refused_as_immutable(exc.status, exc.message, jobset)
                ):
                    # A field taken away that JobSet does not let change (needs_recreate sees
                    # only changed and added fields: the live object's extra fields may be
                    # JobSet's defaults). Suspended and idle, nothing runs: recreate it.
                    log.info(
                        "recreating suspended JobSet %s/%s: JobSet refused the change (%s)",
                        namespace,
                        name,
                        truncate(exc.message, 300),
                    )
                    await self.kube.delete(r.JOBSETS, namespace, name, propagation="Foreground")
                    return None, RECREATE_RETRY_SECONDS
                raise
            self.applied.record(key, obj)
            written.append(applied)
            informer = self._informer_for(obj)
            if informer is not None:
                informer.record_write(applied)
            if kind == jsc.KIND:
                jobset = applied
        return jobset, None

    def _informer_for(self, obj: dict[str, Any]) -> Informer | None:
        """The watch cache that holds objects like ``obj`` (None for a kind not cached): the
        first of its kind, the controller's own before the plugins'."""
        for informer in self.caches.informers():
            gvr = informer.gvr
            if gvr.kind == obj.get("kind") and gvr.api_version == obj.get("apiVersion"):
                return informer
        return None

    def _cached(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        informer = self._informer_for(obj)
        if informer is None:
            return None
        meta = obj.get("metadata") or {}
        return informer.get(meta.get("namespace"), meta.get("name", ""))

    async def _delete_jobset(self, namespace: str, name: str) -> None:
        if self.caches.jobsets.get(namespace, name) is not None:
            await self.kube.delete(r.JOBSETS, namespace, name, propagation="Background")

    def _status_hold(
        self, key: str, data: dict[str, Any], status: dict[str, Any], now: dt.datetime
    ) -> float | None:
        """Seconds to wait before writing ``status``, or None to write it now.

        A change of ``jobsStatus``'s counts alone (:func:`counts_only`) is written
        :data:`STATUS_HOLD_SECONDS` after it was first seen, with whatever the JobSet reports
        by then: a Job's last pods finishing moves its counts, and its completion follows within
        a fraction of a second, one write instead of two. Conditions, ``state`` and the times are
        written at once, and carry the counts along."""
        if not counts_only(data.get("status") or {}, status):
            self.status_held.pop(key, None)
            return None
        first = self.status_held.setdefault(key, now)
        left = STATUS_HOLD_SECONDS - (now - first).total_seconds()
        if left <= 0:
            del self.status_held[key]
            return None
        return left

    async def _write_status(
        self, job: TrainJob, data: dict[str, Any], status: dict[str, Any]
    ) -> bool:
        """Merge-patch ``/status`` when it changed. False when the TrainJob no longer exists
        (deleted since the cache saw it: not an error, its DELETED event is on the way).
        What is sent, and when, is :func:`status_patch`."""
        current = without_trainer_status(data.get("status") or {})
        patch = status_patch(current, status)
        if patch is None:
            return True
        assert job.metadata is not None
        try:
            patched = await self.kube.patch_status(
                r.TRAINJOBS,
                job.metadata.namespace or "default",
                job.metadata.name or "",
                patch,
            )
        except APIError as exc:
            if exc.is_not_found:
                log.info("TrainJob %s/%s was deleted", job.metadata.namespace, job.metadata.name)
                return False
            raise
        self.caches.trainjobs.record_write(patched)
        await self._transition_events(data, current, patch["status"])
        return True

    async def _delete_written(self, written: list[dict[str, Any]]) -> None:
        """Delete the objects this reconcile applied for a TrainJob that turned out to be
        deleted (each only while it is still the object written: UID precondition). A
        garbage collector removes them too when it notices their owner is gone; deleting
        them here does not depend on that. Failures are logged: the objects are orphans
        either way."""
        for obj in written:
            meta = obj.get("metadata") or {}
            namespace, name = meta.get("namespace"), str(meta.get("name") or "")
            try:
                await self.kube.delete(
                    r.gvr_of(obj), namespace, name, preconditions={"uid": str(meta.get("uid"))}
                )
            except (APIError, KeyError) as exc:
                log.warning("could not delete %s %s/%s: %s", obj.get("kind"), namespace, name, exc)

    async def _transition_events(
        self, data: dict[str, Any], old: dict[str, Any], new: dict[str, Any]
    ) -> None:
        """A Warning Event ``Failed`` when the TrainJob turns Failed (its condition's message).

        No Normal Events (created, suspended, resumed, completed): upstream's controller
        records none, and each would cost a write per TrainJob; the conditions say the same
        (docs/troubleshooting.md, "Events"). A failure is worth a write."""
        before = TrainJobStatus.from_wire(old).conditions if old else None
        after = TrainJobStatus.from_wire(new).conditions
        if is_true(after, c.COND_FAILED) and not is_true(before, c.COND_FAILED):
            cond = next(x for x in after or [] if x.type == c.COND_FAILED)
            await self.events.record(data, ev.WARNING, "Failed", "Reconciling", cond.message)
