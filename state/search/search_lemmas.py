"""Irregular English word forms: what the porter stemmer cannot relate.

Porter strips suffixes, so `buys`/`buying` meet `buy`, but `bought` never does, nor `children` and
`child`. A query word of one of these groups also looks for the group's other forms (`search_terms`
weighs them `search_rank.LEMMA_WEIGHT`), so "what did she buy" finds "I bought a kayak". The table
(`words.IRREGULAR_FORMS`) is the common irregular verbs and nouns of English grammar — nothing there comes
from any conversation.
"""

from __future__ import annotations

from workmem.state.search.words import IRREGULAR_FORMS

_FORMS: dict[str, tuple[str, ...]] = {}
for _group in IRREGULAR_FORMS.replace("\n", "|").split("|"):
    _words = tuple(_group.split())
    for _word in _words:
        _FORMS.setdefault(_word, tuple(w for w in _words if w != _word))


def other_forms(word: str) -> tuple[str, ...]:
    """The other forms of an irregular word's group (`bought` → `buy`), () for any other word."""
    return _FORMS.get(word, ())
