"""`Index`: `<root>/index.sqlite` — commit tasks, session leases, full-text index of archived messages.

Everything here can be rebuilt from the files except tasks and leases, which are transient by nature
(§2). Connections are explicit (`check_same_thread=False`, `timeout=30`, WAL), one per thread,
wrapped in sqlite-utils `Database`; lease changes run in `BEGIN IMMEDIATE`; bulk index writes commit
every ≤ 1 000 rows. Both FTS5 tables share the rowid of `fts_docs`, so a hit found in either is one doc.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlite_utils import Database

from state import fts_query
from state.errors import InvalidInput
from state.ids import canonical_archive_id, check_session_id, safe_session_id
from state.jsonl import check_stored
from state.messages import message_text
from state.meta import now_iso
from state.redact import clean_error
from state.redact import redact_secrets as redact_secrets  # re-exported: callers import it from here
from state.sqlite import connect

if TYPE_CHECKING:
    from state.store import SessionStore

TASK_STATUSES = ("pending", "running", "completed", "failed", "skipped", "abandoned")
UNFINISHED = ("pending", "running")
BATCH_ROWS = 1000
HIT_CHARS = 1500
MAX_LIMIT = 1000
MAX_TTL = 24 * 3600.0
_TASK_FIELDS = {"status", "error", "attempts", "result", "archive_id", "thread_id"}
_FTS_COLUMNS = "session_id UNINDEXED, archive_id UNINDEXED, seq UNINDEXED, turn_id UNINDEXED, " \
               "role UNINDEXED, content"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, archive_id TEXT, thread_id TEXT,
    status TEXT NOT NULL, error TEXT, attempts INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, result TEXT);
CREATE INDEX IF NOT EXISTS tasks_by_session ON tasks(session_id, status);
CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, owner TEXT, pid INTEGER, host TEXT,
    expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS fts_docs (
    rowid INTEGER PRIMARY KEY, session_id TEXT NOT NULL, archive_id TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS fts_docs_by_archive ON fts_docs(session_id, archive_id, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS fts_words USING fts5({_FTS_COLUMNS}, tokenize='porter unicode61');
CREATE VIRTUAL TABLE IF NOT EXISTS fts_trigram USING fts5({_FTS_COLUMNS}, tokenize='trigram');
"""


COMMON_TERM_DOCS = 5_000  # a word in more archived messages than this is "common" (see Index._collect)
PER_TERM_HITS = 1_000  # candidates taken for a common word: its newest matches


