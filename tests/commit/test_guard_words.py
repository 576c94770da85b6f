"""nodes/guard_words.py: the guard and dedupe tables are well formed and every entry does what its table is for."""

from __future__ import annotations

import pytest
from word_tables import repeats, tables

from workmem.nodes import guard_words as words
from workmem.nodes.dedupe import dedupe_items
from workmem.nodes.extractive.artifacts import paths_in
from workmem.nodes.guards import lexical_anchors, meaningful_words, path_tokens
from workmem.state.search.words import MONTH_NAMES

TABLES = tables(words)


def test_the_tables_are_read():
    assert set(TABLES) == {"TITLE_STOPWORDS", "ANCHOR_STOPWORDS", "ANCHOR_UNITS", "ANCHOR_DECISION_WORDS",
                           "PATH_EXTENSIONS", "REVERSAL_WORDS"}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_table_repeats_an_entry(name):
    assert repeats(TABLES[name]) == []


@pytest.mark.parametrize("name", sorted(TABLES))
def test_entries_are_lowercase_single_words(name):
    """The guards and the dedupe compare lowercased words: a capital or a space would never match."""
    assert [e for e in TABLES[name] if e != e.lower() or len(e.split()) != 1] == []


@pytest.mark.parametrize("word", sorted(words.TITLE_STOPWORDS))
def test_a_title_stopword_is_no_meaningful_word(word):
    assert meaningful_words(f"{word.capitalize()} {word.upper()}") == set()
    assert meaningful_words(f"{word} parser") == {"parser"}


@pytest.mark.parametrize("word", sorted(words.ANCHOR_STOPWORDS))
def test_a_capitalised_anchor_stopword_is_no_anchor(word):
    assert lexical_anchors(f"{word.capitalize()} Redis") == {"redis"}


@pytest.mark.parametrize("unit", words.ANCHOR_UNITS)
def test_every_unit_makes_a_counted_anchor(unit):
    assert lexical_anchors(f"we drove 12 {unit} and then 2.5 {unit}") == {f"12 {unit}", f"2.5 {unit}"}
    assert f"12 {unit}" in lexical_anchors(f"we drove 12 {unit.upper()}")  # units match in any case


@pytest.mark.parametrize("word", words.ANCHOR_DECISION_WORDS)
def test_every_decision_word_is_an_anchor_in_any_case(word):
    assert lexical_anchors(f"so we {word} it") == lexical_anchors(f"so we {word.upper()} it") == {word}


@pytest.mark.parametrize("month", MONTH_NAMES)
def test_every_month_makes_a_date_anchor(month):
    assert f"15 {month} 2024" in lexical_anchors(f"moved on 15 {month.upper()} 2024")


@pytest.mark.parametrize("ext", words.PATH_EXTENSIONS)
def test_every_extension_makes_a_path_for_the_guard_and_the_extractive_model(ext):
    assert path_tokens(f"see Main.{ext.upper()}, then") == {f"main.{ext}"}
    assert paths_in(f"see main.{ext}, then") == [f"main.{ext}"]
    assert path_tokens(f"see main.{ext}9") == set()  # the extension ends the token


@pytest.mark.parametrize("word", sorted(words.REVERSAL_WORDS))
def test_a_reversal_word_keeps_the_new_item(word):
    assert dedupe_items([f"{word} using Redis for sessions"], ["Using Redis for sessions"]) == [
        "Using Redis for sessions"]
    assert dedupe_items([f"{word.capitalize()}: using Redis for sessions"], ["Using Redis for sessions"]) == [
        "Using Redis for sessions"]
