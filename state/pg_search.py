"""`archive_search` on Postgres (SPEC §7, §11): the `SearchStorage` of the Postgres backend.

Archived messages are indexed where they live: `messages.tsv` is a generated `tsvector` (GIN) of the
words as FTS5's `unicode61` sees them, a `pg_trgm` GIN index on `content` serves substring matches, and
spilled WM items get the same in `spilled_items`; the `search_docs` view shows both as the file
backend's `fts_docs`. Nothing needs indexing after a commit: archiving sets `archive_id`, which scopes
the search, and records the new stems.

The database only finds candidates (`PgCandidates`): every channel `search_terms` plans for every query
word is one SELECT, all sent as one UNION ALL (a stem's relatives as a subquery of `stems`). Ranking
them is `search_hits.ranked_hits`, the file backend's own, so both backends rank alike. A query is
literal text: each word reaches SQL only as a bound parameter, turned into lexemes by `phraseto_tsquery`
(never parsed as tsquery syntax) or into a `LIKE` pattern with `%`, `_` and `\\` escaped; indexed
stems reach `to_tsquery` only through `quote_literal`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workmem.state import fts_query, search_hits, search_terms
from workmem.state.errors import InvalidInput
from workmem.state.ids import canonical_archive_id
from workmem.state.jsonl import check_stored
from workmem.state.messages import indexed_text
from workmem.state.pg_schema import NUL_STANDIN, Database, session_key

_WORDS = "phraseto_tsquery('wm_english', regexp_replace(%({key})s, '[^[:alnum:]]+', ' ', 'g'))"
_STEMS = ("SELECT w AS word, (SELECT lexeme FROM unnest(to_tsvector('wm_english', w)) LIMIT 1) AS stem "
          "FROM unnest(%s::text[]) AS w")


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
    `search_docs`, or one archive's. Three round trips: the scope, its stamps and the words' stems; every
    channel and scan of every term; the rows of the best."""

    def __init__(self, db: Database, session_id: str, archive: str | None) -> None:
        self.db = db
        self.scope = "session_id = %(sid)s" + (" AND archive_id = %(aid)s" if archive else "")
        self.args: dict[str, Any] = {"sid": session_id, "aid": archive}

    def candidates(self, terms: Sequence[fts_query.Term]) -> search_terms.Candidates:
        """The scope's seq span and mean length, its date stamps and each term's matches."""
        docs = f"FROM search_docs WHERE {self.scope}"
        words = [t.words for t in terms if t.words and " " not in t.words]
        size, stamps, *stemmed = self.db.batch([
            (f"SELECT (SELECT seq {docs} ORDER BY seq LIMIT 1) AS low, (SELECT seq {docs} ORDER BY seq DESC LIMIT 1) "
             f"AS high, (SELECT avg(length) FROM (SELECT length {docs} ORDER BY seq DESC "
             f"LIMIT {search_terms.LENGTH_SAMPLE}) t) AS mean", self.args),
            (f"SELECT seq {docs} AND stamp ORDER BY seq DESC LIMIT {search_terms.MAX_STAMPS}", self.args),
            *([(_STEMS, [words])] if words else [])])
        if not size or size[0]["low"] is None:
            return search_terms.NOTHING
        total = size[0]["high"] - size[0]["low"] + 1
        stem_of = {r["word"]: r["stem"] for r in stemmed[0]} if stemmed else {}
        planned = [search_terms.channels(t, stem_of.get(t.words)) for t in terms]
        scans = [i for i, t in enumerate(terms) if t.scan]
        found = self._run([c for chans in planned for c in chans], [terms[i].text for i in scans])
        matches = [[m for c in chans if (m := search_terms.channel_matches(found.pop(0), c, total))]
                   for chans in planned]
        fallbacks = {i: c for i, t in enumerate(terms) if not matches[i] and (c := search_terms.compound_channel(t))}
        for (i, channel), rows in zip(fallbacks.items(), self._run(list(fallbacks.values()), []), strict=True):
            if (m := search_terms.channel_matches(rows, channel, total)) is not None:
                matches[i].append(m)
        for i, rows in zip(scans, found, strict=True):
            if (m := search_terms.scan_matches(rows, total)) is not None:
                matches[i].append(m)
        return search_terms.Candidates(total, float(size[0]["mean"] or 0.0), matches,
                                       [r["seq"] for r in reversed(stamps)])

    def rows(self, seqs: Sequence[int]) -> dict[int, search_hits.Row]:
        """seq → (archive_id, length, seq, turn_id, role, content) of those seqs found in scope."""
        if not seqs:
            return {}
        found = self.db.rows(f"SELECT archive_id, length, seq, turn_id, role, content FROM search_docs "
                             f"WHERE {self.scope} AND seq = ANY(%(seqs)s)", {**self.args, "seqs": list(seqs)})
        return {r["seq"]: (r["archive_id"], r["length"], r["seq"], r["turn_id"], r["role"], r["content"])
                for r in found}

    def _run(self, channels: Sequence[search_terms.Channel], scans: Sequence[str]) -> list[list[tuple[int, Any, Any]]]:
        """(seq, length, asks) rows of each channel (its newest `limit`, as one UNION ALL) and of each scan, in
        one round trip; every statement planned for its very values (a generic plan cannot know how common a
        word is)."""
        args, selects = dict(self.args), []
        for k, channel in enumerate(channels):
            selects.append(f"(SELECT {k} AS channel, seq, length, asks FROM search_docs WHERE {self.scope} "
                           f"AND {_match(channel, f'c{k}', args)} ORDER BY seq DESC LIMIT {channel.limit})")
        statements = [(" UNION ALL ".join(selects), args)] if selects else []
        statements += [self._scan(text) for text in scans]
        results = self.db.batch(statements) if statements else []
        found: list[list[tuple[int, Any, Any]]] = [[] for _ in channels]
        for r in results.pop(0) if selects else []:
            found[r["channel"]].append((r["seq"], r["length"], r["asks"]))
        for rows in found:  # UNION ALL keeps no order across its parts
            rows.sort(key=lambda row: -row[0])
        for text, rows in zip(scans, results, strict=True):
            needle = text.replace("\x00", NUL_STANDIN).casefold()
            found.append([(r["seq"], r["length"], r["asks"]) for r in rows
                          if text.isascii() or needle in r["content"].casefold()])
        return found

    def _scan(self, text: str) -> tuple[str, dict[str, Any]]:
        """A term under 3 characters, matched as a case-insensitive substring of every document in scope:
        `lower()` for ASCII; any other term is matched with str.casefold() over the rows (`ß` finds
        `STRASSE`), like the file backend."""
        text = text.replace("\x00", NUL_STANDIN)
        sql = f"SELECT seq, length, asks, content FROM search_docs WHERE {self.scope}"
        if text.isascii():
            return sql.replace(", content", "") + " AND strpos(lower(content), %(needle)s) > 0", {
                **self.args, "needle": text.lower()}
        return sql, self.args


