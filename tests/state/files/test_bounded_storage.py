"""Bounded footprint: pruned checkpoint threads, archive.json without WM copies, first-build roots,
Key Facts spill after the sentinel stood through two commits."""

from __future__ import annotations

import json
import sqlite3
import tarfile
from pathlib import Path

import pytest
from engine_helpers import assistant, user
from fakes import create_call, scripted, valid_update_call
from paths import FIXTURES

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.memory import CONSOLIDATION_SENTINEL, SECTIONS, bullet_items, parse_sections, read_pointer

FACTS = "Key Facts & Decisions"


def completed_threads(root: Path) -> set[str]:
    conn = sqlite3.connect(root / "checkpoints.sqlite")
    try:
        return {r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    finally:
        conn.close()


def turn(i: int) -> list[dict]:
    return [user(f"Step {i}: rename module_{i}.py on 2024-05-{i % 28 + 1:02d}."), assistant(f"Renamed module_{i}.py.")]


def test_pruning_keeps_exactly_the_newest_completed_threads_and_every_failed_one(root, monkeypatch):
    with WorkingMemoryEngine(root, durable=False, keep_checkpoints=3) as engine:
        for i in range(6):
            engine.add_messages("s", turn(i))
            assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        tasks = engine.storage.tasks.list_tasks("s")
        kept = {t["thread_id"] for t in tasks if t["thread_id"]}
        assert len(kept) == 3 and kept == completed_threads(root)
        assert kept == {t["thread_id"] for t in tasks[-3:]}, "the newest three"

        import workmem.graphs.commit
        real = workmem.graphs.commit.merge
        monkeypatch.setattr(workmem.graphs.commit, "merge", lambda state: (_ for _ in ()).throw(OSError("disk")))
    with WorkingMemoryEngine(root, durable=False, keep_checkpoints=3) as engine:
        engine.add_messages("s", turn(6))
        failed = engine.commit("s", keep_recent_count=0)
        assert failed["status"] == "failed"
        monkeypatch.setattr(workmem.graphs.commit, "merge", real)
    with WorkingMemoryEngine(root, durable=False, keep_checkpoints=3) as engine:
        engine.add_messages("t", turn(7))
        for _ in range(3):  # other commits complete and prune; the failed thread stays resumable
            assert engine.commit("t", keep_recent_count=0)["status"] in ("completed", "skipped")
            engine.add_messages("t", turn(8))
        assert engine.task(failed["task_id"])["thread_id"] in completed_threads(root)
        resumed = engine.resume_all()
        assert [(r["task_id"], r["status"]) for r in resumed] == [(failed["task_id"], "completed")]
        live_threads = {t["thread_id"] for t in engine.storage.tasks.list_tasks() if t["thread_id"]}
        assert len(live_threads) == 3 and live_threads == completed_threads(root)


def _pragma(root: Path, name: str) -> int:
    conn = sqlite3.connect(root / "checkpoints.sqlite")
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def _stored_texts(engine: WorkingMemoryEngine, session: str) -> list[str]:
    return [m["parts"][0]["text"] for m in engine.iter_messages(session)]


def _commit_turns(root: Path, turns: int) -> None:
    """Commit `turns` turns one by one, keeping one checkpoint thread: each commit prunes the one before."""
    with WorkingMemoryEngine(root, durable=False, keep_checkpoints=1) as engine:
        for i in range(turns):
            engine.add_messages("s", turn(i))
            assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert len(completed_threads(root)) == 1


def test_pruned_threads_give_their_pages_back(root):
    _commit_turns(root, 6)
    assert _pragma(root, "auto_vacuum") == 2, "a new checkpoints.sqlite is created with incremental auto-vacuum"
    assert _pragma(root, "freelist_count") == 0, "the five pruned threads left no free pages behind"


def test_a_checkpoint_file_without_auto_vacuum_still_prunes(root):
    root.mkdir(parents=True, exist_ok=True)
    sqlite3.connect(root / "checkpoints.sqlite").execute("CREATE TABLE older_build(x)").connection.close()
    _commit_turns(root, 3)
    assert _pragma(root, "auto_vacuum") == 0, "an existing file keeps its setting (only VACUUM could change it)"


def test_opening_an_existing_checkpoint_file_writes_nothing(root):
    from workmem.state.files.sqlite import connect

    path = root / "checkpoints.sqlite"
    first = connect(path, synchronous="NORMAL", auto_vacuum="INCREMENTAL")
    first.execute("CREATE TABLE checkpoints(x)")
    first.commit()
    first.close()  # the last connection: the write-ahead log is checkpointed and removed
    again = connect(path, synchronous="NORMAL", auto_vacuum="INCREMENTAL")
    try:
        assert again.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        wal = path.with_name(path.name + "-wal")
        assert not wal.exists() or wal.stat().st_size == 0, "re-setting auto_vacuum would take the write lock"
    finally:
        again.close()


def test_a_failing_page_reclaim_leaves_the_commit_and_every_message_intact(root, monkeypatch, caplog):
    def full_disk(real, script):  # what `CheckedConnection` raises for SQLite's SQLITE_FULL: a StorageError
        raise real._translated(sqlite3.OperationalError("database or disk is full"))

    with WorkingMemoryEngine(root, durable=False, keep_checkpoints=1) as engine:
        engine.add_messages("s", turn(0))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        saver = engine.storage.checkpointer()
        real = saver.conn
        monkeypatch.setattr(saver, "conn", _Proxy(real, full_disk))
        engine.add_messages("s", turn(1))
        with caplog.at_level("WARNING", logger="workmem.checkpoints"):
            assert engine.commit("s", keep_recent_count=0)["status"] == "completed", "the prune's reclaim failed"
        assert "freeing the pages" in caplog.text
        assert len(completed_threads(root)) == 1, "the thread was still deleted"
        monkeypatch.setattr(saver, "conn", real)
        engine.add_messages("s", turn(2))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert [t["status"] for t in engine.storage.tasks.list_tasks("s")] == ["completed"] * 3
        texts = _stored_texts(engine, "s")
        assert texts == [m["content"] for i in range(3) for m in turn(i)], "every message once, in order"


class _Proxy:
    """A connection whose `executescript` is replaced; everything else goes to the real one."""

    def __init__(self, real: sqlite3.Connection, executescript) -> None:
        self._real, self._script = real, executescript

    def executescript(self, script: str):
        return self._script(self._real, script)

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def test_archive_json_holds_no_copy_of_the_working_memory(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", turn(1) + turn(2))
        engine.commit("s", keep_recent_count=0)
        on_disk = json.loads((root / "sessions/s/history/archive_001/archive.json").read_text())
        wm = (root / "sessions/s/history/archive_001/.overview.md").read_text()
        assert on_disk["format"] == 2
        assert on_disk["working_summary"]["overview"] == ".overview.md" and "markdown" not in on_disk["working_summary"]
        assert wm not in json.dumps(on_disk, ensure_ascii=False)
        assert set(on_disk["working_summary"]["section_tokens"]) == {
            "session_title", "current_state", "task_and_goals", "key_facts_and_decisions", "files_and_context",
            "errors_and_corrections", "open_issues"}
        shown = engine.working_memory("s")
        assert shown["working_summary"]["markdown"] == wm
        assert shown["working_summary"]["sections"]["session_title"] == parse_sections(wm)["Session Title"]


@pytest.fixture
def first_build_root(tmp_path) -> Path:
    with tarfile.open(FIXTURES / "root_v1.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "root_v1"


def test_a_root_written_by_the_first_build_opens_reads_searches_and_commits(first_build_root):
    root = first_build_root
    old_archive = json.loads((root / "sessions/legacy/history/archive_002/archive.json").read_text())
    assert "markdown" in old_archive["working_summary"] and "format" not in old_archive
    with WorkingMemoryEngine(root, durable=False) as engine:
        info = engine.session_info("legacy")
        assert (info["total_message_count"], info["message_count"], info["commit_count"]) == (90, 20, 2)
        wm = engine.working_memory("legacy")
        assert wm["archive_id"] == "archive_002" and wm["working_summary"]["markdown"].startswith("# Working Memory")
        assert engine.archive_search("legacy", "semicolon delimiter")
        assert engine.archive_expand("legacy", "archive_001")["message_count"] > 0
        assert engine.archive_search("Mixed Case Id", "Zeppelin")
        assert len(engine.assemble("legacy")["messages"]) > 2

        result = engine.commit("legacy", keep_recent_count=0)
        assert result["status"] == "completed" and result["archive_id"] == "archive_003"
        new = json.loads((root / "sessions/legacy/history/archive_003/archive.json").read_text())
        assert new["format"] == 2 and [e["archive_id"] for e in new["expansion"]["archive_index"]] == [
            "archive_001", "archive_002", "archive_003"]
        seqs = [m["seq"] for a in engine.storage.sessions.list_archives("legacy")
                for m in engine.storage.sessions.archive_messages("legacy", a["archive_id"])]
        assert seqs == list(range(1, 91))
        engine.add_messages("legacy", turn(99))
        assert engine.session_info("legacy")["next_seq"] == 93


def test_an_empty_done_marker_of_an_old_root_is_checked_against_archive_json(first_build_root):
    done = first_build_root / "sessions/legacy/history/archive_002/.done"
    done.write_text("")
    with WorkingMemoryEngine(first_build_root, durable=False) as engine:
        assert engine.session_info("legacy")["last_archive"] == {"id": "archive_002", "end_seq": 70}
        assert [m["seq"] for m in engine.storage.sessions.live_messages("legacy")][0] == 71


def test_key_facts_spill_only_after_the_sentinel_stood_through_two_commits(root):
    sixty = "\n".join(f"- fact {i} about the Orinoco survey" for i in range(60))
    base = {name: "" for name in SECTIONS} | {"Session Title": "Orinoco survey", FACTS: sixty}
    more = valid_update_call({FACTS: {"op": "APPEND", "items": ["one more fact"]}})
    model = scripted(create_call(base), more, more, more, more, more)
    counters, sizes = [], []
    with WorkingMemoryEngine(root, model=model, durable=False) as engine:
        for i in range(6):
            engine.add_messages("s", turn(i))
            engine.commit("s", keep_recent_count=0)
            archive = engine.working_memory("s")
            facts = parse_sections(archive["working_summary"]["markdown"])[FACTS]
            counters.append(archive["key_facts_sentinel_commits"])
            rest, archived = read_pointer(facts)
            sizes.append((len(bullet_items(rest)), CONSOLIDATION_SENTINEL in facts, archived))
    # commit 1 creates 60 facts; 2 adds the sentinel; 3 and 4 start with it; 5 is the third to start with it.
    # Each sentinel round's fact is refused for size and archived, counted apart in the pointer.
    assert counters == [0, 1, 2, 3, 0, 0]
    assert sizes[:4] == [(60, False, (0, 0)), (61, True, (0, 1)), (61, True, (0, 2)), (61, True, (0, 3))]
    kept, sentinel, pointer = sizes[4]
    assert kept <= 25 and not sentinel and pointer == (60 - kept, 4), "the sentinel goes, every fact is counted"
    assert sizes[5][2] == pointer and sizes[5][0] == kept + 1, "after the spill appends are accepted again"
