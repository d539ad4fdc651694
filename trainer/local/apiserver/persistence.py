"""An optional state file (SQLite) so a ``trainer up`` cluster survives a restart.

Every write the store makes is mirrored into the file (one row per object); on start the
file is read back, CRDs first so their resources are served again, and the resourceVersion
clock resumes after the highest stored version. Watch history is not kept: clients that
reconnect with an old resourceVersion get 410 Gone and relist, as after an etcd compaction.
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING

from trainer.local.apiserver import crd
from trainer.local.apiserver.store import Event

if TYPE_CHECKING:
    from trainer.local.apiserver.server import APIServer

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    grp TEXT NOT NULL, plural TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    rv INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (grp, plural, namespace, name)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class Persistence:
    def __init__(self, server: APIServer, path: str) -> None:
        self.server = server
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def load(self) -> int:
        """Read every stored object into the server; returns how many were loaded."""
        rows = self.db.execute(
            "SELECT grp, plural, namespace, name, rv, body FROM objects ORDER BY rv"
        ).fetchall()
        crds = [
            r for r in rows if (r[0], r[1]) == ("apiextensions.k8s.io", "customresourcedefinitions")
        ]
        for row in crds:
            obj = json.loads(row[5])
            for rt in crd.resource_types(obj):
                self.server.registry.add(rt)
        store = self.server.store
        top = 0
        for grp, plural, _ns, _name, rv, body in rows:
            obj = json.loads(body)
            store.put((grp, plural), obj, None, rv=rv)
            top = max(top, rv)
        stored = self.db.execute("SELECT value FROM meta WHERE key = 'rv'").fetchone()
        store.rv = max(top, int(stored[0]) if stored else 0)
        store.compact()
        store.on_write.append(self._mirror)
        return len(rows)

    def _mirror(self, ev: Event) -> None:
        meta = ev.obj.get("metadata") or {}
        key = (ev.key[0], ev.key[1], ev.namespace, meta.get("name", ""))
        if ev.type == "DELETED":
            self.db.execute(
                "DELETE FROM objects WHERE grp=? AND plural=? AND namespace=? AND name=?", key
            )
        else:
            self.db.execute(
                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)",
                (*key, ev.rv, json.dumps(ev.obj, separators=(",", ":"))),
            )
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(ev.rv),))

    def close(self) -> None:
        self.db.close()