def _match(channel: search_terms.Channel, key: str, args: dict[str, Any]) -> str:
    """The WHERE condition of one channel, its values added to `args` under names starting with `key`."""
    if channel.relatives_of is not None:
        prefix = fts_query.stem_prefix(channel.relatives_of) or channel.relatives_of
        args.update({f"{key}_lo": prefix, f"{key}_hi": prefix + "\U0010ffff", f"{key}_stem": channel.relatives_of})
        return (f"tsv @@ (SELECT to_tsquery('simple', string_agg(quote_literal(stem), ' | ')) FROM (SELECT stem "
                f"FROM stems WHERE stem >= %({key}_lo)s AND stem < %({key}_hi)s AND stem <> %({key}_stem)s "
                f"ORDER BY stem LIMIT {search_terms.MAX_RELATIVES}) r)")
    keys = [f"{key}_{j}" for j in range(len(channel.phrases))]
    for name, phrase in zip(keys, channel.phrases, strict=True):
        text = phrase.replace("\x00", NUL_STANDIN)
        args[name] = text if channel.index == "words" else f"%{like_escape(text)}%"
    if channel.index == "words":
        return "tsv @@ (" + " || ".join(_WORDS.format(key=name) for name in keys) + ")"
    return "(" + " OR ".join(f"content ILIKE %({name})s" for name in keys) + ")"


def like_escape(text: str) -> str:
    """`text` as a literal inside a LIKE pattern (backslash is the default escape character)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
