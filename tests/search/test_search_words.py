"""state/search/words.py: the search tables are well formed and every entry does what its table is for."""

from __future__ import annotations

import re

import pytest
from word_tables import repeats, tables

from workmem.state.search import fts_query, search_dates, search_lemmas, words

TABLES = tables(words)
GROUPS = [group.split() for group in words.IRREGULAR_FORMS.replace("\n", "|").split("|") if group.strip()]


def test_the_tables_are_read():
    assert set(TABLES) == {"STOPWORDS", "MONTH_NAMES", "MONTH_ABBREVIATIONS", "CLITICS"}
    assert len(words.MONTH_NAMES) == 12 and len(GROUPS) > 100


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_table_repeats_an_entry(name):
    assert repeats(TABLES[name]) == []


@pytest.mark.parametrize("name", sorted(TABLES))
def test_entries_are_lowercase_letter_runs(name):
    """Search compares lowercased letter/digit runs: an entry with a capital or a separator never matches."""
    assert [e for e in TABLES[name] if not re.fullmatch(r"[a-z]+", e)] == []


@pytest.mark.parametrize("word", sorted(words.STOPWORDS))
def test_every_stopword_is_a_function_word_of_a_query(word):
    assert fts_query.word_runs(word.capitalize()) == [word]
    assert [(t.words, t.stopword) for t in fts_query.plan(f"{word.capitalize()} kayak")] == [("kayak", False)]
    assert all(t.stopword for t in fts_query.plan(word))


@pytest.mark.parametrize("month", words.MONTH_NAMES + words.MONTH_ABBREVIATIONS)
def test_every_month_form_makes_a_date_stamp(month):
    assert search_dates.is_date_stamp(f"[session 3 — 9:27 am on 7 {month.capitalize()}, 2022]")
    assert not search_dates.is_date_stamp(f"7 {month.capitalize()}")  # a month without a year is no stamp


def test_may_is_both_a_name_and_its_short_form():
    assert "may" in words.MONTH_NAMES and "may" not in words.MONTH_ABBREVIATIONS
    assert [m[:3] for m in words.MONTH_NAMES if m[:3] != m] == [a for a in words.MONTH_ABBREVIATIONS if a != "sept"]


@pytest.mark.parametrize("clitic", words.CLITICS)
def test_every_clitic_is_dropped(clitic):
    assert fts_query.word_runs(f"Joanna'{clitic} Joanna’{clitic.upper()}") == ["joanna", "joanna"]


def test_irregular_groups_are_disjoint_lowercase_and_each_relates_its_forms():
    forms = [form for group in GROUPS for form in group]
    assert repeats(forms) == []  # a form in two groups would only ever find the first
    assert [g for g in GROUPS if len(g) < 2] == []
    assert [f for f in forms if f != f.lower()] == []
    for group in GROUPS:
        for form in group:
            assert search_lemmas.other_forms(form) == tuple(f for f in group if f != form)
