"""delete_session: files, index rows, tasks and checkpoint threads go; crash-safe; refused mid-commit."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from engine_helpers import GatedModel, assistant, user

from workmem.graphs.cli import main
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import CommitInProgress, SessionNotFound
from workmem.state.files.storage import CHECKPOINTS_FILE

TURNS = [user("The orchid named Zephyrine blooms in May."), assistant("Noted: Zephyrine blooms in May."),
         user("Water it weekly."), assistant("Weekly watering it is.")]


def thread_ids(root, db: str = CHECKPOINTS_FILE) -> set[str]:
    conn = sqlite3.connect(root / db)
    try:
        return {r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    finally:
        conn.close()


def index_rows(root, session_id: str) -> int:
    conn = sqlite3.connect(root / "index.sqlite")
    try:
        return conn.execute("SELECT COUNT(*) FROM fts_docs WHERE session_id = ?", [session_id]).fetchone()[0]
    finally:
        conn.close()


def committed(engine: WorkingMemoryEngine, session: str) -> None:
    engine.add_messages(session, TURNS)
    assert engine.commit(session, keep_recent_count=2)["status"] == "completed"


def test_delete_removes_files_rows_tasks_and_threads(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        committed(engine, "gone")
        committed(engine, "stays")
        gone_threads = {t["thread_id"] for t in engine.storage.tasks.list_tasks("gone")}
        assert gone_threads <= thread_ids(root) and index_rows(root, "gone") > 0

        assert engine.delete_session("gone") == {"deleted": True, "session_id": "gone"}

        assert not (root / "sessions" / "gone").exists()
        assert [p.name for p in (root / "sessions").iterdir()] == ["stays"], "no tombstone left"
        assert index_rows(root, "gone") == 0 and index_rows(root, "stays") > 0
        assert engine.storage.tasks.list_tasks("gone") == [] and engine.storage.tasks.lease_holder("gone") is None
        assert not gone_threads & thread_ids(root)
        with pytest.raises(SessionNotFound):
            engine.session_info("gone")
        assert engine.archive_search("stays", "Zephyrine")


def test_the_id_is_reusable_from_seq_1_even_by_a_store_that_knew_the_old_session(root):
    with WorkingMemoryEngine(root, durable=False) as engine, WorkingMemoryEngine(root, durable=False) as other:
        committed(engine, "again")
        other.add_messages("again", [user("other engine was here")])  # `other` caches the old session
        engine.delete_session("again")
        stored = other.add_messages("again", [user("a fresh start")])
        assert [m["seq"] for m in stored] == [1]
        assert [m["seq"] for m in engine.storage.sessions.live_messages("again")] == [1]
        assert engine.working_memory("again") is None and engine.archive_search("again", "Zephyrine") == []


def test_delete_is_refused_while_a_commit_holds_the_lease(root):
    model = GatedModel()
    with WorkingMemoryEngine(root, model=model, durable=False) as engine:
        engine.add_messages("busy", TURNS)
        engine.commit("busy", keep_recent_count=0, wait=False)
        assert model.entered.wait(20)
        with pytest.raises(CommitInProgress):
            engine.delete_session("busy")
        model.gate.set()
        engine.wait()
        assert engine.working_memory("busy") is not None, "nothing was deleted"
        engine.delete_session("busy")


def test_delete_of_an_unknown_session(root):
    with WorkingMemoryEngine(root, durable=False) as engine, pytest.raises(SessionNotFound):
        engine.delete_session("never")


def test_delete_removes_the_sessions_studio_threads(root):
    """A Studio run (the commit graph on studio.sqlite, as `langgraph dev` runs it) is deleted with its session."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from workmem.graphs.commit import build_commit_graph
    from workmem.nodes.context import CommitContext

    root.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(root / "studio.sqlite", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    graph = build_commit_graph(with_lease=True).compile(checkpointer=saver)
    graph.invoke({"session_id": "studio-s", "keep_recent_count": 0, "messages": TURNS},
                 {"configurable": {"thread_id": "studio-thread-1"}}, context=CommitContext(root=str(root)))
    conn.close()
    assert "studio-thread-1" in thread_ids(root, "studio.sqlite")
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.delete_session("studio-s")
    assert "studio-thread-1" not in thread_ids(root, "studio.sqlite")


KILL_MID_DELETE = textwrap.dedent("""
    import os, signal, sys
    from workmem.state.files.storage import FileStorage
    from workmem.graphs.engine import WorkingMemoryEngine
    FileStorage._finish_delete = lambda self, marker, tombstone: os.kill(os.getpid(), signal.SIGKILL)
    engine = WorkingMemoryEngine(sys.argv[1], durable=False)
    engine.delete_session("victim")
""")


@pytest.mark.slow
def test_a_delete_killed_after_its_tombstone_is_finished_by_the_next_engine(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        committed(engine, "victim")
    done = subprocess.run([sys.executable, "-c", KILL_MID_DELETE, str(root)], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    tombstones = [p for p in (root / "sessions").iterdir() if p.name.startswith(".deleted-")]
    assert len(tombstones) == 1 and not (root / "sessions" / "victim").exists()
    assert index_rows(root, "victim") > 0, "the kill came before the rows went"

    with WorkingMemoryEngine(root, durable=False) as engine:
        assert not any(p.name.startswith(".deleted-") for p in (root / "sessions").iterdir())
        assert index_rows(root, "victim") == 0 and engine.storage.tasks.list_tasks("victim") == []
        assert [m["seq"] for m in engine.add_messages("victim", [user("reborn")])] == [1]


@pytest.mark.slow
def test_finishing_an_old_delete_spares_a_new_session_with_the_same_id(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        committed(engine, "victim")
    assert subprocess.run([sys.executable, "-c", KILL_MID_DELETE, str(root)], timeout=120).returncode != 0
    # before any engine finishes the old delete, another process starts the session again and commits it
    store_only = textwrap.dedent("""
        import sys
        from workmem.state.storage import open_storage
        storage = open_storage(sys.argv[1], durable=False)
        storage.sessions.append("victim", [{"role": "user", "content": "The new orchid is Quillonia."},
                                           {"role": "assistant", "content": "Quillonia noted."}])
    """)
    assert subprocess.run([sys.executable, "-c", store_only, str(root)], timeout=120).returncode == 0
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.storage.sessions.live_messages("victim")] == [1, 2]
        assert engine.commit("victim", keep_recent_count=0)["status"] == "completed"
        assert engine.archive_search("victim", "Quillonia") and not engine.archive_search("victim", "Zephyrine")


def test_cli_delete_asks_for_yes(root, capsys):
    with WorkingMemoryEngine(root, durable=False) as engine:
        committed(engine, "cli-s")
    assert main(["--root", str(root), "delete", "cli-s"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert (root / "sessions" / "cli-s").exists()
    assert main(["--root", str(root), "delete", "cli-s", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": True, "session_id": "cli-s"}
    assert not (root / "sessions" / "cli-s").exists()
