"""Event -> TrainJob key mapping, as small reusable handlers (controller-runtime's
``handler.EnqueueRequestForOwner`` and friends).

An informer calls a handler with ``(event_type, obj, old)``; each handler here adds the keys
(``namespace/name``) of the TrainJobs the event concerns to the work queue. :func:`handler_for`
turns a plugin's declared enqueue rule (:mod:`trainer.runtime.watch`) into one, so the
controller wires plugin watches without knowing any plugin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainer.api import constants as c
from trainer.kube.informer import Handler, Informer
from trainer.runtime.watch import ByLabel, ByOwner, Enqueue, TrainJobsMatching

Obj = dict[str, Any]
Add = Callable[[str], None]


def queue_key(namespace: str | None, name: object) -> str:
    """The work queue's key of a TrainJob: ``namespace/name``, ``default`` for no namespace.

    A string, unlike the informer cache's ``(namespace, name)`` key
    (:func:`trainer.kube.informer.key_of`): the queue keys only namespaced TrainJobs."""
    return f"{namespace or 'default'}/{name}"


def trainjob_key(obj: Obj) -> str:
    """The queue's key of the TrainJob ``obj``."""
    meta = obj.get("metadata") or {}
    return queue_key(meta.get("namespace"), meta.get("name"))


def owner_key(obj: Obj) -> str | None:
    """``namespace/name`` of the TrainJob that controls ``obj``, if any."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == c.KIND_TRAINJOB
            and (str(ref.get("apiVersion", "")).startswith(c.GROUP + "/"))
        ):
            return queue_key(meta.get("namespace"), ref.get("name"))
    return None


def enqueue_self(add: Add) -> Handler:
    """The object is a TrainJob: its own key."""

    def handle(_type: str, obj: Obj, _old: Obj | None) -> None:
        add(trainjob_key(obj))

    return handle


def enqueue_owner(add: Add) -> Handler:
    """The TrainJob named by the object's controller ownerReference."""

    def handle(_type: str, obj: Obj, _old: Obj | None) -> None:
        key = owner_key(obj)
        if key is not None:
            add(key)

    return handle


def enqueue_labelled(add: Add, label: str) -> Handler:
    """The TrainJob named by the object's label ``label``, in the object's namespace."""

    def handle(_type: str, obj: Obj, _old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        name = (meta.get("labels") or {}).get(label)
        if name:
            add(queue_key(meta.get("namespace"), name))

    return handle


def live_runtime(trainjob: Obj, cluster_runtimes: Informer, runtimes: Informer) -> Obj | None:
    """The cached runtime ``trainjob`` references (None when it is not cached)."""
    meta = trainjob.get("metadata") or {}
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    name = str(ref.get("name"))
    if ref.get("kind", c.KIND_CLUSTER_TRAINING_RUNTIME) == c.KIND_CLUSTER_TRAINING_RUNTIME:
        return cluster_runtimes.get(None, name)
    return runtimes.get(meta.get("namespace"), name)


def enqueue_matching(
    add: Add,
    rule: TrainJobsMatching,
    trainjobs: Informer,
    runtime_of: Callable[[Obj], Obj | None],
) -> Handler:
    """Every cached TrainJob (in the object's namespace when the rule says so) for which the
    rule's predicate holds."""

    def handle(_type: str, obj: Obj, _old: Obj | None) -> None:
        namespace = (obj.get("metadata") or {}).get("namespace") if rule.same_namespace else None
        for job in trainjobs.list(namespace):
            if rule.predicate(obj, job, runtime_of(job)):
                add(trainjob_key(job))

    return handle


def enqueue_runtime_users(add: Add, trainjobs: Informer) -> Handler:
    """The TrainJobs that reference the (Cluster)TrainingRuntime: one waiting for a missing
    runtime starts as soon as it exists."""

    def handle(_type: str, obj: Obj, _old: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        kind = obj.get("kind") or (
            c.KIND_TRAINING_RUNTIME if meta.get("namespace") else c.KIND_CLUSTER_TRAINING_RUNTIME
        )
        for job in trainjobs.list(meta.get("namespace")):
            ref = (job.get("spec") or {}).get("runtimeRef") or {}
            if (
                ref.get("name") == meta.get("name")
                and ref.get("kind", c.KIND_CLUSTER_TRAINING_RUNTIME) == kind
            ):
                add(trainjob_key(job))

    return handle


def handler_for(
    rule: Enqueue, add: Add, trainjobs: Informer, runtime_of: Callable[[Obj], Obj | None]
) -> Handler:
    """The handler of a declared enqueue rule."""
    if isinstance(rule, ByOwner):
        return enqueue_owner(add)
    if isinstance(rule, ByLabel):
        return enqueue_labelled(add, rule.key)
    return enqueue_matching(add, rule, trainjobs, runtime_of)
