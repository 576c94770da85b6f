"""What SQLite hands the ranking of one archive search: bounded candidate lists per query term.

Each index a term goes to (`fts_query.plan`) yields the term's matching messages in the searched scope as
`search_rank.Matches` — seq → (length, asks), the term's weight there, whether the matches vouch for their
neighbours. The FTS match drives every join (one rowid lookup in `fts_docs` per candidate); nothing here
scores, so a PostgreSQL backend only has to produce the same lists (`tsvector`, `pg_trgm`, `to_tsvector`
for stems).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlite_utils import Database

from workmem.state import fts_query, search_lemmas, search_rank

COMMON_TERM_DOCS = 5_000  # a word in more archived messages than this is "common" (see term_matches)
PER_TERM_HITS = 1_000  # candidates taken for a common word: its newest matches
LENGTH_SAMPLE = 256  # the newest messages of the scope whose mean length stands for the scope's
PREFIX_HITS = 200  # a stem's relatives found in more messages than this are too common to help
MAX_RELATIVES = 16  # stems looked for through one prefix
MAX_STAMPS = 1_000  # date stamps the ranking knows of: the newest (older stretches rank as if undated)
_STEMMER = ("CREATE VIRTUAL TABLE IF NOT EXISTS temp.wm_stem USING fts5(text, tokenize='porter unicode61')",
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.wm_stem_terms USING fts5vocab('temp', 'wm_stem', 'instance')",
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.wm_stem_vocab USING fts5vocab('temp', 'wm_stem', 'row')")
Postings = dict[int, search_rank.Posting]


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
    """The matches of `term` in scope, per index that looks for it. A word found in more than
    COMMON_TERM_DOCS messages says little about relevance: only its newest PER_TERM_HITS count, SQLite
    stops reading early, and they do not spread; neither does a substring match of one or two characters
    (`7` inside `17`). A long word also finds its stem's relatives (`allergies` → `allergic`, from the
    indexed stems in `fts_stems`) at PREFIX_WEIGHT, unless they are in more than PREFIX_HITS messages."""
    channels = []
    if term.porter:
        channels.append(("fts_words", fts_query.fts_phrase(term.words), 1.0, COMMON_TERM_DOCS))
    forms = search_lemmas.other_forms(term.words)
    if forms:
        channels.append(("fts_words", " OR ".join(fts_query.fts_phrase(f) for f in forms), search_rank.LEMMA_WEIGHT,
                         COMMON_TERM_DOCS))
    kin = relatives(db, stem) if stem else []
    if kin:
        channels.append(("fts_words", " OR ".join(fts_query.fts_phrase(k) for k in kin), search_rank.PREFIX_WEIGHT,
                         None))
    if term.trigram:
        channels.append(("fts_trigram", fts_query.fts_phrase(term.text), 1.0, COMMON_TERM_DOCS))
    found_any = False
    for table, match, factor, cap in channels:
        matches = _channel(db, table, match, factor, cap, scope, args, total)
        if matches is not None:
            found_any = True
            yield matches
    if not found_any and term.porter:
        spellings = fts_query.compound_spellings(term.words)
        if spellings:
            matches = _channel(db, "fts_words", " OR ".join(fts_query.fts_phrase(t) for t in spellings),
                               search_rank.COMPOUND_WEIGHT, COMMON_TERM_DOCS, scope, args, total)
            if matches is not None:
                yield matches
    if term.scan:
        found = scan(db, term.text, scope, args)
        if found:
            yield search_rank.Matches(_postings(found), search_rank.term_weight(total, len(found)), spreads=False)


def _channel(db: Database, table: str, match: str, factor: float, cap: int | None, scope: str, args: list[Any],
             total: int) -> search_rank.Matches | None:
    """One index's matches of one FTS expression (see term_matches for `cap`), or None."""
    sql = (f"SELECT d.seq, d.length, d.asks FROM {table} f CROSS JOIN fts_docs d ON d.rowid = f.rowid "
           f"WHERE {table} MATCH ? AND {scope}")
    found = db.execute(f"{sql} LIMIT {(cap or PREFIX_HITS) + 1}", [match, *args]).fetchall()
    common = len(found) > (cap or PREFIX_HITS)
    if common and cap is None:
        return None
    if common:
        found = db.execute(f"{sql} ORDER BY f.rowid DESC LIMIT {PER_TERM_HITS}", [match, *args]).fetchall()
    if not found:
        return None
    return search_rank.Matches(_postings(found), factor * search_rank.term_weight(total, len(found)),
                               spreads=not common)


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


def _postings(found: list[tuple[Any, ...]]) -> Postings:
    """(seq, length, asks) rows → seq → (length, asks); a seq indexed twice keeps its first row."""
    out: Postings = {}
    for seq, length, asks in found:
        out.setdefault(seq, (length, bool(asks)))
    return out
