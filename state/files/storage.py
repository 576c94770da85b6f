"""`FileStorage`: the default backend — session files plus `index.sqlite` and `checkpoints.sqlite`
under one data root."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from workmem.state.errors import ArchiveNotFound, DamagedFile
from workmem.state.files import fsutil
from workmem.state.files.search_index import SearchIndex
from workmem.state.files.sqlite import BUSY_TIMEOUT_SECONDS, connect, is_corruption, secure_deletes, truncate_wal
from workmem.state.files.store import SESSIONS_DIR, SessionStore
from workmem.state.files.tasks import INDEX_FILE, TaskStore
from workmem.state.forget import ABANDONED_REASON, commit_threads_to_clear, forget_result
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES
from workmem.state.payloads import DEFAULT_LIMITS, PayloadLimits
from workmem.state.session_meta import now_iso
from workmem.state.storage import COMMIT_THREAD_MARK, STUDIO_THREAD_PREFIX

log = logging.getLogger("workmem.storage")
CHECKPOINTS_FILE = "checkpoints.sqlite"
WAL_BYTES = 1 << 20
# Checkpointed at three quarters of it: the transaction that crosses the mark (a commit's checkpoint writes) still fits.
WAL_PAGES = WAL_BYTES * 3 // 4 // 4096
STUDIO_FILE = "studio.sqlite"


def holds_data(root: Path) -> bool:
    """Whether `root` is a workmem data root: its index or its sessions folder is there (opening a root creates
    both, so a root that has neither was never opened)."""
    return (root / INDEX_FILE).is_file() or (root / SESSIONS_DIR).is_dir()


@asynccontextmanager
async def open_studio_saver(root: Path) -> AsyncIterator[Any]:
    """`StudioSaver` (an AsyncSqliteSaver) on `<root>/studio.sqlite`, WAL, 30 s timeout (the server's own async
    connection)."""
    import aiosqlite

    from workmem.state.files.studio_saver import StudioSaver

    fsutil.ensure_dirs(root)
    fsutil.create_file(root / STUDIO_FILE)
    async with aiosqlite.connect(root / STUDIO_FILE, timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        saver = StudioSaver(conn)
        await saver.setup()
        yield saver


# the columns each table must hold when it is there (SqliteSaver's for the checkpoints; ours for the index)
INDEX_TABLES = {"tasks": {"task_id", "session_id", "archive_id", "thread_id", "status"},
                "leases": {"session_id", "task_id", "expires_at"}, "fts_docs": {"session_id", "archive_id", "seq"}}
CHECKPOINT_TABLES = {"checkpoints": {"thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint", "metadata"},
                     "writes": {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "value"}}


def tables_ok(conn: sqlite3.Connection, tables: dict[str, set[str]]) -> bool:
    """Whether each of `tables` the database holds has the columns named (a missing one is created when used)."""
    for table, columns in tables.items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if present and not columns <= present:
            return False
    return True


def database_ok(path: Path, tables: dict[str, set[str]] | None = None) -> bool:
    """Whether a SQLite file (if any) is a regular file that opens, passes `PRAGMA quick_check` and holds `tables`
    with their columns (`tables_ok`)."""
    if not path.exists():
        return True
    if not path.is_file():
        return False
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS)
        try:
            return conn.execute("PRAGMA quick_check").fetchone()[0] == "ok" and tables_ok(conn, tables or {})
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return not is_corruption(exc)


def move_aside(path: Path) -> str:
    """Rename a damaged database (and its WAL files) to `<name>.damaged-<time>`; returns the new name."""
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        source = path.with_name(path.name + suffix)
        if source.exists():
            os.replace(source, aside.with_name(aside.name + suffix))
    return str(aside)


def delete_studio_thread(root: Path, thread_id: str, *, scrub: bool = False) -> None:
    """Delete a Studio thread from `<root>/studio.sqlite` (the `langgraph dev` checkpointer), if any; `scrub`:
    overwrite what it held and truncate the write-ahead log (a forget)."""
    path = root / STUDIO_FILE
    if not path.exists():
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = connect(path)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        if not scrub:
            saver.delete_thread(thread_id)
            return
        with secure_deletes(conn):
            saver.delete_thread(thread_id)
        truncate_wal(conn)
    finally:
        conn.close()


class FileStorage:
    """Sessions in files, tasks / leases / full text in `index.sqlite`, commit checkpoints in SQLite."""

    def __init__(self, root: Path, *, durable: bool = True, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 payload_limits: PayloadLimits = DEFAULT_LIMITS) -> None:
        self.root = root
        self.sessions = SessionStore(root, durable=durable, max_message_bytes=max_message_bytes,
                                     payload_limits=payload_limits)
        self.tasks = TaskStore(root)
        self.search = SearchIndex(root)
        self._saver: Any = None
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def holds_file(self, path: Path) -> bool:
        """Whether `path` is one of this root's own files — under `sessions/`, or one of its databases (with their
        journals): what an export must never replace."""
        try:
            first = path.resolve().relative_to(self.root.resolve()).parts[:1]
        except ValueError:
            return False
        own = (INDEX_FILE, CHECKPOINTS_FILE, STUDIO_FILE)
        return bool(first) and (first[0] == SESSIONS_DIR or first[0].startswith(own))

    def delete_session(self, session_id: str) -> None:
        """Delete a session everywhere: its files (a tombstone first, crash-safe), its full-text rows, its
        task rows and lease, and its checkpoint threads here and in `studio.sqlite`."""
        marker = {"session_id": session_id, "deleted_at": now_iso(), "search_up_to": self.search.high_water()}
        tombstone = self.sessions.entomb(session_id, marker)
        self._finish_delete(marker, tombstone)

    def finish_deletes(self) -> int:
        """Finish every delete a crash interrupted (found by its tombstone); returns how many."""
        found = self.sessions.tombstones()
        for marker, tombstone in found:
            self._finish_delete(marker, tombstone)
        return len(found)

    def _finish_delete(self, marker: dict[str, Any], tombstone: Path) -> None:
        session_id = marker.get("session_id")
        if isinstance(session_id, str) and session_id:
            threads = self.tasks.delete_session(session_id, created_up_to=str(marker.get("deleted_at") or ""))
            for thread in threads:
                if thread.startswith(STUDIO_THREAD_PREFIX):
                    delete_studio_thread(self.root, thread[len(STUDIO_THREAD_PREFIX):])
                else:
                    self.checkpointer().delete_thread(thread)
            self.search.delete_session(session_id, up_to=int(marker.get("search_up_to") or 0))
            self.sessions.end_forget(session_id)  # a forget the delete interrupted has nothing left to do
        self.sessions.remove_tombstone(tombstone)

    # -- forgetting (privacy) -----------------------------------------------------------------------

    def forget_messages(self, session_id: str, seqs: list[int]) -> dict[str, Any]:
        """Remove the verbatim text of stored messages from everything under the root (`state.forget` says what
        stays in their place). Crash-safe through an intent written durably first (`forgetting`): then the
        session's files (live and archived lines, payloads no line refers to any more), the index rows (the
        index compacted and its log truncated), the session's commit checkpoints; the intent goes last. The
        caller holds the session's lease. A forget of the session a crash interrupted is finished first."""
        created = self.sessions.meta(session_id)["created_at"]
        for earlier in self.sessions.forget_intents(session_id):
            self.finish_forget(earlier)
        intent = {"session_id": session_id, "created_at": created, "seqs": list(seqs), "forgotten_at": now_iso()}
        self.sessions.begin_forget(intent)
        return self.finish_forget(intent)

    def pending_forgets(self) -> list[dict[str, Any]]:
        """The intents of forgets a crash interrupted (lists `sessions/`)."""
        return self.sessions.forget_intents()

    def finish_forget(self, intent: dict[str, Any]) -> dict[str, Any]:
        """Do (again) every step of the forget `intent` records, then remove the intent. A session that is gone,
        or was deleted and started again since (another `created_at`), has nothing left to forget."""
        session_id = intent["session_id"]
        seqs = sorted({s for s in intent.get("seqs") or () if isinstance(s, int) and not isinstance(s, bool)})
        out = forget_result(session_id, seqs)
        if (not self.sessions.session_exists(session_id)
                or self.sessions.meta(session_id)["created_at"] != intent.get("created_at")):
            self.sessions.end_forget(session_id)
            return out
        done = self.sessions.forget(session_id, seqs, str(intent.get("forgotten_at") or now_iso()))
        out.update(forgotten=done["forgotten"], payloads_removed=done["payloads_removed"])
        out["index_rows_removed"] = self.search.forget(session_id, seqs)
        out["checkpoint_threads_removed"], out["commits_abandoned"] = self._clear_commit_threads(session_id)
        self.sessions.end_forget(session_id)
        return out

    def _clear_commit_threads(self, session_id: str) -> tuple[int, list[str]]:
        """Delete every checkpoint thread of the session's commits (and Studio runs), overwriting what they held;
        abandon the unfinished commits `commit_threads_to_clear` names. → (threads deleted, tasks abandoned)."""
        tasks = self.tasks.list_tasks(session_id)
        cleared, abandoned = commit_threads_to_clear(tasks, lambda task: self._archive_writer(session_id, task))
        threads = [t["thread_id"] for t in cleared]
        commit_threads = [t for t in threads if not t.startswith(STUDIO_THREAD_PREFIX)]
        if commit_threads and (self.root / CHECKPOINTS_FILE).exists():
            saver = self.checkpointer()
            with secure_deletes(saver.conn):
                for thread in commit_threads:
                    saver.delete_thread(thread)
            with saver.cursor(transaction=False) as cur:
                if cur.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                    log.warning("%s: a reader kept the write-ahead log; older pages of forgotten messages stay in "
                                "it until its next checkpoint", self.root / CHECKPOINTS_FILE)
        for thread in threads:
            if thread.startswith(STUDIO_THREAD_PREFIX):
                delete_studio_thread(self.root, thread[len(STUDIO_THREAD_PREFIX):], scrub=True)
        for task in cleared:
            self.tasks.forget_thread(task["task_id"])
        for task_id in abandoned:
            self.tasks.update_task(task_id, status="abandoned", error=ABANDONED_REASON)
        return len(threads), abandoned

    def _archive_writer(self, session_id: str, task: dict[str, Any]) -> str | None:
        """The task id recorded in the task's reserved archive when that archive is complete, else None."""
        if not task.get("archive_id"):
            return None
        try:
            return self.sessions.read_archive(session_id, task["archive_id"]).get("task_id") or ""
        except (ArchiveNotFound, DamagedFile):
            return None

    def rebuild_index(self, session_id: str | None = None, progress: Any = None) -> dict[str, Any]:
        """`workmem reindex`: rebuild the full-text index from the archive files. A damaged `index.sqlite`
        is moved aside first; the task rows lost with it come back from the commit threads of
        `checkpoints.sqlite` (their ids name the session and the task), as failed and resumable."""
        moved, rederived = None, 0
        path = self.root / INDEX_FILE
        if not database_ok(path, INDEX_TABLES):
            self.tasks.close()
            self.search.close()
            moved = move_aside(path)
            rederived = self._rederive_tasks()
        indexed = self.search.reindex(self.sessions, session_id, progress)
        return {"indexed": indexed, "moved_aside": moved, "tasks_rederived": rederived}

    def repair(self) -> dict[str, Any]:
        """`workmem repair`: move a damaged `checkpoints.sqlite` aside (commits in flight start over; their
        messages are still live) and delete checkpoint threads that no task row names."""
        moved = None
        path = self.root / CHECKPOINTS_FILE
        if not database_ok(path, CHECKPOINT_TABLES):
            self._close_checkpointer()
            moved = move_aside(path)
        known = {t["thread_id"] for t in self.tasks.list_tasks() if t["thread_id"]}
        orphans = [t for t in self._commit_threads() if t not in known]
        for thread in orphans:
            self.checkpointer().delete_thread(thread)
        return {"moved_aside": moved, "orphan_threads_deleted": len(orphans)}

    def _commit_threads(self) -> list[str]:
        """Thread ids in `checkpoints.sqlite` (none when it does not exist yet)."""
        if not (self.root / CHECKPOINTS_FILE).exists():
            return []
        rows = self.checkpointer().conn.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()
        return [row[0] for row in rows]

    def _rederive_tasks(self) -> int:
        """Task rows from the commit threads: session and archive from each thread's state, status failed."""
        count = 0
        if not database_ok(self.root / CHECKPOINTS_FILE, CHECKPOINT_TABLES):
            return 0
        for thread in self._commit_threads():
            if COMMIT_THREAD_MARK not in thread:
                continue
            found = self.checkpointer().get_tuple({"configurable": {"thread_id": thread}})
            values = (found.checkpoint.get("channel_values") or {}) if found else {}
            session_id, archive_id = values.get("session_id"), values.get("archive_id")
            if not isinstance(session_id, str) or not session_id:
                continue
            task_id = thread.rsplit(COMMIT_THREAD_MARK, 1)[1]
            self.tasks.create_task(session_id, task_id=task_id, archive_id=archive_id or None, thread_id=thread,
                                   status="failed")
            self.tasks.update_task(task_id, error="re-derived from its checkpoint thread after index.sqlite "
                                                  "was rebuilt")
            count += 1
        return count

    def _close_checkpointer(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn, self._saver = None, None

    def checkpointer(self) -> Any:
        """`ReclaimingSqliteSaver` on `<root>/checkpoints.sqlite` (WAL, synchronous=NORMAL: a checkpoint lost to a
        power cut only re-runs a node, and every node is idempotent because the files are the truth)."""
        with self._lock:
            if self._saver is None:
                from workmem.state.files.checkpoints import ReclaimingSqliteSaver

                path = self.root / CHECKPOINTS_FILE
                self._conn = connect(path, synchronous="NORMAL", auto_vacuum="INCREMENTAL")
                if not tables_ok(self._conn, CHECKPOINT_TABLES):  # the saver's cursors bypass CheckedConnection
                    self._conn.close()
                    self._conn = None
                    raise DamagedFile(str(path), "its tables are not a checkpointer's; `workmem repair` moves it "
                                                 "aside")
                # A small write-ahead log: checkpointed at 768 KiB, truncated back to 1 MiB afterwards.
                self._conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_PAGES}")
                self._conn.execute(f"PRAGMA journal_size_limit = {WAL_BYTES}")
                self._saver = ReclaimingSqliteSaver(self._conn)
                self._saver.setup()
            return self._saver

    def close(self) -> None:
        """Flush the session metas and close every database connection."""
        self.sessions.close()
        self.tasks.close()
        self.search.close()
        self._close_checkpointer()
