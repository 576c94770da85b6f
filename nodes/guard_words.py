"""The word tables of the section guards and the dedupe: data only, one table per list.

`nodes/guards.py` and `nodes/dedupe.py` build their sets and regexes from these; the month names of the
anchor dates are search's (`state/search/words.py`). Everything here is lowercase: the guards and the
dedupe compare lowercased words (the anchor regex matches case-insensitively).
"""

from __future__ import annotations

# Session Title: words that make no two titles alike. Not ANCHOR_STOPWORDS: a
# title compares all its words, so the guard drops only the glue and the generic title words.
TITLE_STOPWORDS = frozenset("""
the a an and or of to in on for with by at from session title working memory plan plans notes note
""".split())

# Key Facts anchors: capitalised words that are not names — sentence openers, function words, the section's
# own words. Not search's STOPWORDS: anchor coverage is specified by this list.
ANCHOR_STOPWORDS = frozenset("""
the a an and or of to in on for with by at from is are was were has have had been be will would could
should may might shall this that these those not no but if then so as it its they their them she her he
him his we our us you your who which what when where how why all each every both few more most other some
such than too very also just about after before between into through during again further once here there
over under out up down off own same only new old key facts decisions session working memory
""".split())

# What a number counts to be an anchor (`3 kids`, `12 miles`): the anchor units, singular and plural as written.
ANCHOR_UNITS = tuple("""
year years month months week weeks day days kid kids children hour hours mile miles time times
session sessions round rounds visit visits dollar dollars euro euros pound pounds bedroom bedrooms
painting paintings people person persons
""".split())

# Decision words that are anchors whatever their case. Not the extractive model's decision cues: those
# raise a sentence's worth, these must survive a Key Facts rewrite.
ANCHOR_DECISION_WORDS = tuple("because decided chose committed agreed resolved".split())

# File extensions that make a token a path; also what the extractive model copies.
PATH_EXTENSIONS = tuple("py ts tsx js jsx md yaml yml json sh ps1 cmd bat toml ini cfg rs go".split())

# Reversal and status words: an existing item whose other tokens hold one of these says
# something else than the new item inside it ("No longer using Redis" vs "Using Redis").
REVERSAL_WORDS = frozenset("""
no not never nor none nothing without cannot can't don't doesn't didn't isn't aren't wasn't weren't won't
wouldn't shouldn't longer instead stop stopped cancel cancelled canceled revert reverted undo undone wrong
incorrect false correction corrected fixed resolved done closed reopened removed deprecated except
""".split())

# Status tags of list items: a settled Open Issue, an item the Open Issues guard put back.
RESOLVED_TAG = "[resolved]"
RESTORED_TAG = "[silently dropped, restored]"
