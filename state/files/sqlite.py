"""Explicit SQLite connections: shareable across threads, 30 s busy timeout, WAL.

`ThreadConnections` holds one sqlite-utils `Database` per thread on one file, creates the schema
once, and offers `BEGIN IMMEDIATE` write transactions; the task table and the search index each
own one on `index.sqlite`.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from workmem.state.errors import DamagedFile, StorageError
from workmem.state.files import fsutil

BUSY_TIMEOUT_SECONDS = 30
_WAL_ATTEMPTS = 300


_NOT_OUR_SCHEMA = ("no such column", "no such table", "has no column named")  # a file of the name holding others'


def is_corruption(exc: BaseException) -> bool:
    """True for SQLite's "not a database" / "malformed" errors (not for busy, locked or full)."""
    return type(exc) is sqlite3.DatabaseError


class CheckedConnection(sqlite3.Connection):
    """A connection whose statements turn a damaged database file into `DamagedFile` naming it."""

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        try:
            return super().execute(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise self._translated(exc) from None

    def executemany(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        try:
            return super().executemany(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise self._translated(exc) from None

    def executescript(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        try:
            return super().executescript(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise self._translated(exc) from None

    def _translated(self, exc: sqlite3.DatabaseError) -> BaseException:
        path = str(getattr(self, "path", "a database"))
        if is_corruption(exc):
            return DamagedFile(path, f"{exc}; `workmem reindex` or `workmem repair` rebuilds or moves it aside")
        text = str(exc)
        if any(sign in text for sign in _NOT_OUR_SCHEMA):
            return DamagedFile(path, f"its tables are not workmem's ({exc}); `workmem reindex` or `workmem repair` "
                                     "rebuilds or moves it aside")
        if "readonly" in text or "read-only" in text:
            return StorageError(path, OSError(errno.EROFS, text))
        if "disk is full" in text or "disk I/O error" in text:
            return StorageError(path, OSError(errno.ENOSPC if "full" in text else errno.EIO, text))
        return exc


def connect(path: Path, *, isolation_level: str | None = "", synchronous: str = "FULL",
            auto_vacuum: str | None = None) -> sqlite3.Connection:
    """Open `path` (creating its folder) with `check_same_thread=False`, `timeout=30` and WAL; a damaged
    file is `DamagedFile` naming it. `auto_vacuum` (e.g. "INCREMENTAL") is set on a new, empty file only."""
    if path.exists() and not path.is_file():  # a folder or a FIFO where the database file belongs
        raise DamagedFile(str(path), "is not a regular file; `workmem reindex` or `workmem repair` moves it aside")
    try:
        fsutil.ensure_dirs(path.parent)
        new = not path.exists() or path.stat().st_size == 0  # the auto_vacuum pragma writes: only on a new file
        fsutil.create_file(path)  # with the data root's file mode, which SQLite's -wal and -shm files copy
        conn = sqlite3.connect(path, check_same_thread=False, timeout=BUSY_TIMEOUT_SECONDS,
                               isolation_level=isolation_level, factory=CheckedConnection)
        conn.path = path  # type: ignore[attr-defined]
        try:
            if auto_vacuum and new:  # before WAL: switching the journal writes the header that fixes this setting
                conn.execute(f"PRAGMA auto_vacuum={auto_vacuum}")
            enable_wal(conn)
            conn.execute(f"PRAGMA synchronous={synchronous}")
        except BaseException:
            conn.close()
            raise
    except (OSError, sqlite3.OperationalError) as exc:
        if not path.exists() or os.access(path.parent, os.W_OK) and not _read_only_fs(path.parent):
            raise
        return _read_only(path, isolation_level, exc)  # a read-only root: reads go on, writes fail typed
    return conn


def _read_only_fs(folder: Path) -> bool:
    return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)


def _read_only(path: Path, isolation_level: str | None, cause: BaseException) -> sqlite3.Connection:
    """`path` opened read-only and immutable (a read-only file system cannot change under us)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False,
                           timeout=BUSY_TIMEOUT_SECONDS, isolation_level=isolation_level, factory=CheckedConnection)
    conn.path = path  # type: ignore[attr-defined]
    return conn


def enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL; retried because the switch can fail with SQLITE_BUSY without waiting for the lock."""
    for attempt in range(_WAL_ATTEMPTS):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or attempt == _WAL_ATTEMPTS - 1:
                raise
            time.sleep(min(0.005 * (attempt + 1), 0.1))


@contextmanager
def secure_deletes(conn: sqlite3.Connection) -> Iterator[None]:
    """While the block runs, what `conn` deletes is overwritten with zeros (`PRAGMA secure_delete`), not left in
    free pages; the connection's setting is restored afterwards."""
    before = conn.execute("PRAGMA secure_delete").fetchone()[0]
    conn.execute("PRAGMA secure_delete = ON")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA secure_delete = {int(before)}")


def truncate_wal(conn: sqlite3.Connection) -> bool:
    """Copy the write-ahead log into the database and cut it to zero bytes (its frames hold older page images);
    False when a reader kept it (waits up to the busy timeout first)."""
    return not conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]


class ThreadConnections:
    """One autocommit connection per thread on `path`, the schema created on the first one."""

    def __init__(self, path: Path, schema: str) -> None:
        self.path = path
        self._schema = schema
        self._schema_ready = False
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    @property
    def db(self) -> Database:
        """This thread's sqlite-utils Database (opened on first use, reopened after a fork)."""
        local = self._local
        if getattr(local, "db", None) is None or local.pid != os.getpid():
            local.db, local.pid = self._open(), os.getpid()
        return local.db

    def _open(self) -> Database:
        conn = connect(self.path, isolation_level=None)
        if not self._schema_ready:
            conn.executescript(self._schema)
            self._schema_ready = True
        with self._lock:
            self._conns.append(conn)
        return Database(conn)

    @contextmanager
    def immediate(self) -> Iterator[Database]:
        """A write transaction that takes the database write lock up front (BEGIN IMMEDIATE). An interrupt
        (Ctrl-C) at any point, even as BEGIN or COMMIT returns, rolls it back: an open one would hold the write
        lock of every process until this connection closed."""
        db = self.db
        if db.conn.in_transaction:  # one an interrupt left open on this thread (these never nest)
            db.execute("ROLLBACK")
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close every connection opened here (any thread)."""
        with self._lock:
            conns, self._conns = self._conns, []
            self._schema_ready = False  # the file may be replaced (a rebuild): create the schema again
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._local = threading.local()
