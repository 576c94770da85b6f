"""Date stamps in an archive: short messages that only say
when the messages after them happened (`[session 3 — 9:27 am on 7 February, 2022]`, `2024-05-14`).

A question that names a date ("what did she cook in May 2022?") is about what was said *under* that
stamp, not about the stamp: `search_rank` lets a query word that matches a stamp count, at a lower
weight, for every message up to the next stamp (at most `search_rank.STAMP_REACH` messages on).
"""

from __future__ import annotations

import re

from workmem.state.search import fts_query
from workmem.state.search.words import MONTH_ABBREVIATIONS, MONTH_NAMES

STAMP_MAX_WORDS = 12  # a stamp is a date and a little more (a time, a weekday, a label), never a sentence
MONTHS = frozenset(MONTH_NAMES + MONTH_ABBREVIATIONS)
_YEAR = re.compile(r"(?:19|20)\d\d")
_ISO_DATE = re.compile(r"(?<!\d)(?:19|20)\d\d-[01]?\d-[0-3]?\d(?!\d)")


def is_date_stamp(text: str) -> bool:
    """Whether `text` is only a date stamp: at most STAMP_MAX_WORDS words holding a month name and a year, or
    an ISO date."""
    runs = fts_query.word_runs(text)
    if not runs or len(runs) > STAMP_MAX_WORDS:
        return False
    if _ISO_DATE.search(text):
        return True
    return any(r in MONTHS for r in runs) and any(_YEAR.fullmatch(r) for r in runs)
