"""Ranking archive-search candidates (SPEC §7 [r2] "Ranking quality is a product property, measured").

The database hands over, per query term and index, the matching messages of the scope (seq, length,
whether the message asks something); everything here is plain Python over that bounded set, so a
PostgreSQL backend (`tsvector` + `pg_trgm` candidate lists) can reuse it unchanged.

- **Term weight**: BM25's idf within the searched scope, minus `IDF_SHIFT`, so a term found in a large
  share of the conversation (a name every line starts with, "like", "time") counts far less than a rare
  one; a term never drops below `IDF_FLOOR` of its idf, so a query of common words still ranks.
- **Message score per term**: BM25 with presence as tf (`K1`, a mild length normalisation `B`).
- **Neighbour window**: a message is also found through its neighbours' words at a lower weight (an
  answer is usually the reply next to the matching line): per term, a message scores the best of its
  own match and `weight × score` of the matches up to three messages before (`AFTER`, or the stronger
  `AFTER_QUESTION` when that match asks something) or two after (`BEFORE`). Common (capped) terms do
  not spread.
- **Fusion**: the per-term scores add up (a message matching more, and rarer, words ranks higher).
- **Length prior**: longer messages carry more facts; the fused score is multiplied by
  `(length / average) ** LENGTH_PRIOR` (capped), correcting BM25's bias towards one-line replies.
- Ties go to the newest message (highest seq).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

K1 = 1.2
B = 0.3
IDF_SHIFT = 1.0
IDF_FLOOR = 0.05
AFTER = (0.5, 0.4, 0.2)  # weights of a match 1, 2, 3 messages earlier
AFTER_QUESTION = (0.9, 0.5, 0.2)  # … when that earlier match contains a question mark
BEFORE = (0.4, 0.2)  # weights of a match 1, 2 messages later
LENGTH_PRIOR = 0.2
LENGTH_PRIOR_CAP = 3.0

Posting = tuple[int | None, bool]  # (length in words or None when unknown, asks a question)


def idf(total: int, matched: int) -> float:
    """BM25's (always positive) inverse document frequency of a term found in `matched` of `total` messages."""
    total = max(total, matched)
    return math.log(1 + (total - matched + 0.5) / (matched + 0.5))


def term_weight(total: int, matched: int) -> float:
    """How much one term of the query counts: its idf less `IDF_SHIFT`, at least `IDF_FLOOR` of it."""
    value = idf(total, matched)
    return max(value - IDF_SHIFT, IDF_FLOOR * value)


def term_scores(postings: Mapping[int, Posting], weight: float, avg_length: float) -> dict[int, float]:
    """BM25 (presence as tf) of each matching message (seq → score) for one term of weight `weight`."""
    scale = weight * (K1 + 1)
    avg = max(avg_length, 1.0)
    return {seq: scale / (1 + K1 * (1 - B + B * (avg if length is None else length) / avg))
            for seq, (length, _asks) in postings.items()}


def spread(scores: Mapping[int, float], postings: Mapping[int, Posting]) -> dict[int, float]:
    """Per message, the best of its own score and its neighbours' weighted scores (the neighbour window)."""
    out = dict(scores)
    for seq, score in scores.items():
        after = AFTER_QUESTION if postings[seq][1] else AFTER
        for offset, weight in enumerate(after, 1):
            value = weight * score
            if value > out.get(seq + offset, 0.0):
                out[seq + offset] = value
        for offset, weight in enumerate(BEFORE, 1):
            value = weight * score
            if value > out.get(seq - offset, 0.0):
                out[seq - offset] = value
    return out


def merge_best(into: dict[int, float], scores: Mapping[int, float]) -> None:
    """Keep the better score per message (one term found through several indexes)."""
    for seq, score in scores.items():
        if score > into.get(seq, 0.0):
            into[seq] = score


def fuse(per_term: Iterable[Mapping[int, float]]) -> dict[int, float]:
    """The sum of the per-term scores of every candidate message."""
    total: dict[int, float] = {}
    for scores in per_term:
        for seq, score in scores.items():
            total[seq] = total.get(seq, 0.0) + score
    return total


def length_prior(length: int | None, avg_length: float) -> float:
    """The factor a message's length gives its score (1 for an average or unknown length)."""
    if length is None or avg_length <= 0:
        return 1.0
    return min(max(length, 1) / avg_length, LENGTH_PRIOR_CAP) ** LENGTH_PRIOR


def order(scores: Mapping[int, float]) -> list[int]:
    """Seqs by score (highest first), the newest first on ties."""
    return sorted(scores, key=lambda seq: (-scores[seq], -seq))
