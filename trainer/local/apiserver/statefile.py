"""Opening the API server's state file: one process at a time, and nothing but a healthy,
known file.

A state file is a SQLite database (see :mod:`trainer.local.apiserver.core.persistence` for what it
holds). Before the server trusts it:

1. a lock is taken on a sidecar file, ``FILE.lock`` (``fcntl.flock``, exclusive, non-blocking,
   held until the server stops; the holder writes its pid into it), so a second server on the
   same file is refused at start with the holder's pid, instead of the two overwriting each
   other's objects. The sidecar is left in place: the lock, not the file, is what counts, and
   the kernel drops it when the holder exits, however it exits;
2. the file is checked: a directory or other non-regular file, missing permissions, a header
   that is not SQLite's, a failing ``PRAGMA quick_check`` (torn or bit-flipped pages, a
   truncated file), a SQLite database that is not ours and one written by a newer schema are
   each refused with a :class:`StateFileError` that says what is wrong in one line.

The database is then switched to WAL with ``synchronous=NORMAL`` and a short busy timeout:
the file is this process's alone, so a lock held by anyone else is a fault to report (the
write answers 503), never something to wait seconds for on the event loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time

SCHEMA_VERSION = 1  # PRAGMA user_version of the files this code writes
BUSY_TIMEOUT_S = 0.05
SQLITE_MAGIC = b"SQLite format 3\x00"

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    grp TEXT NOT NULL, plural TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    rv INTEGER NOT NULL, body TEXT NOT NULL, crc INTEGER,
    PRIMARY KEY (grp, plural, namespace, name)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class StateFileError(Exception):
    """The state file cannot be used. ``damaged``: its content is broken (moving it aside
    and starting empty is the way out), as opposed to a file that is busy, unreachable or
    not ours, which is never moved."""

    def __init__(self, path: str, problem: str, *, damaged: bool = False) -> None:
        super().__init__(f"state file {path}: {problem}")
        self.path = path
        self.problem = problem
        self.damaged = damaged


class StateLock:
    """An exclusive ``flock`` on ``FILE.lock`` for the life of the server."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_path = f"{path}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        _check_place(self.path)
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateFileError(
                self.path, f"cannot open its lock file {self.lock_path}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise StateFileError(
                self.path,
                f"is in use by {who} (lock {self.lock_path}); stop it or use another state file",
            ) from None
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            self.release()
            raise StateFileError(
                self.path, f"cannot write its lock file {self.lock_path}: {exc.strerror}"
            ) from None

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _read_pid(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii").strip()
        if text.isdigit():
            return text
    return ""


def open_state(path: str) -> sqlite3.Connection:
    """The checked, configured connection to the state file at ``path`` (created empty when
    missing), or a :class:`StateFileError`. The caller holds the :class:`StateLock`."""
    _check_file(path)
    try:
        db = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise StateFileError(path, f"cannot be opened: {exc}") from None
    try:
        problems = [
            line.strip()
            for (text,) in db.execute("PRAGMA quick_check(3)").fetchall()
            for line in str(text).splitlines()
            if line.strip() and not line.startswith("*** in database")
        ]
        if problems != ["ok"]:
            raise StateFileError(
                path, f"is damaged (integrity check: {'; '.join(problems)})", damaged=True
            )
        _check_schema(path, db)
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StateFileError(path, f"cannot be switched to WAL journaling (got {mode})")
        db.execute("PRAGMA synchronous=NORMAL")
    except StateFileError:
        db.close()
        raise
    except sqlite3.Error as exc:
        db.close()
        raise _sqlite_error(path, exc) from None
    return db


def _check_place(path: str) -> None:
    """What can be told before taking the lock (which creates ``FILE.lock`` beside it)."""
    if os.path.isdir(path):
        raise StateFileError(path, "is a directory, not a state file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise StateFileError(path, f"cannot be created: directory {parent} does not exist")


def _check_file(path: str) -> None:
    _check_place(path)
    if not os.path.lexists(path):
        return
    if not os.path.isfile(path):
        raise StateFileError(path, "is not a regular file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StateFileError(path, f"cannot be read: {exc.strerror}") from None
    if not os.access(path, os.W_OK):
        raise StateFileError(path, "cannot be written: permission denied")
    if head and head != SQLITE_MAGIC[: len(head)]:
        raise StateFileError(path, "is not a SQLite database (unknown header)", damaged=True)
    if 0 < len(head) < len(SQLITE_MAGIC):
        raise StateFileError(path, "is truncated (shorter than a SQLite header)", damaged=True)


def _check_schema(path: str, db: sqlite3.Connection) -> None:
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StateFileError(
            path,
            f"was written by a newer trainer (schema version {version}; this one reads up to "
            f"{SCHEMA_VERSION})",
        )
    tables = {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        db.executescript(SCHEMA + f"PRAGMA user_version={SCHEMA_VERSION};")
        return
    if not {"objects", "meta"} <= tables:
        raise StateFileError(
            path, "is a SQLite database but not a trainer state file (no objects/meta tables)"
        )
    columns = {str(r[1]) for r in db.execute("PRAGMA table_info(objects)")}
    missing = {"grp", "plural", "namespace", "name", "rv", "body"} - columns
    if missing:
        raise StateFileError(
            path, f"has a damaged objects table (missing columns {sorted(missing)})", damaged=True
        )
    if version == 0:
        # Written before checksums: rows get one the next time they are written.
        if "crc" not in columns:
            db.execute("ALTER TABLE objects ADD COLUMN crc INTEGER")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _sqlite_error(path: str, exc: sqlite3.Error) -> StateFileError:
    text = str(exc)
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return StateFileError(path, f"is damaged ({text})", damaged=True)
    if "locked" in text or "busy" in text:
        return StateFileError(path, f"is locked by another program ({text})")
    return StateFileError(path, f"cannot be used ({text})")


def move_aside(path: str) -> str:
    """Rename a damaged state file (and its WAL and shared-memory files) to
    ``FILE.damaged-<UTC timestamp>``; returns the new name. The caller holds the lock."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = f"{path}.damaged-{stamp}"
    n = 0
    while os.path.lexists(target):  # never overwrite an earlier one
        n += 1
        target = f"{path}.damaged-{stamp}-{n}"
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, target + suffix)
    return target
