"""Explicit SQLite connections as SPEC §2 asks: shareable across threads, 30 s busy timeout, WAL.

`ThreadConnections` holds one sqlite-utils `Database` per thread on one file, creates the schema
once, and offers `BEGIN IMMEDIATE` write transactions; the task table and the search index each
own one on `index.sqlite`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlite_utils import Database

BUSY_TIMEOUT_SECONDS = 30
_WAL_ATTEMPTS = 300


def connect(path: Path, *, isolation_level: str | None = "", synchronous: str = "FULL") -> sqlite3.Connection:
    """Open `path` (creating its folder) with `check_same_thread=False`, `timeout=30` and WAL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, timeout=BUSY_TIMEOUT_SECONDS,
                           isolation_level=isolation_level)
    enable_wal(conn)
    conn.execute(f"PRAGMA synchronous={synchronous}")
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
        """A write transaction that takes the database write lock up front (BEGIN IMMEDIATE)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        """Close every connection opened here (any thread)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._local = threading.local()
