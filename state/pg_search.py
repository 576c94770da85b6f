"""`archive_search` on Postgres (SPEC §7, §11): the `SearchStorage` of the Postgres backend.

Archived messages are indexed where they live: `messages.tsv` is a generated `tsvector` (GIN) of
the words as FTS5's `unicode61` sees them, and a `pg_trgm` GIN index on `content` serves substring
matches. Nothing needs indexing after a commit: archiving sets `archive_id`, which scopes the search.

The database only finds candidates: for each query word and each index `fts_query.plan` chose for
it, the newest matching seqs with a score (lower is better, like BM25). Ranking those lists is
`fts_query.rank`'s job, shared with the file backend, so both backends rank alike. A query is literal
text: each word reaches SQL only as a bound parameter, turned into lexemes by `phraseto_tsquery`
(never parsed as tsquery syntax) or into a `LIKE` pattern with `%`, `_` and `\\` escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workmem.state import fts_query
from workmem.state.errors import InvalidInput
from workmem.state.ids import canonical_archive_id
from workmem.state.jsonl import check_stored
from workmem.state.pg_schema import NUL_STANDIN, Database, session_key
from workmem.state.search_index import COMMON_TERM_DOCS, HIT_CHARS, MAX_LIMIT, PER_TERM_HITS

_WORDS_QUERY = "phraseto_tsquery('wm_english', regexp_replace(%(text)s, '[^[:alnum:]]+', ' ', 'g'))"
_NEWEST = f"ORDER BY seq DESC LIMIT {COMMON_TERM_DOCS + 1}"
# One SELECT per (query word, index), all sent as one UNION ALL: `{i}` is the word's number.
CANDIDATES = {
    # the word's phrase among the words, weighted by ts_rank (length-normalised)
    "words": f"(SELECT {{i}} AS term, 'words' AS idx, seq, ts_rank(tsv, q, 1)::float8 AS weight FROM messages, "
             f"{_WORDS_QUERY.replace('(text)', '(text_{i})')} AS q WHERE {{scope}} AND tsv @@ q {_NEWEST})",
    "trigram": f"(SELECT {{i}} AS term, 'trigram' AS idx, seq, 1.0::float8 AS weight FROM messages WHERE {{scope}} "
               f"AND content ILIKE %(pattern_{{i}})s {_NEWEST})",
    "scan": "(SELECT {i} AS term, 'scan' AS idx, seq, 1.0::float8 AS weight FROM messages WHERE {scope} "
            "AND strpos(lower(content), %(lower_{i})s) > 0)",
}
_WEIGHT_HALF = 0.05  # a ts_rank at which a word counts 3/4 of its idf (saturating, like BM25's tf)


class PgSearchIndex:
    """Literal search over one Postgres schema's archived messages."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def close(self) -> None:
        """Nothing to close; the storage closes the pool."""

    def index_messages(self, session_id: str, archive_id: str, messages: Sequence[dict[str, Any]]) -> int:
        """Nothing to write (the archive's rows are indexed by their generated column); checks the input
        like the file backend and returns how many messages the archive holds."""
        session_key(session_id)
        canonical_archive_id(archive_id)
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
            raise InvalidInput("messages", messages, "must be a list of stored messages")
        for i, msg in enumerate(messages):
            reason = check_stored(msg)
            if reason:
                raise InvalidInput(f"messages[{i}]", msg, reason)
        return len(messages)

    def reindex(self, sessions: Any, session_id: str | None = None,
                progress: Callable[[str, str], None] | None = None) -> int:
        """The index is derived by the database itself: reports each archive and returns messages covered."""
        count = 0
        for sid in sessions.list_sessions() if session_id is None else [session_key(session_id)]:
            for archive in sessions.list_archives(sid):
                if progress is not None:
                    progress(sid, archive["archive_id"])
                count += archive["end_seq"] - archive["start_seq"] + 1
        return count

    def search(self, session_id: str, query: str, archive_id: str | None = None,
               limit: int = 12) -> list[dict[str, Any]]:
        """Literal ranked search of archived messages → hits `{archive_id, seq, turn_id, role, content}`."""
        session_key(session_id)
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
        per_term = self.candidates(session_id, archive, terms)
        seq_of = {seq: seq for hits in per_term for seq in hits}
        ranked = fts_query.rank(per_term, seq_of, limit)
        if not ranked:
            return []
        rows = {r["seq"]: r for r in self.db.rows(
            "SELECT archive_id, seq, turn_id, role, content FROM messages WHERE session_id = %s AND seq = ANY(%s)",
            [session_id, ranked])}
        return [hit(rows[seq]) for seq in ranked if seq in rows]

    def candidates(self, session_id: str, archive: str | None, terms: list[fts_query.Term]) -> list[dict[int, float]]:
        """Per query word, seq → score (lower is better) of the archived messages it matches through each
        index the plan chose for it (one round trip for all); a common word counts with its newest
        PER_TERM_HITS messages only."""
        scope = scope_sql(archive)
        args: dict[str, Any] = {"sid": session_id, "aid": archive}
        selects: list[str] = []
        found: dict[tuple[int, str], list[tuple[int, float]]] = {}
        for i, term in enumerate(terms):
            text = term.text.replace("\x00", NUL_STANDIN)
            args.update({f"text_{i}": text, f"pattern_{i}": f"%{like_escape(text)}%", f"lower_{i}": text.lower()})
            for index, on in (("words", term.porter), ("trigram", term.trigram), ("scan", term.scan)):
                if on and index == "scan" and not text.isascii():
                    found[(i, index)] = self._casefold_scan(text, scope, args)
                elif on:
                    found[(i, index)] = []
                    selects.append(CANDIDATES[index].format(i=i, scope=scope))
        # planned for these very values (never a generic plan: it cannot know how common a word is)
        for r in self.db.rows(" UNION ALL ".join(selects), args, prepare=False) if selects else []:
            found[(r["term"], r["idx"])].append((r["seq"], r["weight"]))
        total = self._documents(session_id, archive)
        per_term: list[dict[int, float]] = [{} for _ in terms]
        for (i, index), rows in found.items():
            idf = fts_query.scan_score(total, len(rows))
            if index != "scan" and len(rows) > COMMON_TERM_DOCS:
                rows = rows[:PER_TERM_HITS]
            hits = per_term[i]
            for seq, weight in rows:
                score = idf * (0.5 + 0.5 * weight / (weight + _WEIGHT_HALF)) if index == "words" else idf
                hits[seq] = min(hits.get(seq, 0.0), score)
        return per_term

    def _casefold_scan(self, text: str, scope: str, args: dict[str, Any]) -> list[tuple[int, float]]:
        """A short non-ASCII term, matched with str.casefold() like the file backend (`ß` finds `STRASSE`)."""
        needle = text.casefold()
        rows = self.db.rows(f"SELECT seq, content FROM messages WHERE {scope} ORDER BY seq DESC", args)
        return [(r["seq"], 1.0) for r in rows if needle in r["content"].casefold()]

    def _documents(self, session_id: str, archive: str | None) -> int:
        """Archived messages in scope (for idf): a counter of the session row, or the archive's range."""
        if archive is None:
            row = self.db.row("SELECT archived_count AS n FROM sessions WHERE session_id = %s", [session_id])
        else:
            row = self.db.row("SELECT end_seq - start_seq + 1 AS n FROM archives WHERE session_id = %s "
                              "AND archive_id = %s", [session_id, archive])
        return int(row["n"]) if row else 0


def scope_sql(archive: str | None) -> str:
    """The archived messages of the session (`%(sid)s`), or of one of its archives (`%(aid)s`)."""
    return "session_id = %(sid)s AND archive_id " + ("= %(aid)s" if archive else "IS NOT NULL")


def like_escape(text: str) -> str:
    """`text` as a literal inside a LIKE pattern (backslash is the default escape character)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def hit(row: dict[str, Any]) -> dict[str, Any]:
    """A search hit shaped like the file backend's: content cut to HIT_CHARS."""
    content = row["content"] if len(row["content"]) <= HIT_CHARS else row["content"][: HIT_CHARS - 1] + "…"
    return {"archive_id": row["archive_id"], "seq": row["seq"], "turn_id": row["turn_id"], "role": row["role"],
            "content": content}
