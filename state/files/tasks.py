"""Commit tasks and session leases in `<root>/index.sqlite`.

Tasks survive restarts; a lease row says which task may commit a session right now. Lease changes
run in `BEGIN IMMEDIATE` transactions. The full-text index lives in the same file but in its own
module (`search_index.py`), so rebuilding it can never take these rows with it.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.files.sqlite import ThreadConnections
from workmem.state.ids import canonical_archive_id, check_session_id
from workmem.state.session_meta import now_iso
from workmem.state.storage import COMMIT_THREAD_MARK, DELETE_TASK_PREFIX, commit_thread_id
from workmem.state.task_rules import TaskStatus, check_nonempty, check_status, check_ttl, task_updates

INDEX_FILE = "index.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, archive_id TEXT, thread_id TEXT,
    status TEXT NOT NULL, error TEXT, attempts INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, result TEXT);
CREATE INDEX IF NOT EXISTS tasks_by_session ON tasks(session_id, status);
CREATE INDEX IF NOT EXISTS tasks_keeping_a_thread ON tasks(updated_at)
    WHERE status = 'completed' AND thread_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, owner TEXT, pid INTEGER, host TEXT,
    expires_at REAL NOT NULL);
"""




class TaskStore:
    """Tasks and leases of one data root; safe to share between threads (one connection each)."""

    def __init__(self, root: str | os.PathLike[str], *, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(root, (str, os.PathLike)) or not str(root):
            raise InvalidInput("root", root, "must be a non-empty path")
        self.root = Path(root).absolute()
        self._db = ThreadConnections(self.root / INDEX_FILE, SCHEMA)
        self._clock = clock

    @property
    def db(self) -> Any:
        """This thread's sqlite-utils Database on `index.sqlite`."""
        return self._db.db

    def close(self) -> None:
        """Close every connection (any thread)."""
        self._db.close()

    # -- tasks --------------------------------------------------------------------------------------

    def create_task(self, session_id: str, *, task_id: str | None = None, archive_id: str | None = None,
                    thread_id: str | None = None, status: TaskStatus = "pending") -> dict[str, Any]:
        """Insert a commit task row and return it."""
        check_session_id(session_id)
        task_id = uuid.uuid4().hex if task_id is None else check_nonempty(task_id, "task_id")
        now = now_iso()
        row = {"task_id": task_id, "session_id": session_id,
               "archive_id": None if archive_id is None else canonical_archive_id(archive_id),
               "thread_id": thread_id if thread_id is not None else commit_thread_id(session_id, task_id),
               "status": check_status(status), "error": None, "attempts": 0, "created_at": now, "updated_at": now,
               "result": None}
        try:
            self.db["tasks"].insert(row)
        except sqlite3.IntegrityError:
            raise InvalidInput("task_id", task_id, "a task with this id exists") from None
        return _task(row)

    def update_task(self, task_id: str, **fields: Any) -> dict[str, Any]:
        """Change status / error (redacted, ≤ 500 chars) / attempts / result / archive_id / thread_id."""
        updates = task_updates(fields)
        cursor = self.db.execute(
            f"UPDATE tasks SET {', '.join(f'{k} = ?' for k in updates)} WHERE task_id = ?",
            [*updates.values(), task_id])
        if cursor.rowcount == 0:
            raise InvalidInput("task_id", task_id, "no such task")
        return self.get_task(task_id) or {}

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        """The task row (result parsed from JSON), or None."""
        rows = list(self.db["tasks"].rows_where("task_id = ?", [task_id]))
        return _task(rows[0]) if rows else None

    def list_tasks(self, session_id: str | None = None, status: TaskStatus | None = None) -> list[dict[str, Any]]:
        """Tasks, oldest first, optionally of one session and/or one status."""
        where, args = [], []
        if session_id is not None:
            where.append("session_id = ?")
            args.append(check_session_id(session_id))
        if status is not None:
            where.append("status = ?")
            args.append(check_status(status))
        rows = self.db["tasks"].rows_where(" AND ".join(where) or None, args, order_by="created_at, rowid")
        return [_task(r) for r in rows]

    def threads_to_prune(self, keep: int) -> list[dict[str, Any]]:
        """Completed engine commits beyond the newest `keep` that still have a checkpoint thread."""
        rows = self.db.execute(
            "SELECT task_id, thread_id FROM tasks WHERE status = 'completed' AND thread_id IS NOT NULL "
            "ORDER BY updated_at DESC, rowid DESC LIMIT -1 OFFSET ?", [keep]).fetchall()
        return [{"task_id": t, "thread_id": th} for t, th in rows if COMMIT_THREAD_MARK in th]

    def forget_thread(self, task_id: str) -> None:
        """Record that a task's checkpoint thread was deleted (its `thread_id` becomes NULL)."""
        self.db.execute("UPDATE tasks SET thread_id = NULL WHERE task_id = ?", [task_id])

    def delete_session(self, session_id: str, *, created_up_to: str) -> list[str]:
        """Delete a deleted session's task rows created up to `created_up_to` (a later session with the same
        id keeps its own) and its lease; returns the checkpoint thread ids those tasks still had."""
        check_session_id(session_id)
        with self._db.immediate() as db:
            rows = db.execute("SELECT task_id, thread_id FROM tasks WHERE session_id = ? AND created_at <= ?",
                              [session_id, created_up_to]).fetchall()
            db.execute("DELETE FROM tasks WHERE session_id = ? AND created_at <= ?", [session_id, created_up_to])
            lease = db.execute("SELECT task_id FROM leases WHERE session_id = ?", [session_id]).fetchone()
            if lease and (lease[0] in {task for task, _ in rows} or lease[0].startswith(DELETE_TASK_PREFIX)):
                db.execute("DELETE FROM leases WHERE session_id = ?", [session_id])
        return [thread for _, thread in rows if thread]

    # -- leases -------------------------------------------------------------------------------------

    def acquire_lease(self, session_id: str, task_id: str, owner: str, ttl: float = 60) -> str | None:
        """Take the session's lease for `task_id`: None when taken (or already ours), else the holder's task id.

        "Ours" means the same task and the same owner: two processes resuming one task never both hold it.
        """
        check_session_id(session_id)
        check_nonempty(task_id, "task_id")
        ttl = check_ttl(ttl)
        now = self._clock()
        with self._db.immediate() as db:
            row = db.execute("SELECT task_id, expires_at, owner FROM leases WHERE session_id = ?",
                             [session_id]).fetchone()
            if row is not None and row[1] > now and (row[0] != task_id or row[2] != str(owner)):
                return str(row[0])  # held, by another task or by another process resuming the same task
            db.execute(
                "INSERT INTO leases (session_id, task_id, owner, pid, host, expires_at) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET task_id = excluded.task_id, owner = excluded.owner, "
                "pid = excluded.pid, host = excluded.host, expires_at = excluded.expires_at",
                [session_id, task_id, str(owner), os.getpid(), socket.gethostname(), now + ttl])
        return None

    def renew_lease(self, session_id: str, task_id: str, ttl: float = 60) -> bool:
        """Extend our lease; False when another task holds it (ours expired and was taken over)."""
        ttl = check_ttl(ttl)
        with self._db.immediate() as db:
            cursor = db.execute("UPDATE leases SET expires_at = ? WHERE session_id = ? AND task_id = ?",
                                [self._clock() + ttl, session_id, task_id])
        return cursor.rowcount == 1

    def release_lease(self, session_id: str, task_id: str) -> None:
        """Give the lease up (only if `task_id` still holds it)."""
        with self._db.immediate() as db:
            db.execute("DELETE FROM leases WHERE session_id = ? AND task_id = ?", [session_id, task_id])

    def lease_holder(self, session_id: str) -> dict[str, Any] | None:
        """The unexpired lease row of a session, or None."""
        rows = list(self.db["leases"].rows_where("session_id = ? AND expires_at > ?", [session_id, self._clock()]))
        return rows[0] if rows else None


def _task(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if isinstance(out.get("result"), str):
        out["result"] = json.loads(out["result"])
    return out
