"""The full-text index of archived messages: literal queries, ranking, bulk writes, reindex."""

from __future__ import annotations

import pytest
from fakes import stored_text
from oracles import source_turn_range

from workmem.state.errors import InvalidInput
from workmem.state.files.search_index import SearchIndex
from workmem.state.files.store import SessionStore


@pytest.fixture
def index(root):
    ix = SearchIndex(root)
    yield ix
    ix.close()


# -- search ------------------------------------------------------------------------------------------

CORPUS = [
    "We decided to use PostgreSQL for the orders database",
    "The regex was .*+?^${}()|[]\\\" and it broke the parser",
    "Edit state/store.py and call os.path.join there",
    "数据库迁移已经完成了",
    "Running the tests took too long",
    "The AI team meets on Mondays",
    "database migration finished without errors",
    "database database database everywhere",
    "nothing to see here",
]


@pytest.fixture
def searchable(index):
    index.index_messages("s", "archive_001", [stored_text(i + 1, t) for i, t in enumerate(CORPUS[:5])])
    index.index_messages("s", "archive_002", [stored_text(i + 6, t) for i, t in enumerate(CORPUS[5:])])
    index.index_messages("other", "archive_001", [stored_text(1, "database migration in another session")])
    return index


def seqs(hits):
    return [h["seq"] for h in hits]


def matches_then_neighbours(hits, expected):
    """The messages holding the query are all found, in this order, the first of them first; any other hit is
    a neighbour (≤ 3 messages away) of one of them — found through the neighbour window, never on its own."""
    found = seqs(hits)
    return (found[:1] == expected[:1] and [s for s in found if s in expected] == expected
            and all(min(abs(s - e) for e in expected) <= 3 for s in found if s not in expected))


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ('.*+?^${}()|[]\\"', 2),
        ("${}", 2),
        ("()", 2),
        ("state/store.py", 3),
        ("os.path.join", 3),
        ("store.py", 3),
        ("数据库", 4),
        ("迁移", 4),
        ("run", 5),  # porter: Running → run
        ("AI", 6),
        ("PostgreSQL", 1),
        ('"unbalanced', None),
        ("NEAR NOT", None),  # FTS operators are plain words here
        ("col:umn*", None),
    ],
)
def test_literal_queries(searchable, query, expected_first):
    hits = searchable.search("s", query)
    if expected_first is None:
        assert hits == []
    else:
        assert hits and hits[0]["seq"] == expected_first


def test_operators_are_words(searchable):
    assert set(seqs(searchable.search("s", "AND"))[:2]) == {2, 3}
    assert seqs(searchable.search("s", "PostgreSQL OR"))[0] == 1


def test_no_hit_is_an_empty_list(searchable):
    assert searchable.search("s", "zeppelin") == []
    assert searchable.search("s", "   ") == []
    assert searchable.search("nobody", "database") == []


def test_all_query_words_rank_first(searchable):
    hits = searchable.search("s", "database migration")
    assert hits[0]["seq"] == 7
    assert {1, 7, 8} <= set(seqs(hits)), "messages with only some of the words still match (OR)"


def test_newest_first_on_ties(index):
    index.index_messages("s", "archive_001", [stored_text(i, "same words here") for i in range(1, 6)])
    assert seqs(index.search("s", "words")) == [5, 4, 3, 2, 1]


def test_hit_shape_scope_and_limit(searchable, index):
    hit = searchable.search("s", "PostgreSQL")[0]
    assert hit == {"archive_id": "archive_001", "seq": 1, "turn_id": "t1", "role": "user", "content": CORPUS[0],
                   "match": "exact"}
    in_first = searchable.search("s", "database", archive_id="archive_001")
    assert seqs(in_first)[0] == 1 and {h["archive_id"] for h in in_first} == {"archive_001"}
    assert len(searchable.search("s", "the", limit=1)) == 1
    index.index_messages("s", "archive_003", [stored_text(20, "long " * 1000)])
    assert len(index.search("s", "long")[0]["content"]) <= 1500


