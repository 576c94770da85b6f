"""What a backend's index is asked for per query term, and how its answers become ranking input.

Both backends search alike: each term of `fts_query.plan` goes to the same *channels* — its words
(stemmed, whole tokens), the irregular forms of `search_lemmas`, its stem's indexed relatives, a
substring match (≥ 3 characters) — and, when none of those finds anything, the other spellings of a
compound; a term under 3 characters is a substring scan. A backend turns each channel into one query
of its index (FTS5 `MATCH` on files, `tsvector @@` / `ILIKE` on Postgres) and hands the rows it found
to `channel_matches`, which applies the same caps and weights on both. Nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from workmem.state.search import fts_query, search_lemmas, search_rank

COMMON_TERM_DOCS = 5_000  # a word in more archived messages than this is "common" (see channel_matches)
PER_TERM_HITS = 1_000  # candidates taken for a common word: its newest matches
PREFIX_HITS = 200  # a stem's relatives found in more messages than this are too common to help
MAX_RELATIVES = 16  # stems looked for through one prefix
LENGTH_SAMPLE = 256  # the newest messages of the scope whose mean length stands for the scope's
MAX_STAMPS = 1_000  # date stamps the ranking knows of: the newest (older stretches rank as if undated)

Index = Literal["words", "trigram"]
Found = Sequence[tuple[int, Any, Any]]  # (seq, length, asks) rows


@dataclass(frozen=True)
class Candidates:
    """What a backend's index found for one search: the scope's size (its seq span) and mean length, per
    term the matches of each channel that found something, and the scope's date stamps in order."""

    total: int
    avg_length: float
    matches: list[list[search_rank.Matches]]
    stamps: list[int]


NOTHING = Candidates(0, 0.0, [], [])


@dataclass(frozen=True)
class Channel:
    """One query of an index for one term: any of `phrases` matches; `factor` scales the term's weight;
    `cap`: COMMON_TERM_DOCS, or None for stem relatives (dropped past PREFIX_HITS)."""

    index: Index  # "words": whole stemmed tokens (phrases are letter/digit runs); "trigram": a substring
    phrases: tuple[str, ...]
    factor: float
    cap: int | None
    relatives_of: str | None = None  # no phrases: the indexed stems sharing this stem's prefix (`stem_prefix`)

    @property
    def limit(self) -> int:
        """Rows worth fetching: one more than the cap tells whether the term is common."""
        return (self.cap or PREFIX_HITS) + 1


def channels(term: fts_query.Term, stem: str | None = None) -> list[Channel]:
    """The channels of `term`; `stem`: its stem when it is one word (a long stem also looks for its indexed
    relatives, which the backend finds through `fts_query.stem_prefix` — `allergies` → `allergic`)."""
    out = []
    if term.porter:
        out.append(Channel("words", (term.words,), 1.0, COMMON_TERM_DOCS))
    forms = search_lemmas.other_forms(term.words)
    if forms:
        out.append(Channel("words", forms, search_rank.LEMMA_WEIGHT, COMMON_TERM_DOCS))
    if stem and fts_query.stem_prefix(stem):
        out.append(Channel("words", (), search_rank.PREFIX_WEIGHT, None, relatives_of=stem))
    if term.trigram:
        out.append(Channel("trigram", (term.text,), 1.0, COMMON_TERM_DOCS))
    return out


def compound_channel(term: fts_query.Term) -> Channel | None:
    """The fallback of a term no channel found: its other compound spellings (`roadtrips` ↔ `road trips`)."""
    spellings = fts_query.compound_spellings(term.words) if term.porter else []
    return Channel("words", tuple(spellings), search_rank.COMPOUND_WEIGHT, COMMON_TERM_DOCS) if spellings else None


def is_common(found: Found, channel: Channel) -> bool:
    """Whether a channel's first `limit` rows say its term is common (more matches than its cap)."""
    return len(found) > (channel.cap or PREFIX_HITS)


def channel_matches(found: Found, newest: Found | None, channel: Channel, total: int) -> search_rank.Matches | None:
    """A channel's first rows (at most `channel.limit`, any order) → its matches, or None. A common word says
    little about relevance: only its `newest` rows count (the backend's newest PER_TERM_HITS, asked for when
    `is_common`), and they do not spread to neighbours; common stem relatives are dropped."""
    common = is_common(found, channel)
    if common and channel.cap is None:
        return None
    if common:
        found = (newest or ())[:PER_TERM_HITS]
    if not found:
        return None
    return search_rank.Matches(postings(found), channel.factor * search_rank.term_weight(total, len(found)),
                               spreads=not common)


def scan_matches(found: Found, total: int) -> search_rank.Matches | None:
    """A 1–2-character term's substring matches: never spreading (`7` inside `17` says little)."""
    if not found:
        return None
    return search_rank.Matches(postings(found), search_rank.term_weight(total, len(found)), spreads=False)


def postings(found: Found) -> dict[int, search_rank.Posting]:
    """(seq, length, asks) rows → seq → (length, asks); a seq found twice keeps its first row."""
    out: dict[int, search_rank.Posting] = {}
    for seq, length, asks in found:
        out.setdefault(seq, (length, bool(asks)))
    return out
