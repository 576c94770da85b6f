"""`archive_search` on Postgres (SPEC §7, §11): the `SearchStorage` of the Postgres backend.

Archived messages are indexed where they live: `messages.tsv` is a generated `tsvector` (GIN) of the
words as FTS5's `unicode61` sees them, a `pg_trgm` GIN index on `content` serves substring matches, and
spilled WM items get the same in `spilled_items`; the `search_docs` view shows both as the file
backend's `fts_docs`. Nothing needs indexing after a commit: archiving sets `archive_id`, which scopes
the search, and records the new stems.

The database only finds candidates (`PgCandidates`): every channel `search_terms` plans for every query
word is one SELECT, all sent as one UNION ALL. Ranking them is `search_hits.ranked_hits`, the file
backend's own, so both backends rank alike. A query is literal text: each word reaches SQL only as a
bound parameter, turned into lexemes by `phraseto_tsquery` (never parsed as tsquery syntax) or into a
`LIKE` pattern with `%`, `_` and `\\` escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workmem.state import fts_query, search_hits, search_rank, search_terms
from workmem.state.errors import InvalidInput
from workmem.state.ids import canonical_archive_id
from workmem.state.jsonl import check_stored
from workmem.state.messages import indexed_text
from workmem.state.pg_schema import NUL_STANDIN, Database, session_key

_WORDS = "phraseto_tsquery('wm_english', regexp_replace(%({key})s, '[^[:alnum:]]+', ' ', 'g'))"
_STEM = "phraseto_tsquery('simple', %({key})s)"  # an indexed stem, as it is (stemming it again could change it)
_STEMS = ("SELECT w AS word, (SELECT lexeme FROM unnest(to_tsvector('wm_english', w)) LIMIT 1) AS stem "
          "FROM unnest(%s::text[]) AS w")
_RELATIVES = (f"SELECT stem FROM stems WHERE stem >= %s AND stem < %s AND stem <> %s ORDER BY stem "
              f"LIMIT {search_terms.MAX_RELATIVES}")


class PgSearchIndex:
    """Literal search over one Postgres schema's archived messages and spilled items."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def close(self) -> None:
        """Nothing to close; the storage closes the pool."""

    def index_messages(self, session_id: str, archive_id: str, messages: Sequence[dict[str, Any]],
                       spilled: Sequence[dict[str, str]] = ()) -> int:
        """Nothing to write (archiving indexed the archive's rows and spilled items); checks the input like
        the file backend and returns how many documents the archive gives the index."""
        session_key(session_id)
        canonical_archive_id(archive_id)
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
            raise InvalidInput("messages", messages, "must be a list of stored messages")
        documents = len(spilled)
        for i, msg in enumerate(messages):
            reason = check_stored(msg)
            if reason:
                raise InvalidInput(f"messages[{i}]", msg, reason)
            documents += bool(indexed_text(msg))
        return documents

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
        """Literal ranked search of archived messages → hits `{archive_id, seq, turn_id, role, content}`
        (spilled WM items as role `memory`, seq None, with their section)."""
        session_key(session_id)
        archive = search_hits.check_search(query, archive_id, limit)
        return search_hits.ranked_hits(PgCandidates(self.db, session_id, archive), query, limit)


