"""What a plugin observes in the cluster: the WatchExtension phase's declarations.

A plugin that reads existing objects during its build (the MPI plugin its SSH Secret, the
gang plugins their PodGroup, LimitRanges and RuntimeClasses) declares each kind it reads as a
:class:`Watch`:

* ``kind``: the API resource (group, version, plural, kind, scope), and optionally one
  namespace, a label selector or a field selector narrowing the watch;
* ``enqueue``: how an event on such an object maps back to the TrainJobs to reconcile
  (:class:`ByOwner`, :class:`ByLabel`, :class:`TrainJobsMatching`);
* ``collect``: a pure function from the watch cache (a read-only :class:`Store`), the
  TrainJob and its runtime to what the build reads; ``into`` names the :class:`Observed`
  field it fills (None: ``Observed.watched[name]``).

The controller builds one watch cache per distinct (kind, namespace, selectors) and one event
handler per distinct enqueue rule from these declarations (``trainer.controller.handlers``),
and :func:`observe` fills the build's :class:`Observed` from them: the controller never names a
plugin. Declarations are data: nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainer.api.v1alpha1 import TrainJob
from trainer.runtime.info import Observed, Runtime

Obj = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    """An API resource: ``group/version``, its plural and kind, and its scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


CONFIG_MAPS = Kind("", "v1", "configmaps", "ConfigMap")
SECRETS = Kind("", "v1", "secrets", "Secret")


class Store(Protocol):
    """A read-only watch cache: objects by namespace and name, or all of them."""

    def get(self, namespace: str | None, name: str) -> Obj | None: ...

    def list(self, namespace: str | None = None) -> list[Obj]: ...


@dataclass(frozen=True)
class ByOwner:
    """The TrainJob named by the object's controller ownerReference (controller-runtime's
    ``EnqueueRequestForOwner``): for objects the build created."""


@dataclass(frozen=True)
class ByLabel:
    """The TrainJob named by the object's label ``key``, in the object's namespace."""

    key: str


@dataclass(frozen=True)
class TrainJobsMatching:
    """Every TrainJob (in the object's namespace when ``same_namespace``) for which
    ``predicate(object, trainjob, runtime)`` holds; ``runtime`` is the TrainJob's live runtime
    as cached (None when it does not exist). For objects a build reads but does not own."""

    predicate: Callable[[Obj, Obj, Obj | None], bool]
    same_namespace: bool = True


Enqueue = ByOwner | ByLabel | TrainJobsMatching

Collect = Callable[[Store, TrainJob, Runtime], Any]


@dataclass(frozen=True)
class Watch:
    """One kind of object a plugin observes (module docstring)."""

    name: str
    kind: Kind
    enqueue: Enqueue
    collect: Collect
    into: str | None = None
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    optional: bool = False
    """The API may not serve the kind (a CRD that is not installed): the cache then stays
    empty, and the controller does not wait for it to sync. It is listed again once an apply
    of the controller's own of that kind succeeds (the CRD has appeared), not periodically:
    nothing is listed while no TrainJob needs the kind."""

    @property
    def cache_key(self) -> tuple[Kind, str | None, str | None, str | None]:
        """Watches with the same key share one watch cache."""
        return (self.kind, self.namespace, self.label_selector, self.field_selector)


_FIELDS = frozenset(f.name for f in dataclasses.fields(Observed))
_BY_NAME = frozenset({"secrets", "config_maps", "runtime_classes"})
"""The Observed fields that map object names to objects: what watches collect is merged."""


def check_watches(watches: Sequence[Watch]) -> list[Watch]:
    """``watches`` with duplicates removed (several plugins may declare the same watch); two
    different watches of one name, or an ``into`` that is no field of Observed, are errors."""
    seen: dict[str, Watch] = {}
    for watch in watches:
        if watch.into is not None and (watch.into not in _FIELDS or watch.into == "watched"):
            raise ValueError(f"watch {watch.name!r}: Observed has no field {watch.into!r}")
        other = seen.setdefault(watch.name, watch)
        if other != watch:
            raise ValueError(f"two different watches are named {watch.name!r}")
    return list(seen.values())


def observe(
    watches: Sequence[Watch],
    stores: Mapping[str, Store],
    trainjob: TrainJob,
    runtime: Runtime,
    base: Observed,
) -> Observed:
    """``base`` with what each watch collects for ``trainjob`` (``stores`` by watch name).

    Into a field of objects by name the collected mappings are merged; any other field takes
    the first collected value that is not None (two PodGroup watches, one of which finds the
    object)."""
    updates: dict[str, Any] = {}
    watched: dict[str, Any] = dict(base.watched)
    for watch in watches:
        value = watch.collect(stores[watch.name], trainjob, runtime)
        if watch.into is None:
            watched[watch.name] = value
            continue
        if watch.into in _BY_NAME:
            updates[watch.into] = {**updates.get(watch.into, getattr(base, watch.into)), **value}
        elif value is not None and watch.into not in updates:
            updates[watch.into] = value
    return dataclasses.replace(base, watched=watched, **updates)
