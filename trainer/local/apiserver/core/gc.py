"""Garbage collection: ownerReference cascades (background, foreground, orphan), finalizer
processing for those policies, and namespace termination.

Work is queued and done by one background task, like the real garbage collector, so a client
sees the owner gone first and its dependents disappear shortly after. :meth:`idle` lets
tests wait for the collector without sleeping.

The queue lives in memory only, so at every start (after a crash too, with a state file) the
collector first re-examines every stored object, as the real one resyncs its graph from a
full list: objects of a resource no longer served (a CRD deletion cut short) are dropped;
dependents whose owners are all gone are deleted, and references to gone owners are removed
when other owners remain; objects being deleted with ``foregroundDeletion`` or ``orphan``
finalizers, and terminating namespaces, are taken up again until they are gone. Nothing is
recreated: only deletes and finalizer removals are finished. Work whose write the server
could not store (a 503 from the state file) is retried after :data:`RETRY_DELAY`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from trainer.local.apiserver.core.rules import WriteOptions
from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.resources import ResourceType
from trainer.local.apiserver.store import Event
from trainer.machinery.backoff import doubling

if TYPE_CHECKING:
    from trainer.local.apiserver.resources import Registry
    from trainer.local.apiserver.store import Store

log = logging.getLogger("trainer.apiserver.gc")

Ref = tuple[str, str, str, str]  # group, plural, namespace, name
# Seconds before a collection whose write could not be stored is retried, doubling per
# failure up to the maximum.
RETRY_DELAY = 0.25
MAX_RETRY_DELAY = 30.0


@contextlib.contextmanager
def _unless_unavailable() -> Iterator[None]:
    """Ignore what a concurrent client makes moot (the object is gone, changed, refused);
    a write the server could not store (5xx) propagates, and the work is retried."""
    try:
        yield
    except APIError as err:
        if err.code >= 500:
            raise


class Writes(Protocol):
    """What the collector needs of the storage core: its registry and store to read, and
    the write paths every client uses (admission included) to change what it collects."""

    registry: Registry
    store: Store

    async def commit_update(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        options: WriteOptions,
        *,
        subresource: str,
        applied: bool = False,
    ) -> dict[str, Any]: ...

    async def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        policy: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]: ...

    def remove(self, rt: ResourceType, obj: dict[str, Any]) -> None: ...


class GarbageCollector:
    def __init__(self, server: Writes) -> None:
        self.server = server
        self._dependents: dict[str, set[Ref]] = {}  # owner uid -> dependents
        self._owners_of: dict[Ref, set[str]] = {}
        self._queue: asyncio.Queue[tuple[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._busy = 0
        self._idle_event: asyncio.Event | None = None
        self._failures: dict[tuple[str, Any], int] = {}
        # The ownership index follows every write from the storage's first (its bootstrap
        # objects included) until :meth:`stop`.
        server.store.subscribe(self._index)

    # --- ownership index --------------------------------------------------------------------
    def _index(self, ev: Event) -> None:
        meta = ev.obj.get("metadata") or {}
        ref: Ref = (ev.key[0], ev.key[1], ev.namespace, meta.get("name", ""))
        for uid in self._owners_of.pop(ref, set()):
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(ref)
                if not deps:
                    del self._dependents[uid]
        if ev.type == "DELETED":
            return
        uids: set[str] = {str(o["uid"]) for o in meta.get("ownerReferences") or [] if o.get("uid")}
        if uids:
            self._owners_of[ref] = uids
            for uid in uids:
                self._dependents.setdefault(uid, set()).add(ref)
            if ev.type == "ADDED":
                # Created after its owner was deleted (a controller acting on a stale cache):
                # the real collector deletes such a dependent too ("absent owner").
                self._enqueue("absent", ref)

    def dependents(self, uid: str) -> list[Ref]:
        return sorted(self._dependents.get(uid, set()))

    # --- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._idle_event = asyncio.Event()
        self._idle_event.set()
        self._task = asyncio.create_task(self._run(), name="apiserver-gc")
        self._enqueue("resync", None)

    async def stop(self) -> None:
        """Stop collecting, for good: the ownership index no longer follows writes."""
        self.server.store.unsubscribe(self._index)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def idle(self) -> None:
        """Wait until every queued collection is done."""
        if self._idle_event is not None:
            await self._idle_event.wait()

    def _enqueue(self, kind: str, item: Any) -> None:
        if self._queue is None:
            return
        self._busy += 1
        assert self._idle_event is not None
        self._idle_event.clear()
        self._queue.put_nowait((kind, item))

    def _enqueue_later(self, kind: str, item: Any, delay: float = 0.05) -> None:
        """Come back to ``item`` after ``delay`` (waiting on other deletions) without holding
        up the queue; the collector is not idle meanwhile."""
        if self._queue is None:
            return
        self._busy += 1
        assert self._idle_event is not None
        self._idle_event.clear()
        asyncio.get_running_loop().call_later(delay, self._queue.put_nowait, (kind, item))

    # --- triggers from the server -----------------------------------------------------------
    def notice(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            return
        finalizers = meta.get("finalizers") or []
        if rt.kind == "Namespace" and rt.group == "":
            self._enqueue("namespace", meta["name"])
        elif "foregroundDeletion" in finalizers:
            self._enqueue("foreground", (rt.key, meta.get("namespace") or "", meta["name"]))
        elif "orphan" in finalizers:
            self._enqueue("orphan", (rt.key, meta.get("namespace") or "", meta["name"]))

    def deleted(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if uid and self._dependents.get(uid):
            self._enqueue("cascade", uid)

    # --- work -------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._queue is not None and self._idle_event is not None
        while True:
            kind, item = await self._queue.get()
            try:
                if kind == "cascade":
                    await self._cascade(item)
                elif kind == "foreground":
                    await self._foreground(*item)
                elif kind == "orphan":
                    await self._orphan(*item)
                elif kind == "namespace":
                    await self._namespace(item)
                elif kind == "absent":
                    await self._absent_owners(*item)
                elif kind == "resync":
                    self._resync()
                self._failures.pop((kind, item), None)
            except APIError as err:  # only 5xx get here: the write was not stored
                failures = self._failures[(kind, item)] = self._failures.get((kind, item), 0) + 1
                delay = doubling(failures, RETRY_DELAY, MAX_RETRY_DELAY)
                log.warning(
                    "garbage collection of %s %s: %s; retrying in %.2f s",
                    kind,
                    item,
                    err.message,
                    delay,
                )
                self._enqueue_later(kind, item, delay)
            except Exception:
                log.exception("garbage collection of %s %s failed", kind, item)
            finally:
                self._busy -= 1
                if self._busy == 0:
                    self._idle_event.set()

    def _resync(self) -> None:
        """Queue every stored object that needs the collector (see the module docstring)."""
        store = self.server.store
        resources = store.keys()
        for key in resources:
            rt = self._rt(*key)
            if rt is None:
                dropped = store.drop_resource(key)
                if dropped:
                    log.info("dropped %d objects of %s.%s: no longer served", len(dropped), *key)
                continue
            for obj in store.items(key):
                meta = obj["metadata"]
                if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                    if rt.kind != "Namespace":  # nothing holds it back: it was to be gone
                        self.server.remove(rt, obj)
                    else:
                        self.notice(rt, obj)
                elif meta.get("deletionTimestamp"):
                    self.notice(rt, obj)
                elif meta.get("ownerReferences"):
                    self._enqueue("absent", (*key, meta.get("namespace") or "", meta["name"]))

    def _rt(self, group: str, plural: str) -> ResourceType | None:
        return self.server.registry.by_key(group, plural)

    async def _cascade(self, owner_uid: str) -> None:
        """The owner is gone: delete dependents it alone owned, unlink the rest."""
        for group, plural, ns, name in self.dependents(owner_uid):
            rt = self._rt(group, plural)
            obj = self.server.store.get((group, plural), ns, name)
            if rt is None or obj is None:
                continue
            refs = obj["metadata"].get("ownerReferences") or []
            remaining = [r for r in refs if r.get("uid") != owner_uid and self._owner_exists(r, ns)]
            with _unless_unavailable():
                if remaining:
                    new = copy.deepcopy(obj)
                    new["metadata"]["ownerReferences"] = [
                        r for r in refs if r.get("uid") != owner_uid
                    ]
                    await self._write(rt, obj, new)
                else:
                    await self.server.delete(rt, ns, name, policy="Background")

    async def _absent_owners(self, group: str, plural: str, ns: str, name: str) -> None:
        """Delete a dependent none of whose owners exists (each owner's kind is served and no
        object of that kind, name and uid is stored); an owner of a kind this server does
        not serve counts as present, as the real collector cannot tell either. When some
        owners remain, only the references to the absent ones are removed."""
        rt = self._rt(group, plural)
        obj = self.server.store.get((group, plural), ns, name)
        if rt is None or obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        refs = obj["metadata"].get("ownerReferences") or []
        solid = [r for r in refs if self._owner_exists(r, ns) or not self._kind_served(r)]
        if len(solid) == len(refs):
            return
        with _unless_unavailable():
            if not solid:
                log.info("deleting %s %s/%s: its owners no longer exist", rt.kind, ns, name)
                await self.server.delete(rt, ns, name, policy="Background")
                return
            new = copy.deepcopy(obj)
            new["metadata"]["ownerReferences"] = solid
            await self._write(rt, obj, new)

    def _kind_served(self, ref: dict[str, Any]) -> bool:
        group = ref.get("apiVersion", "").rpartition("/")[0]
        return any(
            rt.kind == ref.get("kind") and rt.api_version.rpartition("/")[0] == group
            for rt in self.server.registry
        )

    def _owner_exists(self, ref: dict[str, Any], namespace: str) -> bool:
        uid = ref.get("uid")
        for rt in self.server.registry:
            if (
                rt.kind != ref.get("kind")
                or rt.api_version.rpartition("/")[0] != ref.get("apiVersion", "").rpartition("/")[0]
            ):
                continue
            obj = self.server.store.get(
                rt.key, namespace if rt.namespaced else "", ref.get("name", "")
            )
            if obj is not None and obj["metadata"].get("uid") == uid:
                return True
        return False

    async def _foreground(self, key: tuple[str, str], ns: str, name: str) -> None:
        obj = self.server.store.get(key, ns, name)
        if obj is None:
            return
        uid = obj["metadata"]["uid"]
        for group, plural, dns, dname in self.dependents(uid):
            rt = self._rt(group, plural)
            if rt is not None and self.server.store.get((group, plural), dns, dname) is not None:
                with _unless_unavailable():
                    await self.server.delete(rt, dns, dname, policy="Foreground")
        if any(
            self.server.store.get((g, p), n, m) is not None for g, p, n, m in self.dependents(uid)
        ):
            # Dependents still finalizing: come back when they are gone.
            self._enqueue_later("foreground", (key, ns, name))
            return
        await self._drop_finalizer(key, ns, name, "foregroundDeletion")

    async def _orphan(self, key: tuple[str, str], ns: str, name: str) -> None:
        obj = self.server.store.get(key, ns, name)
        if obj is None:
            return
        uid = obj["metadata"]["uid"]
        for group, plural, dns, dname in self.dependents(uid):
            rt = self._rt(group, plural)
            dep = self.server.store.get((group, plural), dns, dname)
            if rt is None or dep is None:
                continue
            new = copy.deepcopy(dep)
            new["metadata"]["ownerReferences"] = [
                r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != uid
            ]
            if not new["metadata"]["ownerReferences"]:
                del new["metadata"]["ownerReferences"]
            with _unless_unavailable():
                await self._write(rt, dep, new)
        await self._drop_finalizer(key, ns, name, "orphan")

    async def _write(self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
        """The collector's own update of ``old`` to ``new`` (no admission field checks)."""
        options = WriteOptions(manager="garbage-collector", field_validation="Ignore")
        await self.server.commit_update(rt, old, new, options, subresource="")

    async def _drop_finalizer(
        self, key: tuple[str, str], ns: str, name: str, finalizer: str
    ) -> None:
        rt = self._rt(*key)
        obj = self.server.store.get(key, ns, name)
        if rt is None or obj is None:
            return
        new = copy.deepcopy(obj)
        new["metadata"]["finalizers"] = [
            f for f in obj["metadata"].get("finalizers") or [] if f != finalizer
        ]
        with _unless_unavailable():
            await self._write(rt, obj, new)

    async def _namespace(self, name: str) -> None:
        """Delete everything in a terminating namespace, then the namespace itself."""
        pending = False
        for rt in list(self.server.registry):
            if not rt.namespaced or rt.storage_version not in (None, rt.version):
                continue
            for obj in list(self.server.store.items(rt.key, name)):
                pending = True
                if not obj["metadata"].get("deletionTimestamp"):
                    with _unless_unavailable():
                        await self.server.delete(
                            rt, name, obj["metadata"]["name"], policy="Background"
                        )
        if pending and any(
            True
            for rt in self.server.registry
            if rt.namespaced
            for _ in self.server.store.items(rt.key, name)
        ):
            self._enqueue_later("namespace", name)
            return
        ns_rt = self.server.registry.get("", "v1", "namespaces")
        namespace = self.server.store.get(("", "namespaces"), "", name)
        if ns_rt is None or namespace is None:
            return
        if not namespace["metadata"].get("finalizers"):
            self.server.remove(ns_rt, namespace)
