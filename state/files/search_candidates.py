"""What SQLite hands the ranking of one archive search: a `search_hits.CandidateSource` over `fts_docs`.

Each channel `search_terms` plans for a query term becomes one FTS5 `MATCH` (porter words or trigrams)
joined to `fts_docs` for its messages' seq, length and whether they ask something; the FTS match
drives every join (one rowid lookup per candidate). Nothing here scores: the caps and weights are
`search_terms`', the ranking `search_rank`'s, shared with the Postgres backend.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlite_utils import Database

from workmem.state.search import fts_query, search_rank, search_terms
from workmem.state.search.search_terms import LENGTH_SAMPLE, MAX_RELATIVES, MAX_STAMPS

_STEMMER = ("CREATE VIRTUAL TABLE IF NOT EXISTS temp.wm_stem USING fts5(text, tokenize='porter unicode61')",
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.wm_stem_terms USING fts5vocab('temp', 'wm_stem', 'instance')",
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.wm_stem_vocab USING fts5vocab('temp', 'wm_stem', 'row')")


class SqliteCandidates:
    """The candidates of one search scope of `index.sqlite` (`scope`: SQL over `fts_docs d`, with `args`)."""

    def __init__(self, db: Database, scope: str, args: list[Any]) -> None:
        self.db, self.scope, self.args = db, scope, args

    def candidates(self, terms: Sequence[fts_query.Term]) -> search_terms.Candidates:
        """The scope's size (`scope_size`), each term's matches (`term_matches`) and the date stamps (`stamps`)."""
        total, avg_length = scope_size(self.db, self.scope, self.args)
        if not total:
            return search_terms.NOTHING
        found = stems(self.db, terms)
        matches = [list(term_matches(self.db, term, found.get(term.words), self.scope, self.args, total))
                   for term in terms]
        return search_terms.Candidates(total, avg_length, matches, stamps(self.db, self.scope, self.args))

    def rows(self, seqs: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """See `rows`."""
        return rows(self.db, self.scope, self.args, seqs)


def scope_size(db: Database, scope: str, args: list[Any]) -> tuple[int, float]:
    """(about how many messages the scope holds, their mean length in words) — two cheap estimates: the
    seq span of the scope, and the mean over its newest LENGTH_SAMPLE messages."""
    low, high = db.execute(f"SELECT (SELECT seq FROM fts_docs d WHERE {scope} ORDER BY seq LIMIT 1), "
                           f"(SELECT seq FROM fts_docs d WHERE {scope} ORDER BY seq DESC LIMIT 1)",
                           args + args).fetchone()
    if low is None:
        return 0, 0.0
    mean = db.execute(f"SELECT AVG(length) FROM (SELECT length FROM fts_docs d WHERE {scope} "
                      f"ORDER BY seq DESC LIMIT {LENGTH_SAMPLE})", args).fetchone()[0]
    return high - low + 1, float(mean or 0.0)


def _tokenize(db: Database, texts: Sequence[str]) -> None:
    """Put `texts` alone in this connection's temp porter table (its vocabularies then list their stems)."""
    for statement in _STEMMER:
        db.execute(statement)
    db.execute("DELETE FROM temp.wm_stem")
    db.conn.executemany("INSERT INTO temp.wm_stem (text) VALUES (?)", [(t,) for t in texts])


def stems(db: Database, terms: Sequence[fts_query.Term]) -> dict[str, str]:
    """The porter stem of every one-word term (word → stem), from SQLite's own tokenizer."""
    words = [t.words for t in terms if t.words and " " not in t.words]
    if not words:
        return {}
    _tokenize(db, [" ".join(words)])
    found = [row[0] for row in db.execute("SELECT term FROM temp.wm_stem_terms ORDER BY offset")]
    return dict(zip(words, found, strict=False)) if len(found) == len(words) else {}


def batch_stems(db: Database, texts: Sequence[str]) -> list[str]:
    """The distinct stems of `texts` long enough to be a prefix's relative (kept in `fts_stems`)."""
    _tokenize(db, texts)
    found = [row[0] for row in db.execute("SELECT term FROM temp.wm_stem_vocab WHERE length(term) >= ?",
                                          [fts_query.PREFIX_KEEP])]
    db.execute("DELETE FROM temp.wm_stem")
    return found


