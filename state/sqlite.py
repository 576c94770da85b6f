"""Explicit SQLite connections as SPEC §2 asks: shareable across threads, 30 s busy timeout, WAL."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

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
