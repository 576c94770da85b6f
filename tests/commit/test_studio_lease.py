"""The Studio commit graph's `take_lease` adds its input messages once, even when its step is re-executed."""

from __future__ import annotations

import sqlite3

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.commit import build_commit_graph
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.context import CommitContext, CommitNodeFailed
from workmem.state.files.tasks import TaskStore

INPUT = [{"role": "user", "content": "q1 about the parser"}, {"role": "assistant", "content": "a1"},
         {"role": "user", "content": "q2 about the tests"}, {"role": "assistant", "content": "a2"}]


def all_texts(engine: WorkingMemoryEngine, session: str) -> list[str]:
    archived = [m for a in engine.storage.sessions.list_archives(session)
                for m in engine.storage.sessions.archive_messages(session, a["archive_id"])]
    return [m["parts"][0]["text"] for m in archived + engine.storage.sessions.live_messages(session)]


@pytest.fixture
def lease_fails_once(monkeypatch):
    """The first lease attempt fails after `take_lease` has appended its input (a locked index)."""
    real, calls = TaskStore.acquire_lease, {"n": 0}

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise sqlite3.OperationalError("database is locked")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TaskStore, "acquire_lease", flaky)


@pytest.mark.parametrize("archived_meanwhile", [False, True], ids=["still_live", "archived_before_retry"])
def test_a_re_executed_prepare_adds_its_input_once(root, lease_fails_once, archived_meanwhile):
    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    config, context = {"configurable": {"thread_id": "studio-1"}}, CommitContext(root=str(root))
    with pytest.raises(CommitNodeFailed, match="database is locked"):  # the node error, redacted
        graph.invoke({"session_id": "s", "keep_recent_count": 0, "messages": INPUT}, config, context=context)
    with WorkingMemoryEngine(root, durable=False) as engine:
        if archived_meanwhile:
            assert engine.commit("s", keep_recent_count=0)["status"] == "completed"

        out = graph.invoke(None, config, context=context)

        assert out["status"] in ("completed", "skipped")
        assert all_texts(engine, "s") == [m["content"] for m in INPUT]


def test_two_runs_with_the_same_messages_add_them_twice(root):
    """Idempotency is per step, not per content: sending the same messages again is a new turn."""
    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    context = CommitContext(root=str(root))
    for _ in range(2):
        graph.invoke({"session_id": "s", "keep_recent_count": 10, "messages": INPUT[:2]},
                     {"configurable": {"thread_id": "studio-2"}}, context=context)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert all_texts(engine, "s") == ["q1 about the parser", "a1"] * 2


def test_a_second_run_on_a_reused_thread_reports_only_itself(root):
    """Per-run outputs reset: the route is this run's, and a run with nothing to commit has no archive id."""
    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    config, context = {"configurable": {"thread_id": "studio-3"}}, CommitContext(root=str(root))
    first = graph.invoke({"session_id": "s", "keep_recent_count": 0, "messages": INPUT}, config, context=context)
    assert first["status"] == "completed" and first["archive_id"] == "archive_001"
    second = graph.invoke({"session_id": "s", "keep_recent_count": 0}, config, context=context)
    assert second["status"] == "skipped"
    assert second["route"] == ["take_lease", "slice_turns", "report", "release_lease"]
    assert not second.get("archive_id") and not second.get("working_memory")
    assert not second.get("guard_notes") and not second.get("usage", {}).get("calls")
