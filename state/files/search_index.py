"""The full-text index of archived messages in `<root>/index.sqlite`.

Everything here can be rebuilt from the archive files (`reindex`). Two FTS5 tables — `porter
unicode61` words and trigrams — share the rowid of `fts_docs`, which also keeps each message's seq,
length in words and whether it asks something, so one join gives a term's candidates; `fts_stems` lists
the indexed porter stems (a word's relatives are found through it, never pruned). Bulk writes
commit every ≤ 1 000 rows. Query planning lives in `state/search/fts_query.py` and `search_terms.py`, the
candidate lists SQL returns in `search_candidates.py` (beside this module), the search and its ranking
(shared with the Postgres backend) in `state/search/search_hits.py` and `search_rank.py`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlite_utils import Database

from workmem.state.errors import InvalidInput, WorkmemError
from workmem.state.files import search_candidates
from workmem.state.files.sqlite import ThreadConnections, secure_deletes, truncate_wal
from workmem.state.files.tasks import INDEX_FILE
from workmem.state.ids import canonical_archive_id, check_session_id
from workmem.state.messages import indexed_text
from workmem.state.search import search_hits
from workmem.state.search.search_hits import MEMORY_ROLE
from workmem.state.stored import check_stored

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from workmem.state.files.store import SessionStore

log = logging.getLogger("workmem.search")
BATCH_ROWS = 1000
_FTS_COLUMNS = "session_id UNINDEXED, archive_id UNINDEXED, seq UNINDEXED, turn_id UNINDEXED, " \
               "role UNINDEXED, content"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS fts_docs (
    rowid INTEGER PRIMARY KEY, session_id TEXT NOT NULL, archive_id TEXT NOT NULL, seq INTEGER NOT NULL,
    length INTEGER, asks INTEGER, stamp INTEGER);
CREATE INDEX IF NOT EXISTS fts_docs_by_archive ON fts_docs(session_id, archive_id, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS fts_words USING fts5({_FTS_COLUMNS}, tokenize='porter unicode61');
CREATE VIRTUAL TABLE IF NOT EXISTS fts_trigram USING fts5({_FTS_COLUMNS}, tokenize='trigram');
"""
# What indexes built before the ranking columns lack, added on first use (their rows keep NULL until reindex).
# Not in SCHEMA: on an existing index SCHEMA must stay a no-op, so a read-only root still opens and searches.
_ADDED_COLUMNS = {"length": "INTEGER", "asks": "INTEGER", "stamp": "INTEGER"}
_UPGRADE = ("CREATE INDEX IF NOT EXISTS fts_docs_by_seq ON fts_docs(session_id, seq)",
            "CREATE TABLE IF NOT EXISTS fts_stems (stem TEXT PRIMARY KEY) WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS fts_docs_stamps ON fts_docs(session_id, seq) WHERE stamp = 1")
# A read-only index of the old shape is searched through temp stand-ins on each connection.
_STANDIN_DOCS = ("CREATE TEMP VIEW IF NOT EXISTS fts_docs AS SELECT rowid AS rowid, session_id, archive_id, seq, "
                 "{columns} FROM main.fts_docs")
_STANDIN_STEMS = "CREATE TEMP TABLE IF NOT EXISTS fts_stems (stem TEXT PRIMARY KEY) WITHOUT ROWID"
# The indexed porter stems, to tell a stem no document holds any more (a forget removes it from `fts_stems`).
_WORDS_VOCAB = "CREATE VIRTUAL TABLE IF NOT EXISTS temp.wm_words_vocab USING fts5vocab('main', 'fts_words', 'row')"


