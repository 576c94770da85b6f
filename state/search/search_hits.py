"""One archive search, whatever the backend: arguments, planning, ranking and the hits.

A backend's index is a `CandidateSource` over the searched scope — it answers the few questions the
ranking asks (how big is the scope, which messages does each term's channel match, where are the date
stamps, what do the best ones say) — and `ranked_hits` does the rest, so the file and the Postgres
backend rank alike. Spilled working-memory items are documents too: role `memory`, their section
in the turn-id column, and a negative seq no message or other item is ever a neighbour of.

Every hit says what it is (`match`, `MatchKind`), decided here from the same candidates that ranked it, so
the label never disagrees with the ranking and both backends label alike wherever their stemmers agree
(FTS5's Porter and Postgres's Snowball part on a few words: Porter files `one` with `on`, Snowball `tried`
with `try`):

- `exact`: the index matched the hit's own text for at least one query term, through one of the term's
  channels (`search_terms`: its stemmed words as the index tokenises them, an irregular form, a stem's
  relative, a compound spelling, a substring for CJK, identifiers and 1–2-character terms). A spilled
  item is found only this way.
- `neighbour`: no term matched the hit's own text; it ranks only through matches near it — the neighbour
  window (`search_rank`: up to three messages before, two after) or the reach of a matching date stamp.

A word in more than `search_terms.COMMON_TERM_DOCS` messages of the scope counts only for its newest
`search_terms.PER_TERM_HITS` matches, in the ranking and so in the label.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from workmem.state.errors import InvalidInput
from workmem.state.ids import archive_number, canonical_archive_id
from workmem.state.index_text import DIGEST_MARK, is_digest
from workmem.state.search import fts_query, search_dates, search_rank, search_terms

HIT_CHARS = 1500
_IDENTIFIER = re.compile(r"\w[_./-]\w|[A-Za-z]\d|\d[A-Za-z]")  # snake_case, dotted, a path, GPT-4, letters+digits
MAX_LIMIT = 1000
MEMORY_ROLE = "memory"
MEMORY_SEQ_GAP = 10  # wider than the neighbour window
MEMORY_SEQ_SPAN = 10_000_000  # per archive: room for a million items
HEAD_EXTRA = 32  # the length and opener priors reorder the best 2 × limit + HEAD_EXTRA fused scores

Row = tuple[Any, ...]  # (archive_id, length, seq, turn_id, role, content)
MatchKind = Literal["exact", "neighbour"]  # what a hit is (see the module docstring)
EXACT: MatchKind = "exact"
NEIGHBOUR: MatchKind = "neighbour"


class CandidateSource(Protocol):
    """What a backend's index answers about one search scope (a session, or one of its archives)."""

    def candidates(self, terms: Sequence[fts_query.Term]) -> search_terms.Candidates:
        """The scope's size and mean length, per term the matches of each of its channels (`search_terms`)
        that found something, and the seqs of the scope's newest `search_terms.MAX_STAMPS` date stamps."""

    def rows(self, seqs: Sequence[int]) -> dict[int, Row]:
        """seq → row of those seqs found in scope."""


def check_search(query: Any, archive_id: Any, limit: Any) -> str | None:
    """Validate a search's arguments (typed errors naming the field); → the canonical archive id or None."""
    if not isinstance(query, str):
        raise InvalidInput("query", query, "must be a string")
    if len(query) > fts_query.MAX_QUERY_CHARS:
        raise InvalidInput("query", query, f"longer than {fts_query.MAX_QUERY_CHARS} characters")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput("limit", limit, f"must be an integer between 1 and {MAX_LIMIT}")
    return None if archive_id is None else canonical_archive_id(archive_id)


def ranked_hits(source: CandidateSource, query: str, limit: int) -> list[dict[str, Any]]:
    """The `limit` best hits of `query` in `source`'s scope: candidates per term and channel, fused by
    `search_rank.score`, then a bounded head reordered by the length and opener priors; each hit labelled
    `exact` or `neighbour` (`matched_seqs`)."""
    terms = fts_query.plan(query)
    if not terms:
        return []
    found = source.candidates(terms)
    if not found.total:
        return []
    fused = search_rank.score(found.matches, found.avg_length, found.stamps)
    head = search_rank.top(fused, 2 * limit + HEAD_EXTRA)
    rows = source.rows(head)
    dated = set(found.stamps)
    final = {seq: fused[seq] * search_rank.length_prior(rows[seq][1], found.avg_length)
             * (search_rank.OPENER_PRIOR if seq - 1 in dated else 1.0) for seq in head if seq in rows}
    words = fts_query.WORD_RUN.findall(query)
    exact = matched_seqs(found.matches)
    return [hit(rows[seq], words, EXACT if seq in exact else NEIGHBOUR, query)
            for seq in search_rank.top(final, limit)]