class Index:
    """The SQLite side of a data root; safe to share between threads (one connection each)."""

    def __init__(self, root: str | os.PathLike[str], *, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(root, (str, os.PathLike)) or not str(root):
            raise InvalidInput("root", root, "must be a non-empty path")
        self.root = Path(root).absolute()
        self.path = self.root / "index.sqlite"
        self._clock = clock
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._schema_ready = False

    # -- connections --------------------------------------------------------------------------------

    @property
    def db(self) -> Database:
        """This thread's sqlite-utils Database (opened on first use)."""
        local = self._local
        if getattr(local, "db", None) is None or local.pid != os.getpid():
            local.db, local.pid = self._open(), os.getpid()
        return local.db

    def _open(self) -> Database:
        conn = connect(self.path, isolation_level=None)
        db = Database(conn)
        if not self._schema_ready:
            conn.executescript(_SCHEMA)
            self._schema_ready = True
        with self._conns_lock:
            self._conns.append(conn)
        return db

    def close(self) -> None:
        """Close every connection this Index opened (any thread)."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self._local = threading.local()

    @contextmanager
    def _immediate(self) -> Iterator[Database]:
        """A write transaction that takes the database write lock up front (BEGIN IMMEDIATE)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.rollback()
            raise
        db.execute("COMMIT")

    # -- tasks --------------------------------------------------------------------------------------

    def create_task(self, session_id: str, *, task_id: str | None = None, archive_id: str | None = None,
                    thread_id: str | None = None, status: str = "pending") -> dict[str, Any]:
        """Insert a commit task row and return it."""
        check_session_id(session_id)
        task_id = uuid.uuid4().hex if task_id is None else _nonempty(task_id, "task_id")
        now = now_iso()
        row = {"task_id": task_id, "session_id": session_id,
               "archive_id": None if archive_id is None else canonical_archive_id(archive_id),
               "thread_id": thread_id if thread_id is not None else f"{safe_session_id(session_id)}/commit/{task_id}",
               "status": _status(status), "error": None, "attempts": 0, "created_at": now, "updated_at": now,
               "result": None}
        try:
            self.db["tasks"].insert(row)
        except sqlite3.IntegrityError:
            raise InvalidInput("task_id", task_id, "a task with this id exists") from None
        return _task(row)

    def update_task(self, task_id: str, **fields: Any) -> dict[str, Any]:
        """Change status / error (redacted, ≤ 500 chars) / attempts / result / archive_id / thread_id."""
        unknown = set(fields) - _TASK_FIELDS
        if unknown:
            raise InvalidInput("fields", sorted(unknown), f"task fields are {sorted(_TASK_FIELDS)}")
        updates: dict[str, Any] = {}
        for key, value in fields.items():
            if key == "status":
                value = _status(value)
            elif key == "error":
                value = None if value is None else clean_error(value)
            elif key == "attempts":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidInput("attempts", value, "must be an integer >= 0")
            elif key == "result":
                value = None if value is None else _json(value, "result")
            elif key == "archive_id" and value is not None:
                value = canonical_archive_id(value)
            updates[key] = value
        updates["updated_at"] = now_iso()
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

    def list_tasks(self, session_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Tasks, oldest first, optionally of one session and/or one status."""
        where, args = [], []
        if session_id is not None:
            where.append("session_id = ?")
            args.append(check_session_id(session_id))
        if status is not None:
            where.append("status = ?")
            args.append(_status(status))
        rows = self.db["tasks"].rows_where(" AND ".join(where) or None, args, order_by="created_at, rowid")
        return [_task(r) for r in rows]

    def unfinished_tasks(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Tasks still pending or running (the candidates for resume), oldest first."""
        return [t for t in self.list_tasks(session_id) if t["status"] in UNFINISHED]

    # -- leases -------------------------------------------------------------------------------------

    def acquire_lease(self, session_id: str, task_id: str, owner: str, ttl: float = 60) -> str | None:
        """Take the session's lease for `task_id`: None when taken (or already ours), else the holder's task id.

        "Ours" means the same task and the same owner: two processes resuming one task never both hold it.
        """
        check_session_id(session_id)
        _nonempty(task_id, "task_id")
        ttl = _ttl(ttl)
        now = self._clock()
        with self._immediate() as db:
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
        ttl = _ttl(ttl)
        with self._immediate() as db:
            cursor = db.execute("UPDATE leases SET expires_at = ? WHERE session_id = ? AND task_id = ?",
                                [self._clock() + ttl, session_id, task_id])
        return cursor.rowcount == 1

    def release_lease(self, session_id: str, task_id: str) -> None:
        """Give the lease up (only if `task_id` still holds it)."""
        with self._immediate() as db:
            db.execute("DELETE FROM leases WHERE session_id = ? AND task_id = ?", [session_id, task_id])

    def lease_holder(self, session_id: str) -> dict[str, Any] | None:
        """The unexpired lease row of a session, or None."""
        rows = list(self.db["leases"].rows_where("session_id = ? AND expires_at > ?", [session_id, self._clock()]))
        return rows[0] if rows else None

    # -- full text ----------------------------------------------------------------------------------

    def index_messages(self, session_id: str, archive_id: str, messages: Sequence[dict[str, Any]]) -> int:
        """(Re)index one archive's messages: its old rows go, the new ones are inserted ≤ 1 000 per commit."""
        check_session_id(session_id)
        archive_id = canonical_archive_id(archive_id)
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
            raise InvalidInput("messages", messages, "must be a list of stored messages")
        rows = []
        for i, msg in enumerate(messages):
            reason = check_stored(msg)
            if reason:
                raise InvalidInput(f"messages[{i}]", msg, reason)
            rows.append((session_id, archive_id, msg["seq"], str(msg.get("turn_id") or ""), msg["role"],
                         message_text(msg)))
        for start in range(0, max(len(rows), 1), BATCH_ROWS):
            batch = rows[start:start + BATCH_ROWS]
            with self._immediate() as db:
                if start == 0:
                    self._delete_archive(db, session_id, archive_id)  # same transaction as the first rows
                # Another indexer of this archive may interleave its batches with ours: skip seqs already in.
                batch = self._not_yet_indexed(db, session_id, archive_id, batch)
                if not batch:
                    continue
                base = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM fts_docs").fetchone()[0] + 1
                ids = range(base, base + len(batch))
                db.conn.executemany("INSERT INTO fts_docs (rowid, session_id, archive_id, seq) VALUES (?, ?, ?, ?)",
                                    [(i, r[0], r[1], r[2]) for i, r in zip(ids, batch, strict=True)])
                for table in ("fts_words", "fts_trigram"):
                    db.conn.executemany(
                        f"INSERT INTO {table} (rowid, session_id, archive_id, seq, turn_id, role, content) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)", [(i, *r) for i, r in zip(ids, batch, strict=True)])
        return len(rows)

    @staticmethod
    def _not_yet_indexed(db: Database, session_id: str, archive_id: str, batch: list[tuple]) -> list[tuple]:
        """The rows of `batch` whose seq this archive does not have in the index yet."""
        if not batch:
            return batch
        seqs = [row[2] for row in batch]
        present = {r[0] for r in db.execute(
            "SELECT seq FROM fts_docs WHERE session_id = ? AND archive_id = ? AND seq BETWEEN ? AND ?",
            [session_id, archive_id, min(seqs), max(seqs)])}
        return [row for row in batch if row[2] not in present] if present else batch

    @staticmethod
    def _delete_archive(db: Database, session_id: str, archive_id: str) -> None:
        """Delete one archive's rows from the three tables (inside the caller's transaction)."""
        ids = [r[0] for r in db.execute("SELECT rowid FROM fts_docs WHERE session_id = ? AND archive_id = ?",
                                        [session_id, archive_id])]
        for start in range(0, len(ids), BATCH_ROWS):
            chunk = ids[start:start + BATCH_ROWS]
            marks = ",".join("?" * len(chunk))
            for table in ("fts_words", "fts_trigram", "fts_docs"):
                db.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", chunk)

    def search(self, session_id: str, query: str, archive_id: str | None = None,
               limit: int = 12) -> list[dict[str, Any]]:
        """Literal BM25-ranked search of archived messages → hits `{archive_id, seq, turn_id, role, content}`."""
        check_session_id(session_id)
        if not isinstance(query, str):
            raise InvalidInput("query", query, "must be a string")
        if len(query) > fts_query.MAX_QUERY_CHARS:
            raise InvalidInput("query", query, f"longer than {fts_query.MAX_QUERY_CHARS} characters")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise InvalidInput("limit", limit, f"must be an integer between 1 and {MAX_LIMIT}")
        archive = None if archive_id is None else canonical_archive_id(archive_id)
        terms = fts_query.plan(query)
        if not terms:
            return []
        scope = "session_id = ?" + (" AND archive_id = ?" if archive else "")
        scope_args = [session_id, archive] if archive else [session_id]
        per_term: list[dict[int, float]] = []
        seq_of: dict[int, int] = {}
        for term in terms:
            hits: dict[int, float] = {}
            for table, on in (("fts_words", term.porter), ("fts_trigram", term.trigram)):
                if on:
                    sql = (f"SELECT rowid, seq, bm25({table}) FROM {table} WHERE {table} MATCH ? AND {scope} "
                           f"ORDER BY rowid DESC LIMIT {COMMON_TERM_DOCS + 1}")
                    self._collect(sql, [fts_query.fts_phrase(term.text), *scope_args], hits, seq_of)
            if term.scan:
                self._scan(term.text, scope, scope_args, hits, seq_of)
            per_term.append(hits)
        ranked = fts_query.rank(per_term, seq_of, limit)
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        rows = {r[0]: r for r in self.db.execute(
            f"SELECT rowid, archive_id, seq, turn_id, role, content FROM fts_words WHERE rowid IN ({marks})", ranked)}
        return [_hit(rows[d]) for d in ranked if d in rows]

    def _collect(self, sql: str, args: list[Any], hits: dict[int, float], seq_of: dict[int, int]) -> None:
        """Add one word's matches, newest first. A word found in more than COMMON_TERM_DOCS messages says
        little about relevance: only its newest PER_TERM_HITS count, and SQLite stops reading early."""
        rows = self.db.execute(sql, args).fetchall()
        if len(rows) > COMMON_TERM_DOCS:
            rows = rows[:PER_TERM_HITS]
        for rowid, seq, score in rows:
            seq_of[rowid] = seq
            hits[rowid] = min(hits.get(rowid, 0.0), score)

    def _scan(self, text: str, scope: str, args: list[Any], hits: dict[int, float], seq_of: dict[int, int]) -> None:
        """Case-insensitive substring match of a term too short for the trigram index.

        SQLite's lower() folds ASCII only, so an ASCII term is matched in SQL and any other term with
        str.casefold() over the scoped rows (`ÉC` finds `ÉCOLE`, `ß` finds `STRASSE`).
        """
        total = self.db.execute(f"SELECT COUNT(*) FROM fts_trigram WHERE {scope}", args).fetchone()[0]
        if text.isascii():
            sql = f"SELECT rowid, seq FROM fts_trigram WHERE {scope} AND instr(lower(content), ?) > 0"
            found = self.db.execute(sql, [*args, text.lower()]).fetchall()
        else:
            needle = text.casefold()
            rows = self.db.execute(f"SELECT rowid, seq, content FROM fts_trigram WHERE {scope}", args)
            found = [(rowid, seq) for rowid, seq, content in rows if needle in content.casefold()]
        score = fts_query.scan_score(total, len(found))
        for rowid, seq in found:
            seq_of[rowid] = seq
            hits[rowid] = min(hits.get(rowid, 0.0), score)

    def reindex(self, store: SessionStore, session_id: str | None = None,
                progress: Callable[[str, str], None] | None = None) -> int:
        """Rebuild the full-text index from the complete archives on disk; returns messages indexed."""
        sessions = store.list_sessions() if session_id is None else [check_session_id(session_id)]
        if session_id is None:
            with self._immediate() as db:
                for table in ("fts_words", "fts_trigram", "fts_docs"):
                    db.execute(f"DELETE FROM {table}")
        count = 0
        for sid in sessions:
            if session_id is not None:
                with self._immediate() as db:
                    stale = db.execute("SELECT DISTINCT archive_id FROM fts_docs WHERE session_id = ?", [sid])
                    for (aid,) in stale.fetchall():
                        self._delete_archive(db, sid, aid)
            for archive in store.list_archives(sid):
                if progress is not None:
                    progress(sid, archive["archive_id"])
                count += self.index_messages(sid, archive["archive_id"],
                                             store.archive_messages(sid, archive["archive_id"]))
        return count


def _hit(row: tuple[Any, ...]) -> dict[str, Any]:
    content = row[5] if len(row[5]) <= HIT_CHARS else row[5][: HIT_CHARS - 1] + "…"
    return {"archive_id": row[1], "seq": row[2], "turn_id": row[3], "role": row[4], "content": content}


def _task(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if isinstance(out.get("result"), str):
        out["result"] = json.loads(out["result"])
    return out


def _status(value: Any) -> str:
    if value not in TASK_STATUSES:
        raise InvalidInput("status", value, f"must be one of {', '.join(TASK_STATUSES)}")
    return str(value)


def _nonempty(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, value, "must be a non-empty string")
    return value


def _ttl(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TTL:
        raise InvalidInput("ttl", value, f"must be a number of seconds in (0, {MAX_TTL:g}]")
    return float(value)


def _json(value: Any, field: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field, value, f"not JSON-serializable: {exc}") from exc
