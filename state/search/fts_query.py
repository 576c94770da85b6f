"""Planning a literal archive search: which index each query word goes to.

The query is literal: never FTS or regex syntax. Each whitespace-separated word becomes one term:
its letter/digit runs, lowercased, form one FTS5 phrase for the `porter unicode61` index (so
`Joanna's` looks for `joanna` — an English clitic `'s`/`n't`/`'re`… is dropped — and `OPS-4242` for
the phrase `ops 4242`); every phrase is double-quoted with inner quotes doubled, and punctuation,
control characters and NUL only ever separate runs. CJK text, identifiers with dots or slashes,
symbol-only strings and 1–2-character words also need substring matching: the trigram index from 3
characters up, an `instr` scan below. A long one-word term also looks for its stem's relatives
(`stem_prefix`: `injured` → `injur*` finds `injury`), which the ranking weighs less. Function words
("what", "did", "the"…) are searched only when the query holds nothing else: in a full question they
would outweigh the words that matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workmem.state.search.words import CLITICS, STOPWORDS

MAX_TERMS = 32
MAX_QUERY_CHARS = 4000
PREFIX_MIN_STEM = 6  # a stem this long also finds its relatives through a prefix query…
PREFIX_CUT = 3  # … of the stem less this many characters …
PREFIX_KEEP = 4  # … and never shorter than this
_CJK = re.compile(
    "[\u0e00-\u0e7f\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)
WORD_RUN = re.compile(r"[^\W_]+")  # a letter/digit run: what the unicode61 tokenizer keeps as one token
_CLITIC = re.compile(rf"(?<=[^\W_])['’](?:{'|'.join(map(re.escape, CLITICS))})(?![^\W_])", re.IGNORECASE)


@dataclass(frozen=True)
class Term:
    """One query word and the indexes that look for it."""

    text: str  # the word as typed (substring matching)
    words: str  # its letter/digit runs, lowercased and space-joined: the porter phrase ("" when it has none)
    trigram: bool  # substring match through the trigram index (≥ 3 characters)
    scan: bool  # substring match by `instr` (terms shorter than 3 characters)
    stopword: bool  # a function word: searched only when the query holds nothing else

    @property
    def porter(self) -> bool:
        """Whole-token match, stemmed (the word has a letter or digit)."""
        return bool(self.words)


def fts_phrase(text: str) -> str:
    """`text` as one literal FTS5 phrase: double-quoted, inner double quotes doubled (no NUL allowed)."""
    return '"' + text.replace('"', '""') + '"'


def needs_substring(word: str) -> bool:
    """CJK, dotted/slashed/snake_case identifiers, symbol-only strings and short terms need substring matching (a
    Postgres tsvector keeps 256 positions of a word: `handler_450` deep in a file is found only as a substring)."""
    return (len(word) < 3 or "." in word or "/" in word or "_" in word or bool(_CJK.search(word))
            or not any(ch.isalnum() for ch in word))


def word_runs(text: str) -> list[str]:
    """The lowercased letter/digit runs of `text`, English clitics (`'s`, `n't`, `'ll`…) dropped."""
    return WORD_RUN.findall(_CLITIC.sub("", text).lower())


def stem_prefix(stem: str) -> str | None:
    """The prefix a long stem's relatives share (`allergi` → `aller`: `allergic`, `allergy`), or None — always for
    a stem with a digit: an id's or a version's "relatives" are other ids (`ticket3` is not `ticket10`)."""
    if len(stem) < PREFIX_MIN_STEM or any(c.isdigit() for c in stem):
        return None
    return stem[:max(PREFIX_KEEP, len(stem) - PREFIX_CUT)]


def plan(query: str) -> list[Term]:
    """The distinct terms of `query` (at most MAX_TERMS); function words only when nothing else is there."""
    terms: list[Term] = []
    seen: set[str] = set()
    for word in query.split():
        runs = word_runs(word)
        words = " ".join(runs)
        key = words or word.casefold()
        if key in seen:
            continue
        seen.add(key)
        terms.append(Term(word, words, trigram=needs_substring(word) and len(word) >= 3 and "\0" not in word,
                          scan=len(word) < 3, stopword=bool(runs) and all(r in STOPWORDS for r in runs)))
    content = [t for t in terms if not t.stopword]
    return (content or terms)[:MAX_TERMS]


COMPOUND_PART = 3  # a compound's parts have at least this many characters
COMPOUND_MAX = 24  # a longer word is not split (English compounds are shorter; each split is one more phrase)


def compound_spellings(words: str) -> list[str]:
    """The other ways a compound may be written: `roadtrips` → `road trips`, `roa dtrips`…; `check ups` →
    `checkups`."""
    if " " in words:
        joined = words.replace(" ", "")
        return [joined] if joined.isalpha() else []
    if not words.isalpha() or not 2 * COMPOUND_PART <= len(words) <= COMPOUND_MAX:
        return []
    return [f"{words[:i]} {words[i:]}" for i in range(COMPOUND_PART, len(words) - COMPOUND_PART + 1)]
