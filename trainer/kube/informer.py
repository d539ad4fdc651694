"""A watch cache of one resource (client-go's reflector + indexer + shared informer, small).

:class:`Informer` lists the resource once, then watches from the list's resourceVersion with
bookmarks, keeping ``(namespace, name) -> object`` current and telling handlers about every
change:

- a watch that ends (server timeout, dropped connection) is reopened from the last
  resourceVersion seen, so nothing is missed and nothing is replayed twice;
- a 410 (the resourceVersion was compacted away) triggers a relist, diffed against the cache:
  ADDED / MODIFIED for objects that are new or changed, DELETED for objects that disappeared
  meanwhile, so a handler never misses a deletion;
- any other failure is retried forever with jittered exponential backoff (0.1 s doubling to
  30 s) until :meth:`Informer.stop`;
- ``optional=True`` is for resources that may not be served (the PodGroup CRDs of the
  coscheduling and Volcano schedulers, the dashboard's Trainer CRDs): a 404 on list leaves the
  cache empty and the list is retried every ``discovery_interval`` seconds, or after the delays
  of ``discovery_backoff`` when one is given (reset once the resource is served), or, with
  ``discovery_interval=None``, only when asked: :meth:`Informer.recheck`, which a write of this
  process reported through :meth:`Informer.record_write` does by itself (the API answered it,
  so the resource is served). Handlers added with :meth:`Informer.add_served_handler` are told
  when the resource starts or stops being served, which its events alone do not say when it
  has no objects;
- ``transform`` turns each object into the form to cache before it is compacted (client-go's
  ``SetTransform``): a cache that needs a few fields of many objects (the dashboard's pods of
  every namespace) keeps only those. It must keep ``metadata.name``, ``namespace`` and
  ``resourceVersion`` (and ``ownerReferences`` for :meth:`Informer.by_owner_uid`);
- ``resync_period`` re-emits MODIFIED for every cached object periodically (controller-runtime's
  resync), so a reconciler also re-checks objects whose events it may have dropped;
- :meth:`Informer.record_write` puts the answer to a write of this process into the cache ahead
  of its watch event (client-go's mutation cache), so a reconcile that follows reads what the
  previous one wrote instead of writing it again.

Handlers are synchronous ``(event_type, obj, old)`` callables run on the event loop; keep them
cheap (enqueue a key). The emitted type follows the cache, not the wire: an ADDED for a cached
key is reported as MODIFIED, a MODIFIED for an unknown key as ADDED. ``old`` is the previously
cached object (None for ADDED). Objects are shared with the cache: treat them as read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from trainer.kube.resources import GVR
from trainer.kube.rest import APIError, Expired, Kube

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
ObjList = list[Obj]
KeyList = list[Key]
Handler = Callable[[str, Obj, Obj | None], None]
"""``(event_type, obj, old)``: ADDED (old None), MODIFIED, DELETED (old = last cached)."""
ServedHandler = Callable[[bool], None]
"""Told whether an optional resource is now served (after a list's answer changed it)."""
Sleep = Callable[[float], Awaitable[None]]

ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"
MIN_HEALTHY_WATCH = 1.0  # a watch that ends sooner without any event counts as a failure


class Backoff:
    """Exponential backoff with jitter: the n-th delay is drawn from
    ``[d/2, d]`` with ``d = min(cap, base * 2**n)``; :meth:`reset` after a success."""

    def __init__(
        self, base: float = 0.1, cap: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()
        self.attempt = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** min(self.attempt, 62))
        self.attempt += 1
        return ceiling * (0.5 + 0.5 * self.rng.random())

    def reset(self) -> None:
        self.attempt = 0


def key_of(obj: Obj) -> Key:
    """``(namespace, name)``; the namespace is ``""`` for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _rv_number(rv: str) -> int | None:
    """A resourceVersion as a number (None when it is not one). resourceVersions are opaque to
    clients in general, but every API server (etcd revisions, and the local one) issues
    increasing integers, which client-go's mutation cache relies on too."""
    try:
        return int(rv)
    except ValueError:
        return None


def strip_managed_fields(obj: Obj) -> Obj:
    """``obj`` without ``metadata.managedFields`` (a copy of the top level and metadata when
    there were any; the caller's object is never changed). The controller never reads them and
    they are about a third of a cached object's memory, so informers drop them, as
    controller-runtime's cache does by default."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _interned(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k): _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


def compact(obj: Obj) -> Obj:
    """The form an informer caches: ``obj`` without ``metadata.managedFields`` and with every
    key and string interned, as a new object (the caller's is never changed).

    Thousands of cached TrainJobs, JobSets and snapshot ConfigMaps repeat the same keys and
    mostly the same values (images, commands, env names, the runtime snapshot text); a decoded
    JSON document holds its own copy of each, interning shares one. This takes the cache of
    10,000 torch jobs from about 14 KiB to about 8 KiB per job."""
    result: Obj = _interned(strip_managed_fields(obj))
    return result


def _controller_uid(obj: Obj) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None


class Informer:
    """List+watch cache of ``gvr`` (in ``namespace``, or all), filtered by selectors."""

    def __init__(
        self,
        kube: Kube,
        gvr: GVR,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        field_selector: str | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        resync_period: float | None = None,
        optional: bool = False,
        discovery_interval: float | None = 30.0,
        discovery_backoff: Backoff | None = None,
        watch_timeout: float = 300.0,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.kube = kube
        self.gvr = gvr
        self.namespace = namespace if gvr.namespaced else None
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform
        self.resync_period = resync_period
        self.optional = optional
        self.discovery_interval = discovery_interval
        self.discovery_backoff = discovery_backoff
        self.watch_timeout = watch_timeout
        self.rng = rng or random.Random()
        self.backoff = backoff or Backoff(rng=self.rng)
        self._sleep = sleep
        self.resource_version = ""
        self.served = True
        """False while an optional resource is not served (404 on list)."""
        self.lists = 0
        """Successful lists so far (1 + relists)."""
        self._cache: dict[Key, Obj] = {}
        self._owners: dict[str, set[Key]] = {}
        self._handlers: list[Handler] = []
        self._served_handlers: list[ServedHandler] = []
        self._synced = asyncio.Event()
        self._recheck = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._resync_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        scope = self.namespace or "*"
        return f"Informer({self.gvr.resource} in {scope}, {len(self._cache)} cached)"

    # --- reading the cache ------------------------------------------------------------------
    @property
    def has_synced(self) -> bool:
        """True once the first list completed (or an optional resource was found unserved)."""
        return self._synced.is_set()

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self._cache.get(((namespace or "") if self.gvr.namespaced else "", name))

    def list(self, namespace: str | None = None) -> ObjList:
        """Cached objects, all or in one namespace, ordered by (namespace, name)."""
        return [
            obj
            for key, obj in sorted(self._cache.items())
            if namespace is None or key[0] == namespace
        ]

    def keys(self) -> KeyList:
        return sorted(self._cache)

    def by_owner_uid(self, uid: str) -> ObjList:
        """Cached objects whose controller ownerReference has ``uid``."""
        return [self._cache[k] for k in sorted(self._owners.get(uid, ())) if k in self._cache]

    def __len__(self) -> int:
        return len(self._cache)

    def record_write(self, obj: Obj, *, notify: bool = False) -> bool:
        """Put ``obj``, the API's answer to a write this process just made, into the cache
        ahead of its watch event, so the next read does not go back to the version before the
        write (client-go's mutation cache). Returns whether it was stored.

        Skipped when the watch already delivered this resourceVersion or a later one (the cache
        is then at least as new, and the object may even have been deleted since), for an
        object this informer does not watch (other namespace, or not matching its selectors),
        and while the resource is not served (the next list, served or not, decides; the write
        was answered, so the resource is served now: :meth:`recheck`).
        When the watch event for the write arrives it carries the same resourceVersion and is
        not reported again; every other change still arrives as its own event. Handlers are not
        called (the writer knows what it wrote) unless ``notify``: then they are told now, as
        the watch event would have told them, which a cache shared by several readers needs
        (the local executor's Pods: its Job controller writes them, its kubelet runs them)."""
        if not self.served:
            self.recheck()
            return False
        rv = _rv_number(_rv(obj))
        if rv is None or rv <= (_rv_number(self.resource_version) or 0):
            return False
        if not self._watches(obj):
            return False
        key = key_of(obj)
        cached = self._cache.get(key)
        if cached is not None and (_rv_number(_rv(cached)) or 0) >= rv:
            return False
        stored = self._cached_form(obj)
        old = self._store(key, stored)
        if notify:
            self._emit(ADDED if old is None else MODIFIED, stored, old)
        return True

    def _watches(self, obj: Obj) -> bool:
        """Whether ``obj`` is in this informer's scope (simple label selectors only: ``k``,
        ``k=v``, comma-separated; anything else counts as not watched)."""
        if self.field_selector:
            return False
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        if self.namespace is not None and namespace != self.namespace:
            return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for raw in (self.label_selector or "").split(","):
            term = raw.strip()
            if not term:
                continue
            key, eq, value = term.partition("=")
            if any(ch in term for ch in "!<>() ") or value.startswith("="):
                return False
            if key not in labels or (eq and labels[key] != value):
                return False
        return True

    # --- lifecycle --------------------------------------------------------------------------
    def add_handler(self, handler: Handler) -> None:
        """Call ``handler`` for every later change. Added after sync, it is not told about
        objects already cached: read :meth:`list` for those."""
        self._handlers.append(handler)

    def recheck(self) -> None:
        """List an optional resource found not served again now, rather than when its
        discovery delay ends; with ``discovery_interval=None`` this is what lists it again."""
        self._recheck.set()

    def add_served_handler(self, handler: ServedHandler) -> None:
        """Call ``handler(served)`` each time a list finds an optional resource newly served
        or no longer served (after the cache changed accordingly; the first 404 counts)."""
        self._served_handlers.append(handler)

    async def start(self, timeout: float | None = None) -> None:
        """Start listing and watching; return once the first list completed (raising
        ``TimeoutError`` after ``timeout`` seconds, the informer still running)."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name=f"informer {self.gvr.resource}")
            if self.resync_period:
                self._resync_task = asyncio.create_task(
                    self._resync(self.resync_period), name=f"resync {self.gvr.resource}"
                )
        await self.wait_synced(timeout)

    async def wait_synced(self, timeout: float | None = None) -> None:
        if self._synced.is_set():
            return
        if self._task is None:
            raise RuntimeError(f"{self!r} was not started")
        synced = asyncio.ensure_future(self._synced.wait())
        try:
            done, _ = await asyncio.wait(
                {synced, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            synced.cancel()
        if synced in done or self._synced.is_set():
            return
        if self._task in done:
            self._task.result()  # re-raise what ended it
            raise RuntimeError(f"{self!r} stopped before its first list")
        raise TimeoutError(f"{self!r} did not sync within {timeout}s")

    async def stop(self) -> None:
        """Stop watching (the cache keeps its content)."""
        self._stopping = True
        tasks = [t for t in (self._task, self._resync_task) if t is not None]
        self._task = self._resync_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- the loop ---------------------------------------------------------------------------
    async def _run(self) -> None:
        need_list = True
        expired_in_a_row = 0
        while not self._stopping:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                    self.backoff.reset()
                    if not self.served:
                        need_list = True
                        await self._await_discovery()
                        continue
                if not await self._watch_once():
                    await self._sleep(self.backoff.next())
                expired_in_a_row = 0
            except asyncio.CancelledError:
                raise
            except Expired as exc:
                log.info("%r: %s; relisting", self, exc.message)
                need_list = True
                expired_in_a_row += 1
                if expired_in_a_row > 1:  # relisted and still too old: do not spin
                    await self._sleep(self.backoff.next())
            except Exception as exc:
                if isinstance(exc, APIError) and exc.is_not_found:
                    need_list = True  # the resource went away: the list will tell
                log.warning("%r: %s; retrying", self, exc)
                await self._sleep(self.backoff.next())

    async def _await_discovery(self) -> None:
        """Until an unserved optional resource is to be listed again."""
        if self.discovery_backoff is not None:
            await self._sleep(self.discovery_backoff.next())
        elif self.discovery_interval is not None:
            await self._sleep(self.discovery_interval)
        else:
            await self._recheck.wait()
            self._recheck.clear()

    def _discovery_plan(self) -> str:
        backoff = self.discovery_backoff
        if backoff is not None:
            return f"after {backoff.base:g}s, backing off to {backoff.cap:g}s"
        if self.discovery_interval is None:
            return "once a write shows it is served"
        return f"every {self.discovery_interval:g}s"

    async def _relist(self) -> None:
        try:
            items, rv = await self.kube.list(
                self.gvr,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
            )
        except APIError as err:
            if self.optional and err.is_not_found:
                if self.served:
                    log.info("%r: not served; listing it again %s", self, self._discovery_plan())
                was_served, self.served = self.served, False
                self._replace([])
                self.resource_version = ""
                self._synced.set()
                if was_served:
                    self._served_changed(False)
                return
            raise
        was_served, self.served = self.served, True
        self._replace(items)
        self.resource_version = rv
        self.lists += 1
        self._synced.set()
        if not was_served:
            if self.discovery_backoff is not None:
                self.discovery_backoff.reset()
            self._served_changed(True)

    async def _watch_once(self) -> bool:
        """One watch until the server ends it; False when it ended at once with nothing."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        seconds = int(self.watch_timeout * (1.0 + self.rng.random()))
        got_any = False
        events = self.kube.watch(
            self.gvr,
            self.namespace,
            self.resource_version,
            max(1, seconds),
            True,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )
        async with contextlib.aclosing(events):
            async for event in events:
                got_any = True
                self._apply(event)
        if got_any:
            self.backoff.reset()
        return got_any or loop.time() - started >= MIN_HEALTHY_WATCH

    async def _resync(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            for obj in list(self._cache.values()):
                self._emit(MODIFIED, obj, obj)

    # --- cache updates ----------------------------------------------------------------------
    def _apply(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type") or "")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        rv = _rv(obj)
        if kind == BOOKMARK:
            if rv:
                self.resource_version = rv
            return
        key = key_of(obj)
        cached = self._cache.get(key)
        if kind in (ADDED, MODIFIED) and rv and cached is not None and _rv(cached) == rv:
            # The version record_write already cached (a write of this process): the same
            # object, so it is neither compacted again nor reported again.
            self.resource_version = rv
            return
        obj = self._cached_form(obj)
        if kind in (ADDED, MODIFIED):
            old = self._store(key, obj)
            if old is None:
                self._emit(ADDED, obj, None)
            elif _rv(old) != rv:
                self._emit(MODIFIED, obj, old)
        elif kind == DELETED:
            self._emit(DELETED, obj, self._remove(key))
        if rv:
            self.resource_version = rv

    def _replace(self, items: ObjList) -> None:
        """Make the cache equal ``items``, emitting the differences (a relist)."""
        fresh = {key_of(obj): self._cached_form(obj) for obj in items}
        for key in [k for k in self._cache if k not in fresh]:
            gone = self._remove(key)
            if gone is not None:
                self._emit(DELETED, gone, gone)
        for key, obj in fresh.items():
            old = self._store(key, obj)
            if old is None:
                self._emit(ADDED, obj, None)
            elif _rv(old) != _rv(obj):
                self._emit(MODIFIED, obj, old)

    def _cached_form(self, obj: Obj) -> Obj:
        return compact(self.transform(obj) if self.transform is not None else obj)

    def _store(self, key: Key, obj: Obj) -> Obj | None:
        old = self._cache.get(key)
        self._cache[key] = obj
        before = _controller_uid(old) if old is not None else None
        after = _controller_uid(obj)
        if before != after:
            self._unindex(before, key)
        if after is not None:
            self._owners.setdefault(after, set()).add(key)
        return old

    def _remove(self, key: Key) -> Obj | None:
        old = self._cache.pop(key, None)
        if old is not None:
            self._unindex(_controller_uid(old), key)
        return old

    def _unindex(self, uid: str | None, key: Key) -> None:
        if uid is None:
            return
        keys = self._owners.get(uid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._owners[uid]

    def _served_changed(self, served: bool) -> None:
        for handler in list(self._served_handlers):
            try:
                handler(served)
            except Exception:  # as in _emit: a faulty handler must not stop the cache
                log.exception("%r: served handler %r failed", self, handler)

    def _emit(self, kind: str, obj: Obj, old: Obj | None) -> None:
        for handler in list(self._handlers):
            try:
                handler(kind, obj, old)
            except Exception:  # a faulty handler must not stop the cache
                log.exception("%r: handler %r failed on %s", self, handler, kind)