class PgCandidates:
    """The candidates of one search scope (`search_hits.CandidateSource`): a session's documents in
    `search_docs`, or one archive's."""

    def __init__(self, db: Database, session_id: str, archive: str | None) -> None:
        self.db = db
        self.scope = "session_id = %(sid)s" + (" AND archive_id = %(aid)s" if archive else "")
        self.args: dict[str, Any] = {"sid": session_id, "aid": archive}

    def scope_size(self) -> tuple[int, float]:
        """(the seq span of the scope's documents, the mean length of its newest LENGTH_SAMPLE) in one trip."""
        docs = f"FROM search_docs WHERE {self.scope}"
        row = self.db.row(f"SELECT (SELECT seq {docs} ORDER BY seq LIMIT 1) AS low, "
                          f"(SELECT seq {docs} ORDER BY seq DESC LIMIT 1) AS high, (SELECT avg(length) FROM "
                          f"(SELECT length {docs} ORDER BY seq DESC LIMIT {search_terms.LENGTH_SAMPLE}) t) AS mean",
                          self.args)
        if row is None or row["low"] is None:
            return 0, 0.0
        return row["high"] - row["low"] + 1, float(row["mean"] or 0.0)

    def matches(self, terms: Sequence[fts_query.Term], total: int) -> list[list[search_rank.Matches]]:
        """Per term, its channels' matches: every channel of every term in one round trip, then the compound
        spellings of the terms nothing found."""
        relatives = self._relatives(terms)
        planned = [search_terms.channels(t, relatives.get(t.words, ())) for t in terms]
        found = self._run([c for chans in planned for c in chans])
        out: list[list[search_rank.Matches]] = []
        for channels in planned:
            out.append([m for c in channels if (m := search_terms.channel_matches(found.pop(0), c, total))])
        fallbacks = {i: c for i, t in enumerate(terms) if not out[i] and (c := search_terms.compound_channel(t))}
        for (i, channel), rows in zip(fallbacks.items(), self._run(list(fallbacks.values())), strict=True):
            matches = search_terms.channel_matches(rows, channel, total)
            if matches is not None:
                out[i].append(matches)
        for i, term in enumerate(terms):
            if term.scan:
                matches = search_terms.scan_matches(self._scan(term.text), total)
                if matches is not None:
                    out[i].append(matches)
        return out

    def stamps(self) -> list[int]:
        """The seqs of the scope's newest MAX_STAMPS date stamps, in order (a partial index)."""
        rows = self.db.rows(f"SELECT seq FROM search_docs WHERE {self.scope} AND stamp ORDER BY seq DESC "
                            f"LIMIT {search_terms.MAX_STAMPS}", self.args)
        return [r["seq"] for r in reversed(rows)]

    def rows(self, seqs: Sequence[int]) -> dict[int, search_hits.Row]:
        """seq → (archive_id, length, seq, turn_id, role, content) of those seqs found in scope."""
        if not seqs:
            return {}
        found = self.db.rows(f"SELECT archive_id, length, seq, turn_id, role, content FROM search_docs "
                             f"WHERE {self.scope} AND seq = ANY(%(seqs)s)", {**self.args, "seqs": list(seqs)})
        return {r["seq"]: (r["archive_id"], r["length"], r["seq"], r["turn_id"], r["role"], r["content"])
                for r in found}

    def _relatives(self, terms: Sequence[fts_query.Term]) -> dict[str, list[str]]:
        """word → the indexed stems sharing its stem's prefix, for every one-word term with a long stem."""
        words = [t.words for t in terms if t.words and " " not in t.words]
        if not words:
            return {}
        out = {}
        for row in self.db.rows(_STEMS, [words]):
            prefix = fts_query.stem_prefix(row["stem"] or "")
            if prefix:
                out[row["word"]] = [r["stem"] for r in self.db.rows(_RELATIVES, [prefix, prefix + "\U0010ffff",
                                                                                  row["stem"]])]
        return out

    def _run(self, channels: Sequence[search_terms.Channel]) -> list[list[tuple[int, Any, Any]]]:
        """Each channel's newest `limit` rows (seq, length, asks), one UNION ALL for all of them, each planned
        for its very values (a generic plan cannot know how common a word is)."""
        if not channels:
            return []
        args, selects = dict(self.args), []
        for k, channel in enumerate(channels):
            keys = [f"c{k}_{j}" for j in range(len(channel.phrases))]
            for key, phrase in zip(keys, channel.phrases, strict=True):
                text = phrase.replace("\x00", NUL_STANDIN)
                args[key] = text if channel.index == "words" else f"%{like_escape(text)}%"
            if channel.index == "words":
                query = _STEM if channel.stems else _WORDS
                match = "tsv @@ (" + " || ".join(query.format(key=key) for key in keys) + ")"
            else:
                match = "(" + " OR ".join(f"content ILIKE %({key})s" for key in keys) + ")"
            selects.append(f"(SELECT {k} AS channel, seq, length, asks FROM search_docs WHERE {self.scope} "
                           f"AND {match} ORDER BY seq DESC LIMIT {channel.limit})")
        found: list[list[tuple[int, Any, Any]]] = [[] for _ in channels]
        for r in self.db.rows(" UNION ALL ".join(selects), args, prepare=False):
            found[r["channel"]].append((r["seq"], r["length"], r["asks"]))
        for rows in found:  # UNION ALL keeps no order across its parts
            rows.sort(key=lambda row: -row[0])
        return found

    def _scan(self, text: str) -> list[tuple[int, Any, Any]]:
        """A term under 3 characters, matched as a case-insensitive substring of every document in scope:
        `lower()` for ASCII, str.casefold() for any other term (`ß` finds `STRASSE`), like the file backend."""
        text = text.replace("\x00", NUL_STANDIN)
        sql = f"SELECT seq, length, asks{{content}} FROM search_docs WHERE {self.scope}"
        if text.isascii():
            rows = self.db.rows(sql.format(content="") + " AND strpos(lower(content), %(needle)s) > 0",
                                {**self.args, "needle": text.lower()})
            return [(r["seq"], r["length"], r["asks"]) for r in rows]
        needle = text.casefold()
        rows = self.db.rows(sql.format(content=", content"), self.args)
        return [(r["seq"], r["length"], r["asks"]) for r in rows if needle in r["content"].casefold()]


def like_escape(text: str) -> str:
    """`text` as a literal inside a LIKE pattern (backslash is the default escape character)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
