"""Ranking properties of archive search on small corpora of our own: literal safety with
control characters, neighbour hits, rare words over common ones, full questions, stems, scopes, upgrades."""

from __future__ import annotations

import sqlite3

import pytest
from fakes import stored_text

from workmem.state.files.search_index import SearchIndex


@pytest.fixture
def index(root):
    ix = SearchIndex(root)
    yield ix
    ix.close()


def seqs(hits):
    return [h["seq"] for h in hits]


def add(index, texts, archive="archive_001", session="s", first=1):
    index.index_messages(session, archive, [stored_text(first + i, t) for i, t in enumerate(texts)])


FILLER = [f"Filler line number {n} about the weather and the weekend plans." for n in range(40)]


# -- literal safety ------------------------------------------------------------------------------------

HOSTILE = ["\x00", "a\x00b", "\x00\x00\x00", "hello\x00", '"\x00"', "x\x00.py", "\x00/\x00", "日本\x00語", "\x01",
           "\x1f\x1e", "\x7f", "\x1b[31m", "\u2028", "\ufeff", "tab\tand\nnewline", "NEAR(a b)", "a OR b NOT c",
           "col:value", "*", "^start", '"', '""', "'", "(", ")", "{x}", "-x", "+x", "a*b", "\\", "%_", "…"]


@pytest.mark.parametrize("query", HOSTILE)
def test_control_characters_and_syntax_are_literal_text(index, query):
    add(index, ["hello world", "foo\x00bar baz", "plain text"])
    assert isinstance(index.search("s", query), list)  # never an sqlite error


def test_nul_and_control_characters_only_separate_words(index):
    add(index, ["the zeppelin landed", *FILLER[:5], "foo\x00bar baz"])
    assert seqs(index.search("s", "zeppelin\x00landed"))[0] == 1
    assert seqs(index.search("s", "zeppelin\x01"))[0] == 1
    assert seqs(index.search("s", "foo\x00bar"))[0] == 7
    assert seqs(index.search("s", "\x00"))[0] == 7  # a lone NUL is literal: the message holding one


# -- the neighbour window ------------------------------------------------------------------------------

def test_the_reply_next_to_a_matching_question_is_a_hit(index):
    add(index, [*FILLER[:10], "Which marmalade recipe did your grandmother use?", "Seville oranges and brown sugar.",
                *FILLER[10:20]])
    hits = seqs(index.search("s", "marmalade recipe"))
    assert hits[:2] == [11, 12]  # the match, then its reply (which holds none of the words)
    assert all(abs(s - 11) <= 3 for s in hits), "nothing unrelated: only the match and its neighbours"


def test_a_direct_match_outranks_a_neighbour_of_the_same_word(index):
    add(index, [*FILLER[:5], "We talked about marmalade.", "Nice.", *FILLER[5:15], "Marmalade again, orange this time.",
                *FILLER[15:20]])
    hits = seqs(index.search("s", "marmalade"))
    assert set(hits[:2]) == {6, 18}
    assert 7 in hits  # the reply is still found, below both matches


def test_neighbours_stay_inside_the_searched_archive(index):
    add(index, [*FILLER[:3], "the last line mentions quinoa"], archive="archive_001")
    add(index, ["first line of the next archive", *FILLER[3:6]], archive="archive_002", first=5)
    assert 5 in seqs(index.search("s", "quinoa"))  # the session: the next archive's first line is a neighbour
    scoped = index.search("s", "quinoa", archive_id="archive_001")
    assert seqs(scoped)[0] == 4 and 5 not in seqs(scoped)
    assert {h["archive_id"] for h in scoped} == {"archive_001"}


def test_no_match_means_no_neighbours(index):
    add(index, FILLER[:10])
    assert index.search("s", "xylophone") == []


# -- weighting -----------------------------------------------------------------------------------------

def test_a_rare_word_outweighs_a_common_one(index):
    texts = [f"Fish tank log {n}: the fish look fine." for n in range(30)]
    texts[7] = "The zebra danio is new in the tank."
    add(index, texts)
    assert seqs(index.search("s", "zebra fish"))[0] == 8


