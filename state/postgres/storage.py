"""`PostgresStorage`: the backend for many replicas — sessions, tasks, leases, full text and
the commit checkpoints (`PostgresSaver`) in one schema of one database, so every machine sees every
session. psycopg is imported here only, when this backend is opened.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from workmem.state.errors import DatabaseUnavailable, DataRootNotFound, InvalidInput, SessionNotFound
from workmem.state.forget import ABANDONED_REASON, commit_threads_to_clear, forget_result
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES
from workmem.state.payloads import DEFAULT_LIMITS, PayloadLimits
from workmem.state.postgres.schema import (
    CONNECT_TIMEOUT,
    Database,
    check_url,
    ensure_schema,
    open_pool,
    schema_exists,
    schema_name,
    session_key,
    shown_url,
    unindex_documents,
    without_nul,
)
from workmem.state.postgres.search import PgSearchIndex
from workmem.state.postgres.sessions import PgSessionStore
from workmem.state.postgres.tasks import PgTaskStore
from workmem.state.session_meta import now_iso
from workmem.state.storage import DELETE_TASK_PREFIX

CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
SESSION_TABLES = ("docs", "stems", "payloads", "messages", "spilled_items", "archives", "sessions")
SETUP_POLL_SECONDS = 0.05


class PostgresStorage:
    """Sessions, tasks, search and checkpoints in schema `schema` (default `WORKMEM_DATABASE_SCHEMA`
    or `workmem`) of the database at `url`; one connection pool, safe for many threads."""

    root = None  # no data root: everything is in the database

    @staticmethod
    def holds_file(path: Any) -> bool:
        """False: no file is the database's own."""
        return False

    def __init__(self, url: str, *, schema: str | None = None, durable: bool = True,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, payload_limits: PayloadLimits = DEFAULT_LIMITS,
                 clock: Callable[[], float] | None = None, create: bool = True) -> None:
        self.url, self.schema = check_url(url), schema_name(schema)
        pool = open_pool(self.url, self.schema)
        try:
            if not create and not schema_exists(pool, self.schema):
                raise DataRootNotFound(f"schema {self.schema} of {shown_url(self.url)}")
            ensure_schema(pool, self.schema)
        except BaseException:
            pool.close()
            raise
        self.db = Database(pool, self.schema, self.url)
        self.sessions = PgSessionStore(self.db, durable=durable, max_message_bytes=max_message_bytes,
                                       payload_limits=payload_limits)
        self.tasks = PgTaskStore(self.db, clock=clock)
        self.search = PgSearchIndex(self.db)
        self._saver: Any = None
        self._lock = threading.Lock()

    def checkpointer(self) -> Any:
        """`PostgresSaver` on the pool; its tables are created in our schema (the pool's search_path)."""
        with self._lock:
            if self._saver is None:
                saver = nul_safe_saver()(self.db.pool)
                saver.typed = self.db.unavailable_as_typed  # its driver errors leave as DatabaseUnavailable
                with self.db.pool.connection() as conn:  # one setup at a time across processes
                    key = [f"workmem-checkpoints:{self.schema}"]
                    # Polled, never waited for inside a statement: setup's CREATE INDEX CONCURRENTLY waits for
                    # every open transaction, and a blocked pg_advisory_lock would be one (a silent deadlock).
                    while not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS ok", key).fetchone()["ok"]:
                        time.sleep(SETUP_POLL_SECONDS)
                    try:
                        saver.setup()
                    finally:
                        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", key)
                self._saver = saver
            return self._saver

    def delete_session(self, session_id: str) -> None:
        """Delete a session everywhere in one transaction: its rows, tasks, lease and checkpoint threads.

        The session row is locked first, so an append waiting for it afterwards starts a new session at seq 1."""
        session_key(session_id)
        self.checkpointer()  # its tables exist before the transaction deletes from them
        with self.db.transaction() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", [session_id]).fetchone() is None:
                raise SessionNotFound(session_id)
            tasks = conn.execute("DELETE FROM tasks WHERE session_id = %s RETURNING task_id, thread_id",
                                 [session_id]).fetchall()
            conn.execute("DELETE FROM leases WHERE session_id = %s AND (task_id = ANY(%s) OR starts_with(task_id, %s))",
                         [session_id, [t["task_id"] for t in tasks], DELETE_TASK_PREFIX])
            for table in SESSION_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE session_id = %s", [session_id])
            threads = [t["thread_id"] for t in tasks if t["thread_id"]]
            for table in CHECKPOINT_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE thread_id = ANY(%s)", [threads])

    def finish_deletes(self) -> int:
        """A delete is one transaction: there is never one left to finish."""
        return 0

    # -- forgetting (privacy) -----------------------------------------------------------------------

    def forget_messages(self, session_id: str, seqs: list[int]) -> dict[str, Any]:
        """Remove the verbatim text of stored messages in one transaction (so a crash leaves all of it or none
        of it done): the message rows become placeholders (`state.forget`), their search documents and stem
        counts go, payload rows no message refers to any more go, and so do the checkpoint rows of the session's
        commits (`commit_threads_to_clear`). The caller holds the session's lease. Old row versions stay in the
        table files until the database's (auto)vacuum reclaims them."""
        session_key(session_id)
        self.checkpointer()  # its tables exist before the transaction deletes from them
        out = forget_result(session_id, seqs)
        with self.db.transaction() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", [session_id]).fetchone() is None:
                raise SessionNotFound(session_id)
            done = self.sessions.forget(conn, session_id, seqs, now_iso())
            out.update(forgotten=done["forgotten"], payloads_removed=done["payloads_removed"])
            out["index_rows_removed"] = unindex_documents(conn, session_id, seqs)
            tasks = conn.execute("SELECT task_id, thread_id, status, archive_id FROM tasks WHERE session_id = %s",
                                 [session_id]).fetchall()
            writers = {r["archive_id"]: r["task_id"] for r in conn.execute(
                "SELECT archive_id, task_id FROM archives WHERE session_id = %s", [session_id]).fetchall()}
            cleared, abandoned = commit_threads_to_clear(tasks, lambda t: writers.get(t.get("archive_id")))
            threads = [t["thread_id"] for t in cleared]
            for table in CHECKPOINT_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE thread_id = ANY(%s)", [threads])
            conn.execute("UPDATE tasks SET thread_id = NULL WHERE task_id = ANY(%s)", [[t["task_id"] for t in cleared]])
            conn.execute("UPDATE tasks SET status = 'abandoned', error = %s, updated_at = %s WHERE task_id = ANY(%s)",
                         [ABANDONED_REASON, now_iso(), abandoned])
            out["checkpoint_threads_removed"], out["commits_abandoned"] = len(threads), abandoned
        return out

    def pending_forgets(self) -> list[dict[str, Any]]:
        """A forget is one transaction: there is never one left to finish."""
        return []

    def finish_forget(self, intent: dict[str, Any]) -> dict[str, Any]:
        """Nothing is ever left to finish (see `pending_forgets`); forgets the intent's seqs again if asked."""
        return self.forget_messages(intent["session_id"], list(intent.get("seqs") or ()))

    def rebuild_index(self, session_id: str | None = None, progress: Any = None) -> dict[str, Any]:
        """The words are generated by the database from the rows (nothing to move aside); recounts the stems."""
        indexed = self.search.reindex(self.sessions, session_id, progress)
        return {"indexed": indexed, "moved_aside": None, "tasks_rederived": 0}

    def repair(self) -> dict[str, Any]:
        """Delete checkpoint threads that no task row names (a crash between the two, or rows deleted by hand)."""
        saver = self.checkpointer()
        orphans = [r["thread_id"] for r in self.db.rows(
            "SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id NOT IN "
            "(SELECT thread_id FROM tasks WHERE thread_id IS NOT NULL)")]
        for thread in orphans:
            saver.delete_thread(thread)
        return {"moved_aside": None, "orphan_threads_deleted": len(orphans)}

    def close(self) -> None:
        """Close the pool (the checkpointer with it)."""
        with self._lock:
            self._saver = None
        self.db.pool.close()


