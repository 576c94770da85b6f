"""Planning a literal archive search (SPEC §7): which index each query word goes to, and ranking.

The query is literal: each whitespace-separated word becomes one FTS5 phrase (double-quoted, inner
quotes doubled), never FTS or regex syntax. Words go to the `porter unicode61` index when they hold a
letter or digit; CJK text, identifiers with dots or slashes, symbol-only strings and 1–2-character
terms also need substring matching: the trigram index from 3 characters up, an `instr` scan below.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_TERMS = 32
MAX_QUERY_CHARS = 4000
_CJK = re.compile(
    "[\u0e00-\u0e7f\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)


@dataclass(frozen=True)
class Term:
    """One query word and the indexes that look for it."""

    text: str
    porter: bool  # whole-token match, stemmed
    trigram: bool  # substring match through the trigram index (≥ 3 characters)
    scan: bool  # substring match by `instr` (terms shorter than 3 characters)


def fts_phrase(word: str) -> str:
    """`word` as one literal FTS5 phrase: double-quoted, inner double quotes doubled."""
    return '"' + word.replace('"', '""') + '"'


def needs_substring(word: str) -> bool:
    """CJK, dotted/slashed identifiers, symbol-only strings and short terms need substring matching."""
    return (len(word) < 3 or "." in word or "/" in word or bool(_CJK.search(word))
            or not any(ch.isalnum() for ch in word))


def plan(query: str) -> list[Term]:
    """The distinct words of `query` (at most MAX_TERMS), each with the indexes that search it."""
    terms: list[Term] = []
    seen: set[str] = set()
    for word in query.split():
        key = word.lower()
        if key in seen:
            continue
        seen.add(key)
        substring = needs_substring(word)
        terms.append(Term(word, porter=any(ch.isalnum() for ch in word),
                          trigram=substring and len(word) >= 3, scan=len(word) < 3))
        if len(terms) == MAX_TERMS:
            break
    return terms


def scan_score(total: int, matched: int) -> float:
    """A BM25-like (negative, lower is better) score for an `instr` match: the term's idf."""
    return -math.log(1 + (total - matched + 0.5) / (matched + 0.5))


def rank(per_term: list[dict[int, float]], seq_of: dict[int, int], limit: int) -> list[int]:
    """Doc ids ordered by query words matched (desc), summed BM25 (lower first), then newest seq."""
    coverage: dict[int, int] = {}
    score: dict[int, float] = {}
    for hits in per_term:
        for doc, s in hits.items():
            coverage[doc] = coverage.get(doc, 0) + 1
            score[doc] = score.get(doc, 0.0) + s
    order = sorted(coverage, key=lambda d: (-coverage[d], score[d], -seq_of[d]))
    return order[:limit]