def test_function_words_of_a_full_question_do_not_outweigh_its_content(index):
    texts = [f"What did we do when it was done? Did you see what they did there, {n}?" for n in range(20)]
    texts[12] = "The lighthouse budget was approved at forty thousand."
    add(index, texts)
    assert seqs(index.search("s", "What did they decide about the lighthouse budget?"))[0] == 13


def test_a_query_of_function_words_alone_still_searches_them(index):
    add(index, ["what is this", *FILLER[:3]])
    assert seqs(index.search("s", "what"))[0] == 1


def test_possessives_and_contractions_find_the_bare_word(index):
    add(index, ["Marguerite sent the drafts", *FILLER[:6], "Nothing from anyone"])
    assert seqs(index.search("s", "Marguerite's drafts?"))[0] == 1
    assert seqs(index.search("s", "drafts didn't"))[0] == 1


def test_a_stem_relative_is_found_below_the_exact_word(index):
    add(index, [*FILLER[:8], "I found out I am allergic to cats.", *FILLER[8:16], "Spring allergies are the worst.",
                *FILLER[16:24]])
    hits = seqs(index.search("s", "allergies"))
    assert hits[0] == 18
    assert 9 in hits  # `allergic` shares the stem's prefix


def test_longer_messages_win_a_tie_of_words(index):
    add(index, [*FILLER[:10], "Kayak.", "The kayak trip went down the river past the old mill and the bridge.",
                *FILLER[10:20]])
    assert seqs(index.search("s", "kayak"))[0] == 12


def test_ties_go_to_the_newest_message(index):
    add(index, ["same words here"] * 5)
    assert seqs(index.search("s", "words")) == [5, 4, 3, 2, 1]


# -- upgrades ------------------------------------------------------------------------------------------

def _old_shape_index(root):
    root.mkdir(parents=True)
    conn = sqlite3.connect(root / "index.sqlite")
    columns = "session_id UNINDEXED, archive_id UNINDEXED, seq UNINDEXED, turn_id UNINDEXED, role UNINDEXED, content"
    conn.executescript(f"""
        CREATE TABLE fts_docs (rowid INTEGER PRIMARY KEY, session_id TEXT NOT NULL, archive_id TEXT NOT NULL,
                               seq INTEGER NOT NULL);
        CREATE INDEX fts_docs_by_archive ON fts_docs(session_id, archive_id, seq);
        CREATE VIRTUAL TABLE fts_words USING fts5({columns}, tokenize='porter unicode61');
        CREATE VIRTUAL TABLE fts_trigram USING fts5({columns}, tokenize='trigram');
    """)
    for rowid, text in enumerate(["old row about pelicans", "another old row", "third"], 1):
        conn.execute("INSERT INTO fts_docs VALUES (?, 's', 'archive_001', ?)", [rowid, rowid])
        for table in ("fts_words", "fts_trigram"):
            conn.execute(f"INSERT INTO {table} (rowid, session_id, archive_id, seq, turn_id, role, content) "
                         "VALUES (?, 's', 'archive_001', ?, '', 'user', ?)", [rowid, rowid, text])
    conn.commit()
    conn.close()


def test_an_index_built_before_the_ranking_columns_is_upgraded_in_place(root):
    _old_shape_index(root)
    index = SearchIndex(root)
    try:
        assert seqs(index.search("s", "pelicans"))[0] == 1  # NULL lengths rank as average ones
        add(index, ["new row about pelicans and herons"], archive="archive_002", first=4)
        assert set(seqs(index.search("s", "pelicans"))[:2]) == {1, 4}
        columns = {row[1] for row in index.db.execute("PRAGMA table_info(fts_docs)")}
        assert {"length", "asks"} <= columns
    finally:
        index.close()


def test_a_read_only_index_of_the_old_shape_still_searches(root, monkeypatch):
    """A read-only root leaves reads working — the upgrade cannot run, temp stand-ins fill in."""
    import workmem.state.files.sqlite as sqlite_module

    _old_shape_index(root)
    opened = sqlite_module.connect

    def read_only(path, **kwargs):
        conn = opened(path, **kwargs)
        conn.close()
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None)

    monkeypatch.setattr(sqlite_module, "connect", read_only)
    index = SearchIndex(root)
    try:
        assert seqs(index.search("s", "pelicans"))[0] == 1
        assert seqs(index.search("s", "pelican's rows"))[0] == 1
    finally:
        index.close()
