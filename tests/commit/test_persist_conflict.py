"""A commit that lost its lease must never overwrite or re-index another commit's archive."""

from __future__ import annotations

import pytest

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput

TURNS = [{"role": "user", "content": f"alpha{i} request about the parser"} if i % 2 == 0
         else {"role": "assistant", "content": f"alpha{i} answer about the parser"} for i in range(8)]


def test_second_commit_reserving_a_taken_archive_id_fails_before_indexing(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", TURNS)
        first = engine.commit("s", keep_recent_count=0)
        assert first["archive_id"] == "archive_001"
        engine.add_messages("s", [{"role": "user", "content": "cherry newer request"},
                                  {"role": "assistant", "content": "cherry newer answer"}])
        before = engine.archive_search("s", "alpha3")
        assert before[0]["seq"] == 4 and "alpha3" not in " ".join(h["content"] for h in before[1:])

        # A commit that reserved archive_001 before losing its lease (e.g. a stalled Studio run).
        stale = engine.storage.tasks.create_task("s", task_id="stale-task", archive_id="archive_001",
                                         thread_id="s/commit/stale-task", status="running")
        result = engine.runner._invoke(stale["task_id"], stale["thread_id"], {
            "session_id": "s", "archive_id": "archive_001", "task_id": "stale-task", "keep_recent_count": 0},
            engine.runner._run_context())

        assert result["status"] == "failed" and "archive conflict" in result["reason"]
        assert engine.archive_search("s", "alpha3") == before  # the first commit's index is intact
        assert engine.archive_search("s", "cherry") == []  # live messages were not indexed as archived
        assert engine.storage.sessions.read_archive("s", "archive_001")["task_id"] == first["task_id"]
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [9, 10]
        assert engine.resume_all()[0]["status"] == "abandoned"  # its archive belongs to another commit
        assert engine.commit("s", keep_recent_count=0)["archive_id"] == "archive_002"


def test_bad_model_setting_fails_before_touching_disk(root, monkeypatch):
    monkeypatch.setenv("WORKMEM_MODEL", "bogus:thing")
    with pytest.raises(InvalidInput, match="WORKMEM_MODEL"):
        WorkingMemoryEngine(root)
    assert not root.exists()


def test_pre_prompt_count_beyond_the_messages_is_an_error(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(InvalidInput, match="pre_prompt_count"):
            engine.after_turn("s", TURNS[:2], pre_prompt_count=3)
        assert not engine.storage.sessions.session_exists("s")


def test_a_commit_whose_archive_is_complete_is_finished_not_abandoned(root, monkeypatch):
    """A commit failing after `.done` on every attempt (here: the index stays locked) is finished from
    its complete archive once its resumes are used up, so its messages never drop out of search."""
    import sqlite3

    from workmem.state.files.search_index import SearchIndex

    real = SearchIndex.index_messages

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", TURNS)
        monkeypatch.setattr(SearchIndex, "index_messages", locked)
        first = engine.commit("s", keep_recent_count=0)
        assert first["status"] == "failed" and (root / "sessions/s/history/archive_001/.done").exists()
        for attempt in range(1, 4):
            resumed = engine.resume_all()
            assert [r["status"] for r in resumed] == ["failed"], resumed
            assert engine.task(first["task_id"])["attempts"] == attempt
        monkeypatch.setattr(SearchIndex, "index_messages", real)

        assert [(r["status"], r["archive_id"]) for r in engine.resume_all()] == [("completed", "archive_001")]
        done = engine.task(first["task_id"])
        assert (done["status"], done["error"]) == ("completed", None)  # not the lock it got past
        after = engine.archive_search("s", "alpha3")
        assert after[0]["seq"] == 4 and len({h["seq"] for h in after}) == len(after)
        assert engine.storage.sessions.live_messages("s") == []
        assert engine.session_info("s")["last_archive"]["id"] == "archive_001"


def test_a_degraded_commit_finished_from_its_archive_says_why_it_degraded(root, monkeypatch, caplog):
    """The model refuses every chunk (the extractive model stands in), and indexing fails after `.done`: the
    resume that finishes it from its archive reports the degradation as the same commit run through does."""
    import itertools
    import logging
    import sqlite3

    from fakes import ScriptedToolModel

    from workmem.state.files.search_index import SearchIndex

    def refusing() -> ScriptedToolModel:
        return ScriptedToolModel(messages=itertools.repeat(ValueError("the request was refused by policy")))

    with WorkingMemoryEngine(root / "through", model=refusing(), durable=False) as engine:
        engine.add_messages("s", TURNS)
        through = engine.commit("s", keep_recent_count=0)
    assert through["degraded"] and "extractive model stood in" in through["reason"]

    real = SearchIndex.index_messages

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    cut = root / "cut"
    with (WorkingMemoryEngine(cut, model=refusing(), durable=False) as engine,
          caplog.at_level(logging.WARNING, "workmem")):
        engine.add_messages("s", TURNS)
        monkeypatch.setattr(SearchIndex, "index_messages", locked)
        first = engine.commit("s", keep_recent_count=0)
        assert first["status"] == "failed" and (cut / "sessions/s/history/archive_001/.done").exists()
        monkeypatch.setattr(SearchIndex, "index_messages", real)

        [resumed] = engine.resume_all()
        task = engine.task(first["task_id"])
        info = engine.session_info("s")
        archived = [m["seq"] for m in engine.storage.sessions.archive_messages("s", "archive_001")]
        live = engine.storage.sessions.live_messages("s")
    assert (resumed["status"], resumed["degraded"], resumed["reason"]) == ("completed", True, through["reason"])
    assert task["error"] == through["reason"] and task["result"]["degraded"] is True  # not the lock it got past
    assert info["last_degradation"]["reason"] == through["reason"]
    assert any("degraded" in r.getMessage() for r in caplog.records)
    assert archived == list(range(1, len(TURNS) + 1)) and live == []  # every message once, none lost
