"""Ranking archive-search candidates.

The database hands over, per query term and index, the matching messages of the scope (seq, length,
whether the message asks something); everything here is plain Python over that bounded set, so a
PostgreSQL backend (`tsvector` + `pg_trgm` candidate lists) can reuse it unchanged.

- **Term weight**: BM25's idf within the searched scope, minus `IDF_SHIFT`, so a term found in a large
  share of the conversation (a name every line starts with, "like", "time") counts far less than a rare
  one; a term never drops below `IDF_FLOOR` of its idf, so a query of common words still ranks.
- **Message score per term**: BM25 with presence as tf (`K1`, a mild length normalisation `B`); a match
  through the stem prefix (`fts_query.stem_prefix`) weighs `PREFIX_WEIGHT`, a message keeps its best.
- **Neighbour window**: a message is also found through its neighbours' words at a lower weight (an
  answer is usually the reply next to the matching line): per term, a message scores the best of its
  own match and `weight × score` of the matches up to three messages before (`AFTER`, or the stronger
  `AFTER_QUESTION` when that match asks something) or two after (`BEFORE`). Only the SOURCES best direct
  matches spread, and never through a common (capped) term or a 1–2-character substring match.
- **Fusion**: the per-term scores add up (a message matching more, and rarer, words ranks higher).
- **Length prior**: longer messages carry more facts; the fused score is multiplied by
  `(length / average) ** LENGTH_PRIOR` (capped), correcting BM25's bias towards one-line replies.
- Ties go to the newest message (highest seq).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

K1 = 1.2
B = 0.3
IDF_SHIFT = 0.4
IDF_FLOOR = 0.05
AFTER = (0.5, 0.5, 0.3)  # weights of a match 1, 2, 3 messages earlier
AFTER_QUESTION = (0.8, 0.5, 0.3)  # … when that earlier match contains a question mark
BEFORE = (0.5, 0.25)  # weights of a match 1, 2 messages later
LEMMA_WEIGHT = 0.7  # another form of an irregular word (`bought` for `buy`)
COMPOUND_WEIGHT = 1.0  # a word found nowhere, written apart or together (`road trips` for `roadtrips`)
PREFIX_WEIGHT = 0.5  # a stem's relative (`allergic` for `allergies`) counts half
LENGTH_PRIOR = 0.2
LENGTH_PRIOR_CAP = 3.0
OPENER_PRIOR = 1.15  # the message that opens a dated stretch (right after its stamp) tells its news
SOURCES = 256  # the strongest direct matches whose neighbours are scored (bounds the work)
STAMP_WEIGHT = 0.8  # a date stamp's match counts this much for each message it dates …
STAMP_REACH = 200  # … up to the next stamp, at most this many messages on

Posting = tuple[int | None, bool]  # (length in words or None when unknown, asks a question)
Asks = Callable[[int], bool]


def idf(total: int, matched: int) -> float:
    """BM25's (always positive) inverse document frequency of a term found in `matched` of `total` messages."""
    total = max(total, matched)
    return math.log(1 + (total - matched + 0.5) / (matched + 0.5))


def term_weight(total: int, matched: int) -> float:
    """How much one term of the query counts: its idf less `IDF_SHIFT`, at least `IDF_FLOOR` of it."""
    value = idf(total, matched)
    return max(value - IDF_SHIFT, IDF_FLOOR * value)


@dataclass(frozen=True)
class Matches:
    """One query term's matches through one index: seq → (length, asks), the term's weight, and whether
    these matches vouch for their neighbours."""

    postings: Mapping[int, Posting]
    weight: float
    spreads: bool


def term_scores(postings: Mapping[int, Posting], weight: float, avg_length: float) -> dict[int, float]:
    """BM25 (presence as tf) of each matching message (seq → score) for one term of weight `weight`."""
    scale = weight * (K1 + 1)
    avg = max(avg_length, 1.0)
    norm = K1 * (1 - B)
    slope = K1 * B / avg
    return {seq: scale / (1 + norm + slope * (avg if posting[0] is None else posting[0]))
            for seq, posting in postings.items()}


def score(terms: Sequence[Sequence[Matches]], avg_length: float, stamps: Sequence[int] = ()) -> dict[int, float]:
    """seq → fused score of every candidate: per term the best of the message's own match and the neighbour
    window over the strongest SOURCES messages, summed over the terms. `stamps`: the date stamps' seqs, in
    order (a stamp's match dates the messages after it; no window crosses a stamp)."""
    per_term = []
    own: dict[int, float] = {}
    for channels in terms:
        best, vouching, asks = _best_of(channels, avg_length)
        for seq, value in best.items():
            own[seq] = own.get(seq, 0.0) + value
        per_term.append((best, vouching, asks))
    sources = own.keys() if len(own) <= SOURCES else set(top(own, SOURCES))
    total = dict(own)
    dated = set(stamps)
    for best, vouching, asks in per_term:
        window: dict[int, float] = {}
        for seq in vouching.keys() & sources:
            value = vouching[seq]
            if seq in dated:
                _spread(window, range(seq + 1, _reach_end(stamps, seq)), STAMP_WEIGHT * value)
                continue
            for offset, weight in enumerate(AFTER_QUESTION if asks(seq) else AFTER, 1):
                if seq + offset in dated:
                    break
                _spread(window, (seq + offset,), weight * value)
            for offset, weight in enumerate(BEFORE, 1):
                if seq - offset in dated:
                    break
                _spread(window, (seq - offset,), weight * value)
        for seq, value in window.items():
            gain = value - best.get(seq, 0.0)
            if gain > 0:
                total[seq] = total.get(seq, 0.0) + gain
    return total


def _spread(window: dict[int, float], seqs: Iterable[int], value: float) -> None:
    """Give each of `seqs` `value` in `window` where that is more than it has."""
    for seq in seqs:
        if value > window.get(seq, 0.0):
            window[seq] = value


def _reach_end(stamps: Sequence[int], stamp: int) -> int:
    """The seq a stamp's reach ends before: the next stamp, at most STAMP_REACH messages on."""
    following = bisect.bisect_right(stamps, stamp)
    end = stamp + STAMP_REACH + 1
    return min(stamps[following], end) if following < len(stamps) else end


def _best_of(channels: Sequence[Matches], avg_length: float) -> tuple[dict[int, float], dict[int, float], Asks]:
    """One term's scores over its indexes: (best per message, best among matches that vouch, asks(seq))."""
    scored = [(term_scores(m.postings, m.weight, avg_length), m) for m in channels]

    def asks(seq: int) -> bool:
        return any(m.postings[seq][1] for _scores, m in scored if seq in m.postings)

    if len(scored) == 1:  # the usual case: one index, no merging
        only, matches = scored[0]
        return only, only if matches.spreads else {}, asks
    best: dict[int, float] = {}
    vouching: dict[int, float] = {}
    for scores, matches in scored:
        for seq, value in scores.items():
            if value > best.get(seq, 0.0):
                best[seq] = value
            if matches.spreads and value > vouching.get(seq, 0.0):
                vouching[seq] = value
    return best, vouching, asks


def length_prior(length: int | None, avg_length: float) -> float:
    """The factor a message's length gives its score (1 for an average or unknown length)."""
    if length is None or avg_length <= 0:
        return 1.0
    return min(max(length, 1) / avg_length, LENGTH_PRIOR_CAP) ** LENGTH_PRIOR


def top(scores: Mapping[int, float], count: int) -> list[int]:
    """The `count` best seqs by score (highest first), the newest first on ties."""
    return [seq for _score, seq in sorted(zip(scores.values(), scores.keys(), strict=True), reverse=True)[:count]]