@pytest.mark.parametrize(("kwargs", "field"), [({"query": 3}, "query"), ({"limit": 0}, "limit"),
                                               ({"limit": True}, "limit"), ({"archive_id": "x"}, "archive_id")])
def test_bad_search_input(searchable, kwargs, field):
    args = {"session_id": "s", "query": "database", **kwargs}
    with pytest.raises(InvalidInput) as err:
        searchable.search(**args)
    assert err.value.field == field


def test_index_messages_is_idempotent_per_archive(searchable):
    before = searchable.db.execute("SELECT COUNT(*) FROM fts_words").fetchone()[0]
    searchable.index_messages("s", "archive_001", [stored_text(i + 1, t) for i, t in enumerate(CORPUS[:5])])
    assert searchable.db.execute("SELECT COUNT(*) FROM fts_words").fetchone()[0] == before
    searchable.index_messages("s", "archive_001", [stored_text(1, "replaced text")])
    assert seqs(searchable.search("s", "PostgreSQL")) == []
    assert seqs(searchable.search("s", "replaced")) == [1]


def test_bulk_index_commits_in_batches(index):
    messages = [stored_text(i, f"message {i} about item{i % 7}") for i in range(1, 2502)]
    assert index.index_messages("s", "archive_001", messages) == 2501
    assert index.db.execute("SELECT COUNT(*) FROM fts_trigram").fetchone()[0] == 2501
    assert seqs(index.search("s", "item3", limit=3)) == [2495, 2488, 2481]


def test_tool_calls_and_results_are_searchable(index):
    msg = {**stored_text(1, ""), "role": "assistant", "parts": [
        {"type": "tool_call", "id": "c", "name": "read_file", "arguments": {"path": "src/app/main.go"}}]}
    index.index_messages("s", "archive_001", [msg])
    assert seqs(index.search("s", "src/app/main.go")) == [1]
    assert seqs(index.search("s", "read_file")) == [1]


FOLDING = ["ÉCOLE normale supérieure", "ΣΟΦΙΑ data set", "Ärger mit dem Parser", "see docs/RÉSUMÉ.md first",
           "plain ascii text"]


@pytest.fixture
def folding(index):
    index.index_messages("s", "archive_001", [stored_text(i + 1, t) for i, t in enumerate(FOLDING[:3])])
    index.index_messages("s", "archive_002", [stored_text(i + 4, t) for i, t in enumerate(FOLDING[3:])])
    index.index_messages("other", "archive_001", [stored_text(1, "ÉCOLE in another session")])
    return index


@pytest.mark.parametrize(("query", "expected"), [
    ("ÉC", [1]), ("éc", [1]), ("Éc", [1]), ("σο", [2]), ("ΣΟ", [2]), ("φ", [2]), ("är", [3]), ("ÄR", [3]),
    ("É", [4, 1]), ("é", [4, 1]), ("ÉCOLE é", [1, 4]),
])
def test_short_non_ascii_terms_ignore_case(folding, query, expected):
    """1–2-character terms are matched by a scan; SQLite's lower() folds ASCII only, the scan must not."""
    assert matches_then_neighbours(folding.search("s", query), expected)


def test_short_term_scan_keeps_its_scope_and_ascii_terms(folding):
    assert seqs(folding.search("s", "éc", archive_id="archive_002")) == []
    assert seqs(folding.search("s", "é", archive_id="archive_002")) == [4]
    assert seqs(folding.search("other", "éc")) == [1]
    assert seqs(folding.search("s", "CO")) == [1]  # ASCII terms: ASCII letters of mixed text still fold
    assert seqs(folding.search("s", "AS")) == [5]


