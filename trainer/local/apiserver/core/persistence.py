"""The state file (SQLite) that keeps a ``trainer up`` / ``trainer apiserver`` cluster across
restarts, with the guarantee etcd gives kube-apiserver: a write is acknowledged only once it
is in the file.

The store hands every write to :meth:`Persistence.commit` *before* it changes anything in
memory (see :mod:`trainer.local.apiserver.store`); one call is one SQLite transaction, so an
object and the resourceVersion clock are stored together or not at all. Each object is a row
(its JSON body, its resourceVersion and a CRC-32 of the body); the clock is the highest row
version or the ``meta`` row ``rv`` written with every delete, whichever is higher (a put's row
carries its version, so only deletes need the meta row). A failed commit raises a 503
Status naming the cause and leaves the file, the memory and the clock as they were.

Durability: WAL journaling with ``synchronous=NORMAL``. A commit is written to the WAL file
before the write is acknowledged, so it survives the server being killed (SIGKILL, OOM
kill); it is fsynced at the next checkpoint, so an OS crash or power loss may lose the last
acknowledged writes (the file stays consistent). docs/local-plane.md, "State file: durability
and recovery", says so to users.

On start the file is locked and checked (:mod:`trainer.local.apiserver.statefile`) and every
row is validated while it is loaded: a row whose checksum, JSON or shape is wrong, or whose
object this server would not store now (:func:`metadata.stored_problem`), refuses the whole
file with one line naming the row. CRDs are loaded first so their resources are served.
Watch history is not kept: clients that reconnect with an old resourceVersion get 410 Gone
and relist, as after an etcd compaction.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import zlib
from typing import TYPE_CHECKING, Any

from trainer.local.apiserver import metadata
from trainer.local.apiserver.core import crd
from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.statefile import StateFileError, StateLock, move_aside, open_state
from trainer.local.apiserver.store import Write

if TYPE_CHECKING:
    from trainer.local.apiserver.resources import Registry
    from trainer.local.apiserver.store import Store

log = logging.getLogger("trainer.apiserver.persistence")

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
UPSERT = "INSERT OR REPLACE INTO objects (grp, plural, namespace, name, rv, body, crc) VALUES (?, ?, ?, ?, ?, ?, ?)"  # noqa: E501
DELETE = "DELETE FROM objects WHERE grp=? AND plural=? AND namespace=? AND name=?"
SET_RV = "INSERT OR REPLACE INTO meta (key, value) VALUES ('rv', ?)"


class Persistence:
    """The open, locked state file of one server. ``reset_damaged``: a damaged file is moved
    aside (``FILE.damaged-<timestamp>``) and an empty one started instead of refusing."""

    def __init__(
        self, registry: Registry, store: Store, path: str, *, reset_damaged: bool = False
    ) -> None:
        self.registry = registry
        self.store = store
        self.path = path
        self.reset_damaged = reset_damaged
        self.moved_to: str | None = None
        self._crds: list[str] = []  # CRDs whose resources the file made the server serve
        self._lock = StateLock(path)
        self._lock.acquire()
        try:
            try:
                self.db = open_state(path)
            except StateFileError as err:
                if not (err.damaged and reset_damaged):
                    raise
                self._move_aside(err)
                self.db = open_state(path)
        except BaseException:
            self._lock.release()
            raise

    def _move_aside(self, err: StateFileError) -> None:
        try:
            self.moved_to = move_aside(self.path)
        except OSError as exc:
            raise StateFileError(
                self.path, f"{err.problem}, and it cannot be moved aside: {exc.strerror}"
            ) from None
        log.warning("%s; moved to %s, starting empty", err, self.moved_to)

    # --- loading ----------------------------------------------------------------------------
    def load(self) -> int:
        """Read every stored object into the server (the file is refused with a
        :class:`StateFileError` at the first bad row, or moved aside with ``reset_damaged``);
        returns how many were loaded. From then on every write of the store goes through
        :meth:`commit`."""
        try:
            return self._load()
        except StateFileError as err:
            if not (err.damaged and self.reset_damaged):
                raise
            for name in self._crds:  # nothing else was taken from the file yet
                self.registry.remove_crd(name)
            self._crds.clear()
            self.db.close()
            self._move_aside(err)
            self.db = open_state(self.path)
            return self._load()

    def _load(self) -> int:
        try:
            rows = [
                self._decode(row)
                for row in self.db.execute(
                    "SELECT rowid, grp, plural, namespace, name, rv, body, crc FROM objects "
                    "ORDER BY rv"
                )
            ]
            stored = self.db.execute("SELECT value FROM meta WHERE key = 'rv'").fetchone()
        except sqlite3.Error as exc:
            raise StateFileError(self.path, f"is damaged ({exc})", damaged=True) from None
        try:
            meta_rv = int(stored[0]) if stored else 0
        except (TypeError, ValueError):
            raise StateFileError(
                self.path, f"is damaged (meta row rv is {stored[0]!r})", damaged=True
            ) from None
        for where, key, _rv, obj in rows:
            if key == CRD_KEY:
                try:
                    types = crd.resource_types(obj)
                except Exception as exc:  # any malformed spec: the row is bad, not the server
                    raise StateFileError(
                        self.path,
                        f"is damaged ({where}: not a usable CustomResourceDefinition: "
                        f"{type(exc).__name__}: {exc})",
                        damaged=True,
                    ) from None
                self._crds.append(obj["metadata"]["name"])
                for rt in types:
                    self.registry.add(rt)
        for where, key, _rv, obj in rows:
            served = self.registry.by_key(*key)
            # (a resource no longer served is dropped by the garbage collector at start)
            problem = metadata.stored_problem(served, obj) if served is not None else ""
            if problem:
                raise self._bad(where, problem)
        store = self.store
        for _where, key, rv, obj in rows:
            store.put(key, obj, None, rv=rv)
        store.rv = max([store.rv, meta_rv, *(r[2] for r in rows)])
        store.compact()
        store.backend = self.commit
        return len(rows)

    def _decode(self, row: tuple[Any, ...]) -> tuple[str, tuple[str, str], int, dict[str, Any]]:
        rowid, grp, plural, namespace, name, rv, body, crc = row
        where = f"row {rowid}"
        if not all(isinstance(v, str) for v in (grp, plural, namespace, name)) or not (
            plural and name
        ):
            raise self._bad(where, "its key columns are not names")
        where = f"row {rowid} ({plural}{'.' + grp if grp else ''} {namespace}/{name})"
        if type(rv) is not int or rv <= 0:
            raise self._bad(where, f"its resourceVersion is {rv!r}")
        if not isinstance(body, str):
            raise self._bad(where, "its body is not text")
        if crc is not None and crc != zlib.crc32(body.encode()):
            raise self._bad(where, "its body does not match its checksum")
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise self._bad(where, f"its body is not valid JSON ({exc})") from None
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            raise self._bad(where, "its body is not an object with metadata")
        for field, want in (("name", name), ("namespace", namespace)):
            if (meta.get(field) or "") != want:
                raise self._bad(where, f"metadata.{field} is {meta.get(field)!r}")
        for field, value in (
            ("apiVersion", obj.get("apiVersion")),
            ("kind", obj.get("kind")),
            ("metadata.uid", meta.get("uid")),
        ):
            if not isinstance(value, str) or not value:
                raise self._bad(where, f"{field} is {value!r}")
        return where, (grp, plural), rv, obj

    def _bad(self, where: str, what: str) -> StateFileError:
        what = " ".join(what.splitlines())  # one line, whatever the cause says
        return StateFileError(self.path, f"is damaged ({where}: {what})", damaged=True)

    # --- writing ----------------------------------------------------------------------------
    def commit(self, writes: list[Write]) -> None:
        """Persist a batch of the store's writes in one transaction, or raise a 503."""
        db = self.db
        try:
            if len(writes) == 1 and writes[0].obj is not None:
                db.execute(UPSERT, _row(writes[0]))  # one statement: its own transaction
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                for w in writes:
                    if w.obj is None:
                        db.execute(DELETE, (*w.key, w.namespace, w.name))
                    else:
                        db.execute(UPSERT, _row(w))
                db.execute(SET_RV, (str(writes[-1].rv),))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            log.error("a write was not persisted to %s: %s", self.path, exc)
            raise APIError(
                503,
                "ServiceUnavailable",
                f"the write could not be stored in the state file {self.path} ({exc}); "
                "nothing was changed, retry later",
            ) from None

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            self._lock.release()


def _row(w: Write) -> tuple[Any, ...]:
    body = json.dumps(w.obj, separators=(",", ":"))
    return (*w.key, w.namespace, w.name, w.rv, body, zlib.crc32(body.encode()))
