"""fts_query: how a literal query becomes terms (runs, clitics, function words, substring indexes, stem prefixes)."""

from __future__ import annotations

import pytest

from workmem.state.search import fts_query


def words(query):
    return [t.words for t in fts_query.plan(query)]


@pytest.mark.parametrize(("query", "expected"), [
    ("What did Joanna's team win?", ["joanna", "team", "win"]),
    ("OPS-4242 isn't done", ["ops 4242", "done"]),
    ("they'll've", ["they"]),  # both clitics go; a lone function word is still searched
    ("the THE The", ["the"]),  # function words alone are searched, once
    ("Counter-Strike: Global", ["counter strike", "global"]),
    ("hello\x00world", ["hello world"]),
    ("日本語の検索", ["日本語の検索"]),
])
def test_terms_of_a_query(query, expected):
    assert words(query) == expected


def test_substring_indexes_follow_the_spec_rules():
    by_text = {t.text: t for t in fts_query.plan("src/app.py AI 数据库 ()) x")}
    assert by_text["src/app.py"].trigram and by_text["src/app.py"].porter
    assert by_text["AI"].scan and not by_text["AI"].trigram
    assert by_text["数据库"].trigram
    assert by_text["())"].trigram and not by_text["())"].porter
    assert by_text["x"].scan


def test_a_nul_never_reaches_an_fts_phrase_of_the_trigram_index():
    assert not any(t.trigram for t in fts_query.plan("a\x00b.py \x00\x00\x00"))


def test_at_most_max_terms():
    assert len(fts_query.plan(" ".join(f"word{n}" for n in range(100)))) == fts_query.MAX_TERMS


def test_fts_phrases_are_quoted_literally():
    assert fts_query.fts_phrase('say "hi"') == '"say ""hi"""'


@pytest.mark.parametrize(("stem", "prefix"), [("allergi", "alle"), ("injuri", "inju"), ("tournament", "tournam"),
                                              ("cat", None), ("hello", None)])
def test_stem_prefix(stem, prefix):
    assert fts_query.stem_prefix(stem) == prefix


def test_compound_spellings_split_a_word_but_not_an_endless_one():
    assert fts_query.compound_spellings("roadtrips") == ["roa dtrips", "road trips", "roadt rips", "roadtr ips"]
    assert fts_query.compound_spellings("road trips") == ["roadtrips"]
    assert fts_query.compound_spellings("a" * fts_query.COMPOUND_MAX) != []
    assert fts_query.compound_spellings("a" * (fts_query.COMPOUND_MAX + 1)) == []  # no 2,995 phrases