def relatives(db: Database, stem: str) -> list[str]:
    """Indexed stems sharing `stem`'s prefix (`fts_query.stem_prefix`), the stem itself left out."""
    prefix = fts_query.stem_prefix(stem)
    if not prefix:
        return []
    return [row[0] for row in db.execute(
        f"SELECT stem FROM fts_stems WHERE stem >= ? AND stem < ? AND stem != ? LIMIT {MAX_RELATIVES}",
        [prefix, prefix + "\U0010ffff", stem])]


def term_matches(db: Database, term: fts_query.Term, stem: str | None, scope: str, args: list[Any],
                 total: int) -> Iterator[search_rank.Matches]:
    """The matches of `term` in scope through each channel `search_terms` plans for it (its stem's relatives
    from the indexed stems in `fts_stems`), the compound fallback when none found anything, and the `instr`
    scan of a term under 3 characters."""
    found_any = False
    for channel in search_terms.channels(term, stem):
        matches = _channel(db, channel, scope, args, total)
        if matches is not None:
            found_any = True
            yield matches
    fallback = None if found_any else search_terms.compound_channel(term)
    if fallback is not None:
        matches = _channel(db, fallback, scope, args, total)
        if matches is not None:
            yield matches
    if term.scan:
        matches = search_terms.scan_matches(scan(db, term.text, scope, args), total)
        if matches is not None:
            yield matches


def _channel(db: Database, channel: search_terms.Channel, scope: str, args: list[Any],
             total: int) -> search_rank.Matches | None:
    """One channel's matches: its first `limit` rows (SQLite stops reading early), and for a common word
    its newest PER_TERM_HITS."""
    table = "fts_words" if channel.index == "words" else "fts_trigram"
    phrases = relatives(db, channel.relatives_of) if channel.relatives_of else channel.phrases
    if not phrases:
        return None
    match = " OR ".join(fts_query.fts_phrase(p) for p in phrases)
    sql = (f"SELECT d.seq, d.length, d.asks FROM {table} f CROSS JOIN fts_docs d ON d.rowid = f.rowid "
           f"WHERE {table} MATCH ? AND {scope}")
    found = db.execute(f"{sql} LIMIT {channel.limit}", [match, *args]).fetchall()
    newest = None
    if search_terms.is_common(found, channel) and channel.cap is not None:
        newest = db.execute(f"{sql} ORDER BY f.rowid DESC LIMIT {search_terms.PER_TERM_HITS}",
                            [match, *args]).fetchall()
    return search_terms.channel_matches(found, newest, channel, total)


def scan(db: Database, text: str, scope: str, args: list[Any]) -> list[tuple[Any, ...]]:
    """Case-insensitive substring match of a term too short for the trigram index → (seq, length, asks).

    SQLite's lower() folds ASCII only, so an ASCII term is matched in SQL and any other term with
    str.casefold() over the scoped rows (`ÉC` finds `ÉCOLE`, `ß` finds `STRASSE`).
    """
    sql = f"SELECT d.seq, d.length, d.asks FROM fts_trigram f JOIN fts_docs d ON d.rowid = f.rowid WHERE {scope}"
    if text.isascii():
        return db.execute(f"{sql} AND instr(lower(f.content), ?) > 0", [*args, text.lower()]).fetchall()
    needle = text.casefold()
    rows = db.execute(sql.replace(" FROM ", ", f.content FROM ", 1), args)
    return [row[:3] for row in rows if needle in row[3].casefold()]


def rows(db: Database, scope: str, args: list[Any], seqs: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """seq → (archive_id, length, seq, turn_id, role, content) of those seqs found in scope (newest row wins)."""
    if not seqs:
        return {}
    marks = ",".join("?" * len(seqs))
    found = db.execute(
        f"SELECT d.archive_id, d.length, d.seq, f.turn_id, f.role, f.content FROM fts_docs d "
        f"JOIN fts_words f ON f.rowid = d.rowid WHERE {scope} AND d.seq IN ({marks}) ORDER BY d.rowid",
        [*args, *seqs]).fetchall()
    return {row[2]: row for row in found}


def stamps(db: Database, scope: str, args: list[Any]) -> list[int]:
    """The seqs of the scope's newest MAX_STAMPS date stamps (`search_dates`), in order (a partial index)."""
    found = db.execute(f"SELECT seq FROM fts_docs d WHERE {scope} AND d.stamp = 1 ORDER BY seq DESC "
                       f"LIMIT {MAX_STAMPS}", args).fetchall()
    return [row[0] for row in reversed(found)]
