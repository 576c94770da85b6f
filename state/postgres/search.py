"""`archive_search` on Postgres: the `SearchStorage` of the Postgres backend.

The documents are the `docs` table, the file backend's `fts_docs`: archived messages and spilled WM
items, written by the transaction that persists their archive (`schema.index_documents`, in
`state/postgres/schema.py`), with a generated `tsvector` (GIN) of the words as FTS5's `unicode61` sees
them and a `pg_trgm` GIN index on `content` for substring matches. Nothing needs indexing after a
commit; `reindex` rebuilds them.

The database only finds candidates (`PgCandidates`): every channel `search_terms` plans for every query
word is one SELECT, all sent as one UNION ALL (a stem's relatives from the session's `stems`). Ranking
them is `search_hits.ranked_hits`, the file backend's own, so both backends rank alike. A query is
literal text: each word reaches SQL only as a bound parameter, turned into lexemes by `phraseto_tsquery`
(never parsed as tsquery syntax) or into a `LIKE` pattern with `%`, `_` and `\\` escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.ids import canonical_archive_id
from workmem.state.messages import indexed_text
from workmem.state.postgres.schema import NUL_STANDIN, Database, index_documents, session_key
from workmem.state.search import fts_query, search_hits, search_terms
from workmem.state.stored import check_stored

_WORDS = "phraseto_tsquery('wm_english', regexp_replace(%({key})s, '[^[:alnum:]]+', ' ', 'g'))"
# Each one-word term's stem, and (for a long stem) the first MAX_RELATIVES stems of the session sharing its prefix
# with the most documents any of them is in: `fts_query.stem_prefix`'s rule, its numbers passed in.
_STEMS = """
SELECT w AS word, s.stem, r.kin, r.most FROM unnest(%(words)s::text[]) AS w
CROSS JOIN LATERAL (SELECT lexeme AS stem FROM unnest(to_tsvector('wm_english', w)) LIMIT 1) s
CROSS JOIN LATERAL (SELECT left(s.stem, greatest(%(keep)s, length(s.stem) - %(cut)s)) AS prefix) p
LEFT JOIN LATERAL (SELECT array_agg(k.stem ORDER BY k.stem) AS kin, max(k.docs) AS most FROM (
    SELECT stem, docs FROM stems WHERE session_id = %(sid)s AND length(s.stem) >= %(long)s
    AND stem >= p.prefix AND stem < p.prefix || %(top)s AND stem <> s.stem
    ORDER BY stem LIMIT %(relatives)s) k) r ON true
