"""In-memory object storage with a global resourceVersion, a bounded event history and
watchers.

Objects are stored as JSON-ready dicts. The store owns what it is given: callers pass a fresh
dict to :meth:`Store.put` and never touch it afterwards, and copy what they read before
changing it. Every write gets the next resourceVersion and becomes an event in the history
(for watches that start from an older version) and in every matching watcher's queue.

With a :attr:`Store.backend` (the state file, :mod:`trainer.local.apiserver.core.persistence`) a
write is persisted first: the new object and its resourceVersion are computed, handed to the
backend as one batch, and only once it returns are the objects, the clock, the history, the
watchers and the subscribers changed. A backend that raises leaves all of them as they
were, so no client ever sees a write the file does not hold, and the clock has no gap.
Subscribers (:meth:`Store.subscribe`, removed again with :meth:`Store.unsubscribe`: the pod-log
keeper, the garbage collector's ownership index) are called as each event is emitted and must
not write to the store themselves (a batch's versions are fixed before its first event); they
may schedule writes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from trainer.local.apiserver.errors import gone
from trainer.local.apiserver.selectors import Matcher

GroupPlural = tuple[str, str]
ObjKey = tuple[str, str]  # namespace ("" for cluster scope), name


@dataclass(frozen=True)
class Write:
    """One object as a backend persists it: stored at ``rv`` (``obj`` None: deleted)."""

    key: GroupPlural
    namespace: str
    name: str
    rv: int
    obj: dict[str, Any] | None


# Persists a batch of writes atomically (all or none) or raises; the last one's rv is the clock.
Backend = Callable[[list[Write]], None]

# Read-only empties for lookups of a resource or namespace that holds nothing.
_NO_SPACES: Mapping[str, dict[str, dict[str, Any]]] = MappingProxyType({})
_NO_OBJECTS: Mapping[str, dict[str, Any]] = MappingProxyType({})


@dataclass
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    key: GroupPlural
    namespace: str
    obj: dict[str, Any]
    old: dict[str, Any] | None = None
    _json: dict[str, bytes] = field(default_factory=dict, repr=False)

    def encoded(self, event_type: str, api_version: str) -> bytes:
        """The watch line for this event, as ``event_type`` (selector transitions may turn a
        MODIFIED into an ADDED or DELETED), in the requested API version; cached."""
        cache_key = f"{event_type} {api_version}"
        if cache_key not in self._json:
            obj = self.obj
            if obj.get("apiVersion") != api_version:
                obj = {**obj, "apiVersion": api_version}
            self._json[cache_key] = (
                json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode()
                + b"\n"
            )
        return self._json[cache_key]


@dataclass(eq=False)
class Watcher:
    key: GroupPlural
    namespace: str | None
    match: Matcher | None
    queue: asyncio.Queue[Event | None]
    overflow: bool = False

    def wants(self, ev: Event) -> bool:
        return ev.key == self.key and (self.namespace is None or ev.namespace == self.namespace)


def intern_in_place(value: Any) -> None:
    """Intern every key and string of a decoded JSON document, in place (the same dict and
    list objects; key order kept). Thousands of stored objects of one kind repeat the same
    keys and mostly the same values; each decoded request holds its own copies, interning
    keeps one. Iterative: a deeply nested document cannot exhaust the stack."""
    intern = sys.intern
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            for key in list(item):
                child = item.pop(key)
                kind = type(child)
                if kind is str:
                    child = intern(child)
                elif kind is dict or kind is list:
                    stack.append(child)
                item[intern(key) if type(key) is str else key] = child
        elif type(item) is list:
            for i, child in enumerate(item):
                kind = type(child)
                if kind is str:
                    item[i] = intern(child)
                elif kind is dict or kind is list:
                    stack.append(child)


def _write(key: GroupPlural, obj: dict[str, Any], rv: int, *, deleted: bool = False) -> Write:
    meta = obj["metadata"]
    return Write(key, meta.get("namespace") or "", meta["name"], rv, None if deleted else obj)


class Store:
    """Objects per resource, the resourceVersion clock, history and watchers."""

    def __init__(self, history: int = 10_000, watch_queue: int = 100_000) -> None:
        self.rv = 0
        # resource -> namespace ("" for cluster scope) -> name -> object
        self._objects: dict[GroupPlural, dict[str, dict[str, dict[str, Any]]]] = {}
        self._history: deque[Event] = deque(maxlen=history)
        self._compacted = 0
        self._watchers: set[Watcher] = set()
        self._watch_queue = watch_queue
        # A tuple, replaced on each change: a subscriber may unsubscribe while being called.
        self._subscribers: tuple[Callable[[Event], None], ...] = ()
        self.backend: Backend | None = None

    # --- subscribers ------------------------------------------------------------------------
    def subscribe(self, hook: Callable[[Event], None]) -> None:
        """Call ``hook`` with every event from now on, in the order they are emitted, until
        :meth:`unsubscribe`. Whoever subscribes unsubscribes when it stops."""
        self._subscribers = (*self._subscribers, hook)

    def unsubscribe(self, hook: Callable[[Event], None]) -> None:
        """Stop calling ``hook`` (subscribed before; a second call is a no-op)."""
        kept = list(self._subscribers)
        if hook in kept:
            kept.remove(hook)
            self._subscribers = tuple(kept)

    # --- reads ------------------------------------------------------------------------------
    def get(self, key: GroupPlural, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get(key, _NO_SPACES).get(namespace, _NO_OBJECTS).get(name)

    def items(self, key: GroupPlural, namespace: str | None = None) -> Iterator[dict[str, Any]]:
        """Objects of a resource in (namespace, name) order; one namespace or all. The order is
        taken when iteration starts, so callers may write to the store while iterating."""
        yield from self.select(key, namespace)

    def select(
        self,
        key: GroupPlural,
        namespace: str | None = None,
        match: Matcher | None = None,
        after: ObjKey | None = None,
    ) -> list[dict[str, Any]]:
        """The objects :meth:`items` yields that ``match`` accepts (all when None) and whose
        (namespace, name) sorts after ``after`` (a continue token's last key).

        Objects are filtered before they are sorted, so a list with a selective label selector
        sorts only what it returns rather than the whole resource.
        """
        out: list[dict[str, Any]] = []
        for ns, objects in self._spaces(key, namespace):
            if after is not None and ns < after[0]:
                continue
            last = after[1] if after is not None and ns == after[0] else None
            names = [
                name
                for name, obj in objects.items()
                if (last is None or name > last) and (match is None or match(obj))
            ]
            names.sort()
            out.extend(objects[name] for name in names)
        return out

    def _spaces(
        self, key: GroupPlural, namespace: str | None
    ) -> list[tuple[str, dict[str, dict[str, Any]]]]:
        """(namespace, objects by name) of a resource, in namespace order; one or all."""
        spaces = self._objects.get(key, _NO_SPACES)
        if namespace is not None:
            objects = spaces.get(namespace)
            return [(namespace, objects)] if objects else []
        return sorted(spaces.items())

    def count(self, key: GroupPlural) -> int:
        return sum(len(objects) for objects in self._objects.get(key, _NO_SPACES).values())

    def keys(self) -> list[GroupPlural]:
        return list(self._objects)

    # --- writes -----------------------------------------------------------------------------
    def put(
        self,
        key: GroupPlural,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        rv: int | None = None,
    ) -> Event:
        """Store ``obj`` (created when ``old`` is None) under a new resourceVersion (``rv``
        when loading; persisted first when there is a backend)."""
        intern_in_place(obj)
        if rv is None:
            rv = self.rv + 1
            obj["metadata"]["resourceVersion"] = str(rv)
            self._persist([_write(key, obj, rv)])
        else:
            obj["metadata"]["resourceVersion"] = str(rv)
        return self._put(key, obj, old, rv)

    def remove(self, key: GroupPlural, obj: dict[str, Any]) -> Event:
        rv = self.rv + 1
        self._persist([_write(key, obj, rv, deleted=True)])
        return self._remove(key, obj, rv)

    def put_and_remove(
        self, key: GroupPlural, obj: dict[str, Any], old: dict[str, Any]
    ) -> tuple[Event, Event]:
        """Store ``obj`` and delete it at once (its last finalizer is gone): one persisted
        batch, then a MODIFIED and a DELETED event."""
        intern_in_place(obj)
        rv = self.rv + 1
        obj["metadata"]["resourceVersion"] = str(rv)
        self._persist([_write(key, obj, rv), _write(key, obj, rv + 1, deleted=True)])
        return self._put(key, obj, old, rv), self._remove(key, obj, rv + 1)

    def drop_resource(self, key: GroupPlural) -> list[dict[str, Any]]:
        """Remove every object of a resource (its CRD was deleted), with DELETED events."""
        objs = [
            o for objects in self._objects.get(key, _NO_SPACES).values() for o in objects.values()
        ]
        self._persist(
            [_write(key, obj, self.rv + 1 + i, deleted=True) for i, obj in enumerate(objs)]
        )
        for obj in objs:
            self._remove(key, obj, self.rv + 1)
        self._objects.pop(key, None)
        return objs

    def _persist(self, writes: list[Write]) -> None:
        if self.backend is not None and writes:
            self.backend(writes)

    def _put(
        self, key: GroupPlural, obj: dict[str, Any], old: dict[str, Any] | None, rv: int
    ) -> Event:
        meta = obj["metadata"]
        ns = meta.get("namespace") or ""
        self._objects.setdefault(key, {}).setdefault(ns, {})[meta["name"]] = obj
        self.rv = max(self.rv, rv)
        return self._emit(Event(rv, "MODIFIED" if old is not None else "ADDED", key, ns, obj, old))

    def _remove(self, key: GroupPlural, obj: dict[str, Any], rv: int) -> Event:
        meta = obj["metadata"]
        ns = meta.get("namespace") or ""
        spaces = self._objects.get(key)
        objects = spaces.get(ns) if spaces is not None else None
        if spaces is not None and objects is not None:
            objects.pop(meta["name"], None)
            if not objects:  # no empty namespaces left behind
                del spaces[ns]
        self.rv = max(self.rv, rv)
        final = {**obj, "metadata": {**meta, "resourceVersion": str(rv)}}
        return self._emit(Event(rv, "DELETED", key, ns, final, obj))

    def _emit(self, ev: Event) -> Event:
        self._history.append(ev)
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv - 1
        for w in list(self._watchers):
            if w.wants(ev):
                if w.queue.qsize() >= self._watch_queue:
                    # A watcher that cannot keep up is closed, as the real server does.
                    w.overflow = True
                    self._watchers.discard(w)
                    w.queue.put_nowait(None)
                else:
                    w.queue.put_nowait(ev)
        for hook in self._subscribers:
            hook(ev)
        return ev

    # --- watches ----------------------------------------------------------------------------
    def compact(self) -> None:
        """Forget the history: watches from any older resourceVersion get 410 Gone."""
        self._history.clear()
        self._compacted = self.rv

    @property
    def oldest_rv(self) -> int:
        return self._compacted

    def events_since(self, rv: int, key: GroupPlural, namespace: str | None) -> list[Event]:
        """Events after ``rv`` still in the history, or 410 when it was compacted away."""
        if rv < self._compacted:
            raise gone(f"too old resource version: {rv} ({self._compacted + 1})")
        return [
            ev
            for ev in self._history
            if ev.rv > rv and ev.key == key and (namespace is None or ev.namespace == namespace)
        ]

    def watch(self, key: GroupPlural, namespace: str | None, match: Matcher | None) -> Watcher:
        w = Watcher(key, namespace, match, asyncio.Queue())
        self._watchers.add(w)
        return w

    def unwatch(self, w: Watcher) -> None:
        self._watchers.discard(w)

    def close_watchers(self) -> None:
        for w in list(self._watchers):
            w.queue.put_nowait(None)
        self._watchers.clear()

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)