def matched_seqs(matches: Sequence[Sequence[search_rank.Matches]]) -> set[int]:
    """The seqs whose own text some query term's channel matched: the `exact` hits (the rest came through
    neighbours)."""
    return {seq for channels in matches for found in channels for seq in found.postings}


def hit(row: Row, words: Sequence[str] = (), match: MatchKind = EXACT, query: str = "") -> dict[str, Any]:
    """A row as a hit `{archive_id, seq, turn_id, role, content, match}` (content at most HIT_CHARS: a long
    message shows the window around the match of the `query` and its `words`, `shown_window`); a spilled WM
    item → role `memory`, seq and turn_id None, and its `section`."""
    text = row[5]
    content = (DIGEST_MARK + shown_window(text[1:], words, query) if is_digest(text)
               else shown_window(text, words, query))
    if row[4] == MEMORY_ROLE:  # a spilled WM item: its section rides in the turn_id column
        return {"archive_id": row[0], "seq": None, "turn_id": None, "role": MEMORY_ROLE, "section": row[3],
                "content": content, "match": match}
    return {"archive_id": row[0], "seq": row[2], "turn_id": row[3], "role": row[4], "content": content,
            "match": match}


def match_counts(hits: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """(exact matches, neighbouring messages) among `hits`."""
    neighbours = sum(h["match"] == NEIGHBOUR for h in hits)
    return len(hits) - neighbours, neighbours


def shown_window(text: str, words: Sequence[str], query: str = "") -> str:
    """`text` when it fits HIT_CHARS; else its head, or — when the match lies past the head — the window around
    it, cut ends marked `…`. The match: of the whole `query`, else of one of its tokens as written (an identifier,
    `handler_450`), else of its rarest word in `text` (`handler 450` → `450`, not the head's first `handler`)."""
    if len(text) <= HIT_CHARS:
        return text
    lowered = text.lower()
    identifiers = [t for t in query.split()[:fts_query.MAX_TERMS] if _IDENTIFIER.search(t)]  # what the search used
    at = _match_at(lowered, [query, *identifiers]) if query.strip() else -1
    if at < 0:
        present = [w.lower() for w in words[:fts_query.MAX_TERMS] if len(w) >= 2 and w.lower() in lowered]
        at = lowered.find(min(present, key=lowered.count)) if present else 0
    if at + HIT_CHARS // 3 < HIT_CHARS - 1:
        return text[: HIT_CHARS - 1] + "…"
    start = max(0, at - HIT_CHARS // 3)
    body = text[start: start + HIT_CHARS - 2]
    return "…" + body + ("…" if start + len(body) < len(text) else "")


def _match_at(lowered: str, phrases: Sequence[str]) -> int:
    """Where the first of `phrases` (of two characters or more) that `lowered` holds first occurs, or -1."""
    for phrase in phrases:
        phrase = phrase.strip().lower()
        if len(phrase) >= 2 and (at := lowered.find(phrase)) >= 0:
            return at
    return -1


def from_message(hit_content: str, text: str, query: str) -> str:
    """A hit's content when the index held a digest of its message (`index_text.index_text`; the content starts
    with `DIGEST_MARK`): the window of the message's own `text` around the match; else the content as it is."""
    if not is_digest(hit_content):
        return hit_content
    return shown_window(text, fts_query.WORD_RUN.findall(query), query)


def doc_fields(text: str) -> tuple[int, bool, bool]:
    """What the ranking keeps of an indexed text: (length in words, asks a question, is a date stamp)."""
    return len(fts_query.WORD_RUN.findall(text)), "?" in text or "？" in text, search_dates.is_date_stamp(text)


def memory_seq(archive_id: str, i: int) -> int:
    """The seq of an archive's i-th spilled item: negative, spaced so nothing is ever its neighbour."""
    return -(archive_number(archive_id) * MEMORY_SEQ_SPAN + (i + 1) * MEMORY_SEQ_GAP)