@pytest.mark.parametrize("query", ["sumé.md", "SUMÉ.MD", "docs/résumé", "DOCS/RÉSUMÉ.MD"])
def test_trigram_substrings_ignore_non_ascii_case(folding, query):
    """Dotted/slashed terms go to the trigram index, whose tokenizer folds case beyond ASCII."""
    assert matches_then_neighbours(folding.search("s", query), [4])


def test_reindex_rebuilds_from_complete_archives_only(root, index):
    store = SessionStore(root, durable=False)
    store.append("s", [{"role": "user", "content": f"topic number {i} kiwi"} for i in range(10)])
    live = store.live_messages("s")
    archive = {"archive_id": "archive_001", "session_id": "s", "source_turn_range": source_turn_range(live[:6])}
    store.write_archive("s", archive, live[:6], "# WM", "abstract")
    store.record_commit("s", archive, 4)
    half = store.session_dir("s") / "history" / "archive_002"
    half.mkdir()
    (half / "messages.jsonl").write_text("{}\n")  # no .done: not an archive
    index.index_messages("s", "archive_009", [stored_text(1, "stale row kiwi")])
    assert index.reindex(store) == 6
    assert seqs(index.search("s", "kiwi", limit=20)) == [6, 5, 4, 3, 2, 1]
    assert index.reindex(store, session_id="s") == 6
    assert len(index.search("s", "kiwi", limit=20)) == 6


def test_a_word_found_almost_everywhere_takes_its_newest_matches(index, monkeypatch):
    """Past COMMON_TERM_DOCS matches a word only contributes its newest PER_TERM_HITS candidates, so a
    query of common words stays cheap; a rare word next to it still ranks its message first."""
    import workmem.state.search.search_terms as terms

    monkeypatch.setattr(terms, "COMMON_TERM_DOCS", 5)
    monkeypatch.setattr(terms, "PER_TERM_HITS", 3)
    messages = [stored_text(i, f"deploy log line {i}") for i in range(1, 21)]
    messages[1] = stored_text(2, "deploy log line 2 mentions zebrafish")
    index.index_messages("s", "archive_001", messages)

    assert seqs(index.search("s", "deploy")) == [20, 19, 18]  # common: its newest three only
    assert seqs(index.search("s", "zebrafish deploy"))[0] == 2  # the rare word still finds its message
    assert seqs(index.search("s", "line 7"))[:2] == [7, 17]  # both words first; "7" keeps its substring scan


def _index_in_child(root, barrier) -> None:
    messages = [stored_text(seq, f"entry {seq} of a long archive") for seq in range(1, 12_001)]
    index = SearchIndex(root)
    barrier.wait()
    index.index_messages("s", "archive_001", messages)
    index.close()


def test_two_indexers_of_one_archive_at_once_leave_each_message_once(root):
    """Indexing commits every ≤ 1 000 rows, so two processes indexing one archive (a commit and
    `workmem reindex`, or two reindexes) interleave their batches; each seq must still be in once."""
    import multiprocessing

    SearchIndex(root).index_messages("s", "archive_001", [stored_text(1, "warm up")])  # schema ready before the race
    context = multiprocessing.get_context("spawn")
    for _ in range(3):
        barrier = context.Barrier(2)
        children = [context.Process(target=_index_in_child, args=(root, barrier)) for _ in range(2)]
        for child in children:
            child.start()
        for child in children:
            child.join(60)
        assert [child.exitcode for child in children] == [0, 0]
        index = SearchIndex(root)
        rows = index.db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT seq) FROM fts_docs WHERE archive_id = 'archive_001'").fetchone()
        words = index.db.execute("SELECT COUNT(*) FROM fts_words").fetchone()[0]
        index.close()
        assert rows == (12_000, 12_000) and words == 12_000


def test_schema(index):
    sql = {name: text for name, text in index.db.execute("SELECT name, sql FROM sqlite_master")}
    assert "tokenize='porter unicode61'" in sql["fts_words"]
    assert "tokenize='trigram'" in sql["fts_trigram"]
    assert "session_id UNINDEXED" in sql["fts_words"]
