"""The full-text index of archived messages in `<root>/index.sqlite` (SPEC §7 `archive_search`).

Everything here can be rebuilt from the archive files (`reindex`). Two FTS5 tables — `porter
unicode61` words and trigrams — share the rowid of `fts_docs`, so a hit found in either is one doc.
Bulk writes commit every ≤ 1 000 rows; query planning and ranking live in `fts_query.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlite_utils import Database

from workmem.state import fts_query
from workmem.state.errors import InvalidInput
from workmem.state.ids import canonical_archive_id, check_session_id
from workmem.state.jsonl import check_stored
from workmem.state.messages import indexed_text
from workmem.state.sqlite import ThreadConnections
from workmem.state.tasks import INDEX_FILE

if TYPE_CHECKING:
    from workmem.state.store import SessionStore

BATCH_ROWS = 1000
HIT_CHARS = 1500
MAX_LIMIT = 1000
COMMON_TERM_DOCS = 5_000  # a word in more archived messages than this is "common" (see SearchIndex._collect)
PER_TERM_HITS = 1_000  # candidates taken for a common word: its newest matches
_FTS_COLUMNS = "session_id UNINDEXED, archive_id UNINDEXED, seq UNINDEXED, turn_id UNINDEXED, " \
               "role UNINDEXED, content"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS fts_docs (
    rowid INTEGER PRIMARY KEY, session_id TEXT NOT NULL, archive_id TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS fts_docs_by_archive ON fts_docs(session_id, archive_id, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS fts_words USING fts5({_FTS_COLUMNS}, tokenize='porter unicode61');
CREATE VIRTUAL TABLE IF NOT EXISTS fts_trigram USING fts5({_FTS_COLUMNS}, tokenize='trigram');
"""


class SearchIndex:
    """Full-text search over a root's archived messages; safe to share between threads."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        if not isinstance(root, (str, os.PathLike)) or not str(root):
            raise InvalidInput("root", root, "must be a non-empty path")
        self.root = Path(root).absolute()
        self._db = ThreadConnections(self.root / INDEX_FILE, SCHEMA)

    @property
    def db(self) -> Database:
        """This thread's sqlite-utils Database on `index.sqlite`."""
        return self._db.db

    def close(self) -> None:
        """Close every connection (any thread)."""
        self._db.close()

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
            text = indexed_text(msg)
            if text:  # a message of only workmem's own tool traffic is not indexed (§7)
                rows.append((session_id, archive_id, msg["seq"], str(msg.get("turn_id") or ""), msg["role"], text))
        for start in range(0, max(len(rows), 1), BATCH_ROWS):
            batch = rows[start:start + BATCH_ROWS]
            with self._db.immediate() as db:
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

    def high_water(self) -> int:
        """The newest document id so far: a session deleted now has no row above it."""
        return int(self.db.execute("SELECT COALESCE(MAX(rowid), 0) FROM fts_docs").fetchone()[0])

    def delete_session(self, session_id: str, *, up_to: int) -> int:
        """Delete a deleted session's rows with ids up to `up_to` (a later session with the same id keeps
        its own); returns how many documents went. Batched, ≤ 1 000 rows per transaction."""
        check_session_id(session_id)
        removed = 0
        while True:
            with self._db.immediate() as db:
                ids = [r[0] for r in db.execute("SELECT rowid FROM fts_docs WHERE session_id = ? AND rowid <= ? "
                                                f"LIMIT {BATCH_ROWS}", [session_id, up_to])]
                marks = ",".join("?" * len(ids))
                for table in ("fts_words", "fts_trigram", "fts_docs"):
                    if ids:
                        db.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", ids)
            removed += len(ids)
            if len(ids) < BATCH_ROWS:
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
            with self._db.immediate() as db:
                for table in ("fts_words", "fts_trigram", "fts_docs"):
                    db.execute(f"DELETE FROM {table}")
        count = 0
        for sid in sessions:
            if session_id is not None:
                with self._db.immediate() as db:
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
