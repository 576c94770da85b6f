"""Commit tasks and session leases in Postgres: the `TaskStorage` of the Postgres backend.

A lease is a row per session taken with `INSERT … ON CONFLICT DO UPDATE … WHERE expires_at <= now`,
one statement, so at most one commit per session runs across every replica. Time is the database's
clock (one clock for every machine) unless a `clock` is given (tests).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

from workmem.state.errors import DatabaseUnavailable, InvalidInput
from workmem.state.ids import canonical_archive_id
from workmem.state.postgres.schema import Database, session_key
from workmem.state.session_meta import now_iso
from workmem.state.storage import COMMIT_THREAD_MARK, commit_thread_id
from workmem.state.task_rules import TaskStatus, check_nonempty, check_status, check_ttl, task_updates

log = logging.getLogger("workmem.tasks")
TASK_COLUMNS = "task_id, session_id, archive_id, thread_id, status, error, attempts, created_at, updated_at, result"
NOW = "COALESCE(%(now)s::float8, extract(epoch FROM clock_timestamp()))"
_TAKE_LEASE = f"""
INSERT INTO leases AS l (session_id, task_id, owner, pid, host, expires_at)
VALUES (%(sid)s, %(task)s, %(owner)s, %(pid)s, %(host)s, {NOW} + %(ttl)s)
ON CONFLICT (session_id) DO UPDATE SET task_id = excluded.task_id, owner = excluded.owner, pid = excluded.pid,
    host = excluded.host, expires_at = excluded.expires_at
WHERE l.expires_at <= {NOW} OR (l.task_id = excluded.task_id AND l.owner = excluded.owner)
RETURNING task_id
"""


class PgTaskStore:
    """Tasks and leases of one Postgres schema; safe for many threads, processes and machines."""

    def __init__(self, db: Database, *, clock: Callable[[], float] | None = None) -> None:
        self.db = db
        self._clock = clock

    def close(self) -> None:
        """Nothing to close; the storage closes the pool."""

    # -- tasks --------------------------------------------------------------------------------------

    def create_task(self, session_id: str, *, task_id: str | None = None, archive_id: str | None = None,
                    thread_id: str | None = None, status: TaskStatus = "pending") -> dict[str, Any]:
        """Insert a commit task row and return it."""
        session_key(session_id)
        task_id = uuid.uuid4().hex if task_id is None else check_nonempty(task_id, "task_id")
        now = now_iso()
        row = self.db.row(
            f"INSERT INTO tasks (task_id, session_id, archive_id, thread_id, status, created_at, updated_at) "
            f"VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (task_id) DO NOTHING RETURNING {TASK_COLUMNS}",
            [task_id, session_id, None if archive_id is None else canonical_archive_id(archive_id),
             thread_id if thread_id is not None else commit_thread_id(session_id, task_id), check_status(status),
             now, now])
        if row is None:
            raise InvalidInput("task_id", task_id, "a task with this id exists")
        return _task(row)

    def update_task(self, task_id: str, **fields: Any) -> dict[str, Any]:
        """Change status / error (redacted, ≤ 500 chars) / attempts / result / archive_id / thread_id."""
        updates = task_updates(fields, nul_free=True)
        sets = ", ".join(f"{k} = %({k})s" + ("::jsonb" if k == "result" else "") for k in updates)
        row = self.db.row(f"UPDATE tasks SET {sets} WHERE task_id = %(task_id_)s RETURNING {TASK_COLUMNS}",
                          {**updates, "task_id_": task_id})
        if row is None:
            raise InvalidInput("task_id", task_id, "no such task")
        return _task(row)

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        """The task row, or None."""
        row = self.db.row(f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = %s", [task_id])
        return _task(row) if row else None

    def list_tasks(self, session_id: str | None = None, status: TaskStatus | None = None) -> list[dict[str, Any]]:
        """Tasks, oldest first, optionally of one session and/or one status."""
        where, args = [], []
        if session_id is not None:
            where.append("session_id = %s")
            args.append(session_key(session_id))
        if status is not None:
            where.append("status = %s")
            args.append(check_status(status))
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        return [_task(r) for r in self.db.rows(f"SELECT {TASK_COLUMNS} FROM tasks {clause} ORDER BY created_at, ord",
                                               args)]

    def threads_to_prune(self, keep: int) -> list[dict[str, Any]]:
        """Completed engine commits beyond the newest `keep` that still have a checkpoint thread."""
        rows = self.db.rows("SELECT task_id, thread_id FROM tasks WHERE status = 'completed' AND thread_id IS NOT NULL "
                            "ORDER BY updated_at DESC, ord DESC OFFSET %s", [keep])
        return [r for r in rows if COMMIT_THREAD_MARK in r["thread_id"]]

    def forget_thread(self, task_id: str) -> None:
        """Record that a task's checkpoint thread was deleted (its `thread_id` becomes NULL)."""
        self.db.row("UPDATE tasks SET thread_id = NULL WHERE task_id = %s RETURNING task_id", [task_id])

    # -- leases -------------------------------------------------------------------------------------

    def acquire_lease(self, session_id: str, task_id: str, owner: str, ttl: float = 60) -> str | None:
        """Take the session's lease for `task_id`: None when taken (or already ours), else the holder's task id.

        "Ours" means the same task and the same owner: two processes resuming one task never both hold it.
        """
        session_key(session_id)
        check_nonempty(task_id, "task_id")
        args = {"sid": session_id, "task": task_id, "owner": str(owner), "pid": os.getpid(),
                "host": socket.gethostname(), "ttl": check_ttl(ttl)}
        while True:
            args["now"] = self._now()
            if self.db.row(_TAKE_LEASE, args) is not None:
                return None
            holder = self.db.row("SELECT task_id FROM leases WHERE session_id = %s", [session_id])
            if holder is not None:
                return str(holder["task_id"])
            # released between the two statements: try again

    def renew_lease(self, session_id: str, task_id: str, ttl: float = 60) -> bool:
        """Extend our lease; False when another task holds it (or the database could not be reached)."""
        args = {"now": self._now(), "ttl": check_ttl(ttl), "sid": session_id, "task": task_id}
        try:
            row = self.db.row(f"UPDATE leases SET expires_at = {NOW} + %(ttl)s WHERE session_id = %(sid)s "
                              "AND task_id = %(task)s RETURNING task_id", args)
        except DatabaseUnavailable as exc:  # a heartbeat must outlive a dropped connection
            log.warning("could not renew the lease of %s: %s", task_id, exc)
            return False
        return row is not None

    def release_lease(self, session_id: str, task_id: str) -> None:
        """Give the lease up (only if `task_id` still holds it)."""
        self.db.row("DELETE FROM leases WHERE session_id = %s AND task_id = %s RETURNING task_id",
                    [session_id, task_id])

    def lease_holder(self, session_id: str) -> dict[str, Any] | None:
        """The unexpired lease row of a session, or None."""
        return self.db.row(f"SELECT session_id, task_id, owner, pid, host, expires_at FROM leases "
                           f"WHERE session_id = %(sid)s AND expires_at > {NOW}",
                           {"sid": session_id, "now": self._now()})

    def _now(self) -> float | None:
        return self._clock() if self._clock is not None else None


def _task(row: dict[str, Any]) -> dict[str, Any]:
    """A task row as the file backend returns it: ISO timestamps, result parsed."""
    return {**row, "created_at": row["created_at"].isoformat(), "updated_at": row["updated_at"].isoformat()}