def nul_safe_saver() -> type:
    """`PostgresSaver` whose inline checkpoint strings hold U+FFFD for NUL, as archives do: it keeps a commit's
    string channels (the WM, a transcript) inline in `jsonb`, which cannot hold NUL."""
    from langgraph.checkpoint.postgres import PostgresSaver

    class NulSafePostgresSaver(PostgresSaver):
        typed: Any = contextlib.nullcontext  # the Database's `unavailable_as_typed`, set by `checkpointer()`

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            values = checkpoint["channel_values"]
            if any(isinstance(v, str) and "\x00" in v for v in values.values()):
                checkpoint = {**checkpoint, "channel_values": {k: without_nul(v) if isinstance(v, str) else v
                                                               for k, v in values.items()}}
            with self.typed():
                return super().put(config, checkpoint, without_nul(metadata), new_versions)

        def put_writes(self, *args: Any, **kwargs: Any) -> Any:
            with self.typed():
                return super().put_writes(*args, **kwargs)

        def get_tuple(self, config: Any) -> Any:
            with self.typed():
                return super().get_tuple(config)

        def list(self, *args: Any, **kwargs: Any) -> Any:
            with self.typed():
                yield from super().list(*args, **kwargs)

        def delete_thread(self, thread_id: str) -> Any:
            with self.typed():
                return super().delete_thread(thread_id)

    return NulSafePostgresSaver


def drop_schema(url: str, schema: str) -> None:
    """`DROP SCHEMA … CASCADE` of a workmem schema (see `storage.drop_database_schema`)."""
    import psycopg

    url, schema = check_url(url), schema_name(schema)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            holder = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'"
                                  ).fetchone()
            if holder is not None and holder[0].strip('"') == schema:
                raise InvalidInput("schema", schema, "holds pg_trgm, which other workmem schemas may use")
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(shown_url(url), " ".join(str(exc).split())) from None