"""


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
        """Rebuild each session's documents and stem counts from its archived messages and spilled items (one
        transaction per session); reports each archive and returns the messages covered."""
        count = 0
        for sid in sessions.list_sessions() if session_id is None else [session_key(session_id)]:
            with self.db.transaction() as conn:
                for table in ("docs", "stems"):
                    conn.execute(f"DELETE FROM {table} WHERE session_id = %s", [sid])
                index_documents(conn, sid)
            for archive in sessions.list_archives(sid):
                if progress is not None:
                    progress(sid, archive["archive_id"])
                count += archive["end_seq"] - archive["start_seq"] + 1
        return count

    def indexed_seqs(self, session_id: str) -> dict[str, list[int]]:
        """archive_id → the seqs of the messages the index holds for it, ascending (spilled items left out)."""
        session_key(session_id)
        out: dict[str, list[int]] = {}
        for r in self.db.rows("SELECT archive_id, seq FROM docs WHERE session_id = %s AND seq > 0 ORDER BY seq",
                              [session_id]):
            out.setdefault(r["archive_id"], []).append(r["seq"])
        return out

    def search(self, session_id: str, query: str, archive_id: str | None = None,
               limit: int = 12) -> list[dict[str, Any]]:
        """Literal ranked search of archived messages → hits `{archive_id, seq, turn_id, role, content}`
        (spilled WM items as role `memory`, seq None, with their section)."""
        session_key(session_id)
        archive = search_hits.check_search(query, archive_id, limit)
        return search_hits.ranked_hits(PgCandidates(self.db, session_id, archive), query, limit)


class PgCandidates:
    """The candidates of one search scope (`search_hits.CandidateSource`): a session's documents, or one
    archive's. Three round trips: the scope, its stamps, the words' stems and their
    relatives; every channel and scan of every term; the rows of the best."""

    def __init__(self, db: Database, session_id: str, archive: str | None) -> None:
        self.db = db
        self.scope = "session_id = %(sid)s" + (" AND archive_id = %(aid)s" if archive else "")
        self.args: dict[str, Any] = {"sid": session_id, "aid": archive}
        self._kin: dict[str, list[str] | None] = {}

    def candidates(self, terms: Sequence[fts_query.Term]) -> search_terms.Candidates:
        """The scope's seq span and mean length, its date stamps and each term's matches."""
        size, stamps, stem_of = self._scope(terms)
        if size is None:
            return search_terms.NOTHING
        total, avg_length = size
        planned = [search_terms.channels(t, stem_of.get(t.words)) for t in terms]
        scans = [i for i, t in enumerate(terms) if t.scan]
        found, scanned = self._run([c for chans in planned for c in chans], [terms[i].text for i in scans])
        matches = [[m for c in chans if (m := search_terms.channel_matches(*found.pop(0), c, total))]
                   for chans in planned]
        fallbacks = {i: c for i, t in enumerate(terms) if not matches[i] and (c := search_terms.compound_channel(t))}
        for (i, channel), (rows, newest) in zip(fallbacks.items(), self._run(list(fallbacks.values()), [])[0],
                                                strict=True):
            if (m := search_terms.channel_matches(rows, newest, channel, total)) is not None:
                matches[i].append(m)
        for i, rows in zip(scans, scanned, strict=True):
            if (m := search_terms.scan_matches(rows, total)) is not None:
                matches[i].append(m)
        return search_terms.Candidates(total, avg_length, matches, stamps)

    def _scope(self, terms: Sequence[fts_query.Term]) -> tuple[tuple[int, float] | None, list[int], dict[str, str]]:
        """One round trip: (the scope's seq span and the mean length of its newest LENGTH_SAMPLE documents, or
        None when it is empty), its stamps in order, and the stem of each one-word term; its relatives are kept
        for the channels (None: one of them alone is in more than PREFIX_HITS documents of the session, so the
        channel is dropped as it would be after reading them)."""
        newest = "ORDER BY seq DESC LIMIT {n}"
        docs = f"FROM docs WHERE {self.scope}"
        words = [t.words for t in terms if t.words and " " not in t.words]
        sample = search_terms.LENGTH_SAMPLE
        recent, oldest, stamps, *stemmed = self.db.batch([
            (f"SELECT seq, length {docs} {newest.format(n=sample)}", self.args),
            (f"SELECT seq {docs} ORDER BY seq LIMIT 1", self.args),
            (f"SELECT seq {docs} AND stamp {newest.format(n=search_terms.MAX_STAMPS)}", self.args),
            *([(_STEMS, {"words": words, "sid": self.args["sid"], "keep": fts_query.PREFIX_KEEP,
                         "cut": fts_query.PREFIX_CUT, "long": fts_query.PREFIX_MIN_STEM, "top": "\U0010ffff",
                         "relatives": search_terms.MAX_RELATIVES})] if words else [])])
        ends = [r["seq"] for r in recent[:1] + oldest]
        stem_of = {r["word"]: r["stem"] for r in stemmed[0]} if stemmed else {}
        whole_session = self.args["aid"] is None  # a session's counts bound an archive's, never decide them
        self._kin = {r["stem"]: None if whole_session and (r["most"] or 0) > search_terms.PREFIX_HITS
                     else list(r["kin"] or []) for r in (stemmed[0] if stemmed else []) if r["stem"]}
        if not ends:
            return None, [], stem_of
        lengths = [r["length"] for r in recent]
        return (max(ends) - min(ends) + 1, sum(lengths) / len(lengths)), [r["seq"] for r in reversed(stamps)], stem_of

    def rows(self, seqs: Sequence[int]) -> dict[int, search_hits.Row]:
        """seq → (archive_id, length, seq, turn_id, role, content) of those seqs found in scope."""
        if not seqs:
            return {}
        found = self.db.rows(f"SELECT archive_id, length, seq, turn_id, role, content FROM docs "
                             f"WHERE {self.scope} AND seq = ANY(%(seqs)s)", {**self.args, "seqs": list(seqs)})
        return {r["seq"]: (r["archive_id"], r["length"], r["seq"], r["turn_id"], r["role"], r["content"])
                for r in found}

    def _run(self, channels: Sequence[search_terms.Channel], scans: Sequence[str]) -> tuple[list[Any], list[Any]]:
        """Each channel's first `limit` rows (one UNION ALL; like FTS5, stopping early) and each scan's rows as
        (seq, length, asks), in one round trip; then, for the channels of a common word, their newest
        PER_TERM_HITS. → ([(rows, newest rows or None)] per channel, [rows] per scan). Every statement is
        planned for its very values (a generic plan cannot know how common a word is)."""
        args, selects = dict(self.args), []
        for k, channel in enumerate(channels):
            if channel.relatives_of is not None and not self._kin.get(channel.relatives_of):
                continue  # no relatives, or too common ones: nothing to read
            selects.append(f"(SELECT {k} AS channel, seq, length, asks FROM docs WHERE {self.scope} "
                           f"AND {self._match(channel, f'c{k}', args)} LIMIT {channel.limit})")
        statements = [(" UNION ALL ".join(selects), args)] if selects else []
        results = self.db.batch(statements + [self._scan(text) for text in scans]) if statements or scans else []
        found: list[list[tuple[int, Any, Any]]] = [[] for _ in channels]
        for r in results.pop(0) if selects else []:
            found[r["channel"]].append((r["seq"], r["length"], r["asks"]))
        scanned = []
        for text, rows in zip(scans, results, strict=True):
            needle = text.replace("\x00", NUL_STANDIN).casefold()  # what `_scan` matched by: SQL for ASCII only
            scanned.append([(r["seq"], r["length"], r["asks"]) for r in rows
                            if needle.isascii() or needle in r["content"].casefold()])
        common = [k for k, c in enumerate(channels) if c.cap is not None and search_terms.is_common(found[k], c)]
        newest: dict[int, list[tuple[int, Any, Any]]] = {}
        if common:
            args = dict(self.args)
            newest_first = f"ORDER BY seq DESC LIMIT {search_terms.PER_TERM_HITS}"
            statements = [(f"SELECT seq, length, asks FROM docs WHERE {self.scope} AND "
                           f"{self._match(channels[k], f'c{k}', args)} {newest_first}", args) for k in common]
            for k, rows in zip(common, self.db.batch(statements), strict=True):
                newest[k] = [(r["seq"], r["length"], r["asks"]) for r in rows]
        return [(rows, newest.get(k)) for k, rows in enumerate(found)], scanned

    def _match(self, channel: search_terms.Channel, key: str, args: dict[str, Any]) -> str:
        """The WHERE condition of one channel, its values added to `args` under names starting with `key`."""
        phrases = self._kin.get(channel.relatives_of) or () if channel.relatives_of is not None else channel.phrases
        keys = [f"{key}_{j}" for j in range(len(phrases))]
        for name, phrase in zip(keys, phrases, strict=True):
            text = phrase.replace("\x00", NUL_STANDIN)
            args[name] = text if channel.index == "words" else f"%{like_escape(text)}%"
        if channel.relatives_of is not None:  # indexed stems, looked up as they are (stemming again could change them)
            return "tsv @@ (" + " || ".join(f"phraseto_tsquery('simple', %({name})s)" for name in keys) + ")"
        if channel.index == "words":
            return "tsv @@ (" + " || ".join(_WORDS.format(key=name) for name in keys) + ")"
        return "(" + " OR ".join(f"content ILIKE %({name})s" for name in keys) + ")"

    def _scan(self, text: str) -> tuple[str, dict[str, Any]]:
        """A term under 3 characters, matched as a case-insensitive substring of every document in scope:
        `lower()` for ASCII; any other term is matched with str.casefold() over the rows (`ß` finds
        `STRASSE`), like the file backend."""
        text = text.replace("\x00", NUL_STANDIN)
        sql = f"SELECT seq, length, asks, content FROM docs WHERE {self.scope}"
        if text.isascii():
            return sql.replace(", content", "") + " AND strpos(lower(content), %(needle)s) > 0", {
                **self.args, "needle": text.lower()}
        return sql, self.args


def like_escape(text: str) -> str:
    """`text` as a literal inside a LIKE pattern (backslash is the default escape character)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