class SearchIndex:
    """Full-text search over a root's archived messages; safe to share between threads."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        if not isinstance(root, (str, os.PathLike)) or not str(root):
            raise InvalidInput("root", root, "must be a non-empty path")
        self.root = Path(root).absolute()
        self._db = ThreadConnections(self.root / INDEX_FILE, SCHEMA)
        self._upgraded = False
        self._standins: tuple[str, ...] = ()
        self._upgrade_lock = threading.Lock()

    @property
    def db(self) -> Database:
        """This thread's sqlite-utils Database on `index.sqlite`."""
        db = self._db.db
        if not self._upgraded:
            self._upgrade(db)
        for statement in self._standins:
            db.execute(statement)
        return db

    def _not_made_yet(self) -> bool:
        """True before the root's first commit made `index.sqlite`: it holds nothing, and a read never creates it
        (a read-only root is read before its first commit too)."""
        return not (self.root / INDEX_FILE).exists()

    def _write(self) -> AbstractContextManager[Database]:
        """A write transaction (BEGIN IMMEDIATE) on a schema with every column."""
        self.db  # noqa: B018 — opens the connection and adds missing columns first
        return self._db.immediate()

    def _upgrade(self, db: Database) -> None:
        """Give an index of an older shape what the ranking reads (columns, the seq index, `fts_stems`)."""
        with self._upgrade_lock:
            if self._upgraded:
                return
            present = {row[1] for row in db.execute("PRAGMA table_info(fts_docs)")}
            try:
                for name, kind in _ADDED_COLUMNS.items():
                    if name not in present:
                        _tolerate_duplicate(db, f"ALTER TABLE fts_docs ADD COLUMN {name} {kind}")
                for statement in _UPGRADE:
                    db.execute(statement)
            except sqlite3.OperationalError as exc:
                if "readonly" not in str(exc).replace("-", "").replace(" ", ""):
                    raise
                stems = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'fts_stems'").fetchone()
                self._standins = (() if set(_ADDED_COLUMNS) <= present else (_standin_docs(present),)) + (
                    () if stems else (_STANDIN_STEMS,))
            self._upgraded = True

    def close(self) -> None:
        """Close every connection (any thread)."""
        self._db.close()

    def index_messages(self, session_id: str, archive_id: str, messages: Sequence[dict[str, Any]],
                       spilled: Sequence[dict[str, str]] = ()) -> int:
        """(Re)index one archive's messages and the WM items its commit spilled: its old rows go, the new ones
        are inserted ≤ 1 000 per commit."""
        check_session_id(session_id)
        archive_id = canonical_archive_id(archive_id)
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
            raise InvalidInput("messages", messages, "must be a list of stored messages")
        rows = [_memory_row(session_id, archive_id, i, item) for i, item in enumerate(spilled)]
        for i, msg in enumerate(messages):
            reason = check_stored(msg)
            if reason:
                raise InvalidInput(f"messages[{i}]", msg, reason)
            text = indexed_text(msg)
            if text:  # a message of only workmem's own tool traffic is not indexed
                length, asks, stamp = search_hits.doc_fields(text)
                rows.append((session_id, archive_id, msg["seq"], str(msg.get("turn_id") or ""), msg["role"], text,
                             length, int(asks), int(stamp)))
        for start in range(0, max(len(rows), 1), BATCH_ROWS):
            batch = rows[start:start + BATCH_ROWS]
            with self._write() as db:
                if start == 0:
                    self._delete_archive(db, session_id, archive_id)  # same transaction as the first rows
                # Another indexer of this archive may interleave its batches with ours: skip seqs already in.
                batch = self._not_yet_indexed(db, session_id, archive_id, batch)
                if not batch:
                    continue
                base = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM fts_docs").fetchone()[0] + 1
                ids = range(base, base + len(batch))
                db.conn.executemany(
                    "INSERT INTO fts_docs (rowid, session_id, archive_id, seq, length, asks, stamp) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(i, r[0], r[1], r[2], *r[6:9]) for i, r in zip(ids, batch, strict=True)])
                for table in ("fts_words", "fts_trigram"):
                    db.conn.executemany(
                        f"INSERT INTO {table} (rowid, session_id, archive_id, seq, turn_id, role, content) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)", [(i, *r[:6]) for i, r in zip(ids, batch, strict=True)])
                db.conn.executemany("INSERT OR IGNORE INTO fts_stems (stem) VALUES (?)",
                                    [(stem,) for stem in search_candidates.batch_stems(db, [r[5] for r in batch])])
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

    def high_water(self) -> int:
        """The newest document id so far: a session deleted now has no row above it."""
        return int(self.db.execute("SELECT COALESCE(MAX(rowid), 0) FROM fts_docs").fetchone()[0])

    def delete_session(self, session_id: str, *, up_to: int) -> int:
        """Delete a deleted session's rows with ids up to `up_to` (a later session with the same id keeps
        its own); returns how many documents went. Batched, ≤ 1 000 rows per transaction."""
        check_session_id(session_id)
        removed = 0
        while True:
            with self._write() as db:
                ids = [r[0] for r in db.execute("SELECT rowid FROM fts_docs WHERE session_id = ? AND rowid <= ? "
                                                f"LIMIT {BATCH_ROWS}", [session_id, up_to])]
                marks = ",".join("?" * len(ids))
                for table in ("fts_words", "fts_trigram", "fts_docs"):
                    if ids:
                        db.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", ids)
            removed += len(ids)
            if len(ids) < BATCH_ROWS:
                return removed

    def forget(self, session_id: str, seqs: Sequence[int]) -> int:
        """Remove the documents of forgotten messages for good; returns how many went. Their rows are deleted
        with SQLite's `secure_delete` (zeros, not free pages), the stems only they held leave `fts_stems`, and
        then — only when a row went — both FTS5 indexes are merged into one segment each (`optimize`: a deleted
        row's words otherwise stay in older segments until a merge) and the write-ahead log is truncated: O(the
        index), a price paid for privacy, never on a hot path."""
        check_session_id(session_id)
        wanted = sorted({s for s in seqs if s > 0})
        conn = self.db.conn
        removed = 0
        with secure_deletes(conn):
            for start in range(0, len(wanted), BATCH_ROWS):
                chunk = wanted[start:start + BATCH_ROWS]
                with self._write() as db:
                    rows = db.execute("SELECT d.rowid, w.content FROM fts_docs d JOIN fts_words w ON w.rowid = "
                                      f"d.rowid WHERE d.session_id = ? AND d.seq IN ({','.join('?' * len(chunk))})",
                                      [session_id, *chunk]).fetchall()
                    if not rows:
                        continue
                    stems = search_candidates.batch_stems(db, [text for _, text in rows])
                    ids = [rowid for rowid, _ in rows]
                    marks = ",".join("?" * len(ids))
                    for table in ("fts_words", "fts_trigram", "fts_docs"):
                        db.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", ids)
                    db.execute(_WORDS_VOCAB)
                    db.conn.executemany("DELETE FROM fts_stems WHERE stem = ? AND NOT EXISTS (SELECT 1 FROM "
                                        "temp.wm_words_vocab WHERE term = ?)", [(stem, stem) for stem in stems])
                    removed += len(ids)
            if removed:
                for table in ("fts_words", "fts_trigram"):
                    with self._write() as db:
                        db.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
                if not truncate_wal(conn):
                    log.warning("%s: a reader kept the write-ahead log; older page images of forgotten messages stay "
                                "in it until its next checkpoint", self.root / INDEX_FILE)
        return removed

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
        """Literal ranked search of archived messages → hits `{archive_id, seq, turn_id, role, content}`.

        Candidates come per term and channel from the FTS5 indexes (`search_candidates`); `search_hits`
        ranks them as for every backend.
        """
        check_session_id(session_id)
        archive = search_hits.check_search(query, archive_id, limit)
        if self._not_made_yet():
            return []
        scope = "d.session_id = ?" + (" AND d.archive_id = ?" if archive else "")
        args = [session_id, archive] if archive else [session_id]
        return search_hits.ranked_hits(search_candidates.SqliteCandidates(self.db, scope, args), query, limit)

    def indexed_seqs(self, session_id: str) -> dict[str, list[int]]:
        """archive_id → the seqs of the messages the index holds for it, ascending (spilled items left out)."""
        check_session_id(session_id)
        out: dict[str, list[int]] = {}
        if self._not_made_yet():
            return out
        for archive_id, seq in self.db.execute("SELECT archive_id, seq FROM fts_docs WHERE session_id = ? AND seq > 0 "
                                               "ORDER BY seq", [session_id]).fetchall():
            out.setdefault(archive_id, []).append(seq)
        return out

    def reindex(self, store: SessionStore, session_id: str | None = None,
                progress: Callable[[str, str], None] | None = None) -> int:
        """Rebuild the full-text index from the complete archives on disk; returns messages indexed."""
        sessions = store.list_sessions() if session_id is None else [check_session_id(session_id)]
        if session_id is None:
            with self._write() as db:
                for table in ("fts_words", "fts_trigram", "fts_docs", "fts_stems"):
                    db.execute(f"DELETE FROM {table}")
        count = 0
        for sid in sessions:
            if session_id is not None:
                with self._write() as db:
                    stale = db.execute("SELECT DISTINCT archive_id FROM fts_docs WHERE session_id = ?", [sid])
                    for (aid,) in stale.fetchall():
                        self._delete_archive(db, sid, aid)
            count += self._reindex_session(store, sid, progress)
        return count

    def _reindex_session(self, store: SessionStore, sid: str, progress: Callable[[str, str], None] | None) -> int:
        """Index one session's complete archives; one that cannot be read is skipped with a WARNING (`check`
        reports it), so a rebuild of the whole root never stops at one damaged session."""
        count = 0
        try:
            found = store.list_archives(sid)
        except (WorkmemError, OSError) as exc:
            log.warning("reindex: the archives of session %r cannot be listed, left out: %s", sid, exc)
            return 0
        for archive in found:
            if progress is not None:
                progress(sid, archive["archive_id"])
            try:
                messages = store.archive_messages(sid, archive["archive_id"])
                count += self.index_messages(sid, archive["archive_id"], messages,
                                             store.spilled_items(sid, archive["archive_id"]))
            except (WorkmemError, OSError) as exc:
                log.warning("reindex: %s of session %r cannot be read, left out: %s", archive["archive_id"], sid, exc)
        return count


def _tolerate_duplicate(db: Database, statement: str) -> None:
    """Run an ALTER TABLE … ADD COLUMN that another process may have run first."""
    try:
        db.execute(statement)
    except sqlite3.OperationalError as exc:
        if "duplicate column" not in str(exc):
            raise


def _standin_docs(present: set[str]) -> str:
    """The temp view standing in for an `fts_docs` that lacks some ranking columns (NULL in their place)."""
    return _STANDIN_DOCS.format(columns=", ".join(name if name in present else f"NULL AS {name}"
                                                  for name in _ADDED_COLUMNS))


def _memory_row(session_id: str, archive_id: str, i: int, item: dict[str, str]) -> tuple[Any, ...]:
    """An index row for a spilled WM item: role `memory`, the section in the turn_id column, and a
    negative seq per archive and item (`search_hits.memory_seq`); it never asks and is never a stamp."""
    text = str(item.get("item") or "")
    return (session_id, archive_id, search_hits.memory_seq(archive_id, i), str(item.get("section") or ""),
            MEMORY_ROLE, text, search_hits.doc_fields(text)[0], 0, 0)
