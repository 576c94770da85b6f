"""archive_search through the engine: literal queries, substring cases, ranking, limits, archive scope."""

from __future__ import annotations

import pytest
from engine_helpers import assistant, user

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import ArchiveNotFound

SYMBOLS = '.*+?^${}()|[]\\"'
FIRST = [
    user("Which regex guards the input?"),
    assistant(f"The guard pattern is literally {SYMBOLS} and nothing else."),
    user("我们决定把数据库迁移到 PostgreSQL 16。"),
    assistant("好的，迁移计划已记录。"),
    user("Edit src/workmem/state.py and call langchain.agents.create_agent there."),
    assistant("Done, src/workmem/state.py now imports it."),
    user("The database is slow today."),
    assistant("Database database database: the database needs an index."),
    user("Write the migration notes."),
    assistant("The database migration rollback plan is in docs/rollback.md."),
    user("A rollback happened last night."),
    assistant("Noted."),
]
SECOND = [
    user("Which database do the reports read?"),
    assistant("The reports read the analytics database replica."),
    user("Remember the deploy window."),
    assistant("Deploys happen on Tuesdays at 10 AM."),
]


@pytest.fixture
def engine(root):
    with WorkingMemoryEngine(root, durable=False) as eng:
        eng.add_messages("s", FIRST)
        assert eng.commit("s", keep_recent_count=0)["archive_id"] == "archive_001"
        eng.add_messages("s", [*SECOND, user("Live only: the zanzibar note is not archived yet.")])
        assert eng.commit("s", keep_recent_count=1)["archive_id"] == "archive_002"
        yield eng


def contents(hits: list[dict]) -> list[str]:
    return [h["content"] for h in hits]


def test_regex_and_fts_syntax_characters_are_literal(engine):
    hits = engine.archive_search("s", SYMBOLS)
    assert hits and SYMBOLS in hits[0]["content"]
    for query in ('"unbalanced', "foo(", "a AND b OR NOT c", "NEAR(x y)", "col:value", "*", "^", "-x"):
        assert isinstance(engine.archive_search("s", query), list)  # never a syntax error


def test_cjk_queries_find_substrings(engine):
    assert contents(engine.archive_search("s", "数据库"))[0] == "我们决定把数据库迁移到 PostgreSQL 16。"
    two_chars = contents(engine.archive_search("s", "迁移"))
    assert set(two_chars[:2]) == {"我们决定把数据库迁移到 PostgreSQL 16。", "好的，迁移计划已记录。"}


@pytest.mark.parametrize("identifier", ["src/workmem/state.py", "langchain.agents.create_agent", "docs/rollback.md"])
def test_identifiers_with_dots_and_slashes(engine, identifier):
    hits = engine.archive_search("s", identifier)
    assert hits and identifier in hits[0]["content"]


def test_no_match_is_an_empty_list(engine):
    assert engine.archive_search("s", "xylophone-unicorn-qqq") == []
    assert engine.archive_search("s", "zanzibar") == [], "live messages are not in the archive"


def test_the_message_with_every_query_word_ranks_first(engine):
    hits = engine.archive_search("s", "database migration rollback")
    assert hits[0]["content"] == "The database migration rollback plan is in docs/rollback.md."
    assert len(hits) > 3, "messages with only some of the words still match (OR)"


def test_hit_fields_and_restriction_to_one_archive(engine):
    everywhere = engine.archive_search("s", "database")
    assert {h["archive_id"] for h in everywhere} == {"archive_001", "archive_002"}
    hit = everywhere[0]
    assert set(hit) == {"archive_id", "seq", "turn_id", "role", "content", "match"}
    assert hit["role"] in ("user", "assistant") and hit["turn_id"].startswith("t")
    only_second = engine.archive_search("s", "database", archive_id="archive_002")
    assert only_second and {h["archive_id"] for h in only_second} == {"archive_002"}
    assert {h["archive_id"] for h in engine.archive_search("s", "database", archive_id="archive_001")} == {
        "archive_001"}


@pytest.mark.parametrize("archive_id", ["archive_009", "archive_000", "bogus"])
def test_unknown_archive_names_it(engine, archive_id):
    with pytest.raises(ArchiveNotFound) as err:
        engine.archive_search("s", "database", archive_id=archive_id)
    assert archive_id in str(err.value)


def test_at_most_twelve_hits_of_at_most_1500_characters(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("many", [user(f"widget report number {i}") for i in range(30)])
        engine.add_messages("many", [assistant("widget " + "lorem ipsum " * 600)])
        engine.commit("many", keep_recent_count=0)
        hits = engine.archive_search("many", "widget")
        assert len(hits) == 12
        assert all(len(h["content"]) <= 1500 for h in hits)
        long_hit = engine.archive_search("many", "lorem")[0]
        assert 1400 < len(long_hit["content"]) <= 1500


def test_ties_go_to_the_newest_message(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("ties", [user("same words here"), assistant("ok"), user("same words here")])
        engine.commit("ties", keep_recent_count=0)
        assert [h["seq"] for h in engine.archive_search("ties", "same words")][:2] == [3, 1]


def test_search_survives_a_restart_and_a_reindex(root, engine):
    expected = engine.archive_search("s", "database migration rollback")
    with WorkingMemoryEngine(root, durable=False) as again:
        assert again.archive_search("s", "database migration rollback") == expected
        again.storage.search.reindex(again.storage.sessions)
        assert again.archive_search("s", "database migration rollback") == expected
