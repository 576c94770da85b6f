"""`FileStorage`: the default backend — session files plus `index.sqlite` and `checkpoints.sqlite`
under one data root (SPEC §2)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES
from workmem.state.search_index import SearchIndex
from workmem.state.sqlite import connect
from workmem.state.store import SessionStore
from workmem.state.tasks import TaskStore

CHECKPOINTS_FILE = "checkpoints.sqlite"


class FileStorage:
    """Sessions in files, tasks / leases / full text in `index.sqlite`, commit checkpoints in SQLite."""

    def __init__(self, root: Path, *, durable: bool = True,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.root = root
        self.sessions = SessionStore(root, durable=durable, max_message_bytes=max_message_bytes)
        self.tasks = TaskStore(root)
        self.search = SearchIndex(root)
        self._saver: Any = None
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def checkpointer(self) -> Any:
        """`SqliteSaver` on `<root>/checkpoints.sqlite` (WAL, synchronous=NORMAL: a checkpoint lost to a
        power cut only re-runs a node, and every node is idempotent because the files are the truth)."""
        with self._lock:
            if self._saver is None:
                from langgraph.checkpoint.sqlite import SqliteSaver

                self._conn = connect(self.root / CHECKPOINTS_FILE, synchronous="NORMAL")
                self._saver = SqliteSaver(self._conn)
                self._saver.setup()
            return self._saver

    def close(self) -> None:
        """Flush the session metas and close every database connection."""
        self.sessions.close()
        self.tasks.close()
        self.search.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn, self._saver = None, None
