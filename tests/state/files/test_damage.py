"""The store trusts nothing it can re-derive: damaged files, lying hints, symlinks, failing writes.

Each case damages a real root the way an operator or a crash would, then checks the spec's outcome —
above all that every confirmed message is still present exactly once after the next commit.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from engine_helpers import assistant, user

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import DamagedFile, InvalidInput, StorageError, UnsafePath
from workmem.state.files import fsutil
from workmem.state.files.store import SessionStore


def turns(start: int, count: int) -> list[dict]:
    return [m for i in range(start, start + count) for m in (user(f"question {i} about Zanzibar"),
                                                             assistant(f"answer {i} about Zanzibar"))]


def all_seqs(engine: WorkingMemoryEngine, session: str = "s") -> list[int]:
    """Every stored seq: the archives' then the live ones (must be 1..N, each once)."""
    sessions = engine.storage.sessions
    archived = [m["seq"] for a in sessions.list_archives(session)
                for m in sessions.archive_messages(session, a["archive_id"])]
    return archived + [m["seq"] for m in sessions.live_messages(session)]


def committed_root(root: Path, rounds: int = 2) -> Path:
    """Session `s`: `rounds` commits of 10 messages each (keep 0), then 4 live messages."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        for r in range(rounds):
            engine.add_messages("s", turns(r * 5, 5))
            assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        engine.add_messages("s", turns(100, 2))
    return root / "sessions" / "s"


def problems_of(engine: WorkingMemoryEngine, session: str = "s") -> str:
    return "\n".join(str(p) for p in engine.storage.sessions.problems(session))


# 1 -------------------------------------------------------------------------------------------------


def test_a_meta_whose_last_archive_ends_too_high_hides_and_deletes_nothing(root):
    folder = committed_root(root, rounds=1)
    meta = json.loads((folder / ".meta.json").read_text())
    meta["last_archive"]["end_seq"] = 13  # the archive ends at 10; live 11..14
    (folder / ".meta.json").write_text(json.dumps(meta))
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [11, 12, 13, 14]
        assert "last_archive" in problems_of(engine) and ".meta.json" in problems_of(engine)
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 15))


def test_a_meta_naming_an_archive_that_does_not_exist_is_ignored(root):
    folder = committed_root(root, rounds=2)
    meta = json.loads((folder / ".meta.json").read_text())
    meta["last_archive"] = {"id": "archive_987654", "end_seq": 999}
    (folder / ".meta.json").write_text(json.dumps(meta))
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.session_info("s")["last_archive"] == {"id": "archive_002", "end_seq": 20}
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [21, 22, 23, 24]


# 2 -------------------------------------------------------------------------------------------------


def test_an_archive_that_lost_its_done_is_completed_not_reused(root):
    folder = committed_root(root, rounds=2)
    (folder / "history/archive_002/.done").unlink()
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert all_seqs(engine) == list(range(1, 25)), "archive_002's messages are visible again"
        assert (folder / "history/archive_002/.done").exists()
        assert "archive_002/.done" in problems_of(engine)
        assert engine.commit("s", keep_recent_count=0)["archive_id"] == "archive_003"
        assert all_seqs(engine) == list(range(1, 25))


def test_an_incomplete_archive_holding_the_only_copy_is_never_deleted(root):
    folder = committed_root(root, rounds=2)
    (folder / "history/archive_002/.done").unlink()
    (folder / "history/archive_002/archive.json").write_text("{garbled")
    before = (folder / "history/archive_002/messages.jsonl").read_bytes()
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert "archive_002" in problems_of(engine)
        result = engine.commit("s", keep_recent_count=0)
        assert result["status"] == "failed" and "not overwritten" in result["reason"]
        assert (folder / "history/archive_002/messages.jsonl").read_bytes() == before
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [21, 22, 23, 24]


# 3 -------------------------------------------------------------------------------------------------


def test_an_append_that_is_durable_succeeds_even_when_the_meta_refresh_fails(root, monkeypatch):
    store = SessionStore(root, durable=False, meta_refresh_seconds=0.0)
    store.append("s", turns(0, 1))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(SessionStore, "_save_meta", full)
    stored = store.append("s", turns(1, 2))  # no exception: the caller has no reason to retry
    assert [m["seq"] for m in stored] == [3, 4, 5, 6]
    monkeypatch.undo()
    assert [m["seq"] for m in SessionStore(root).live_messages("s")] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EIO])
def test_an_append_that_fails_writing_leaves_the_file_and_raises_a_typed_error(root, monkeypatch, err):
    store = SessionStore(root, durable=False)
    store.append("s", turns(0, 1))
    before = (root / "sessions/s/messages.jsonl").read_bytes()
    real = fsutil.append_bytes

    def failing(path, data, *, durable=True, fd=None):
        raise OSError(err, "injected")

    monkeypatch.setattr(fsutil, "append_bytes", failing)
    with pytest.raises(StorageError) as caught:
        store.append("s", turns(1, 1))
    assert caught.value.errno == err and "messages.jsonl" in str(caught.value)
    assert (root / "sessions/s/messages.jsonl").read_bytes() == before
    monkeypatch.setattr(fsutil, "append_bytes", real)
    store.append("s", turns(1, 1))  # the retry stores the batch once
    assert [m["seq"] for m in store.live_messages("s")] == [1, 2, 3, 4]


# 5 -------------------------------------------------------------------------------------------------


def test_a_symlinked_session_directory_is_refused_and_nothing_is_written_outside(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "sessions").mkdir(parents=True)
    (root / "sessions" / "x").symlink_to(outside, target_is_directory=True)
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(UnsafePath):
            engine.add_messages("x", turns(0, 1))
        with pytest.raises(UnsafePath):
            engine.session_info("x")
    assert list(outside.iterdir()) == []


def test_a_symlinked_messages_file_is_refused(root, tmp_path):
    folder = committed_root(root, rounds=1)
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes((folder / "messages.jsonl").read_bytes())
    (folder / "messages.jsonl").unlink()
    (folder / "messages.jsonl").symlink_to(target)
    before = target.read_bytes()
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(UnsafePath):
            engine.add_messages("s", turns(50, 1))
    assert target.read_bytes() == before


@pytest.mark.parametrize("planted", ["session", "history", "archive", "payloads", "messages"])
def test_a_link_planted_between_two_calls_of_one_engine_is_refused(root, tmp_path, planted):
    """The check holds at every access, not only the first one of an engine."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", turns(0, 4))
        engine.add_messages("s", [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "big", "type": "function", "function": {"name": "dump", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "big", "name": "dump", "content": "x" * 100_000}])
        engine.commit("s", keep_recent_count=2)
        folder = root / "sessions" / "s"
        target = {"session": folder, "history": folder / "history", "archive": folder / "history" / "archive_001",
                  "payloads": folder / "payloads", "messages": folder / "messages.jsonl"}[planted]
        outside = tmp_path / "elsewhere"
        target.rename(outside)
        target.symlink_to(outside, target_is_directory=outside.is_dir())
        before = contents(outside)
        refused = 0
        for call in (lambda: engine.add_messages("s", turns(50, 1)), lambda: engine.archive_expand("s", "archive_001"),
                     lambda: engine.read_tool_result("s", "seq:10")):
            try:
                call()
            except UnsafePath:
                refused += 1
        assert refused >= 1 and contents(outside) == before, "refused, and nothing written through the link"


def contents(path):
    """bytes of every file at or under `path`."""
    return {p: p.read_bytes() for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()}


def test_a_symlinked_history_directory_is_refused(root, tmp_path):
    folder = committed_root(root, rounds=1)
    outside = tmp_path / "history-elsewhere"
    (folder / "history").rename(outside)
    (folder / "history").symlink_to(outside, target_is_directory=True)
    with WorkingMemoryEngine(root, durable=False) as engine, pytest.raises(UnsafePath):
        engine.add_messages("s", turns(50, 1))


# 6 -------------------------------------------------------------------------------------------------


def test_a_duplicated_live_line_never_blocks_a_commit(root):
    folder = committed_root(root, rounds=1)
    lines = (folder / "messages.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "messages.jsonl").write_bytes(b"".join([lines[0], lines[1], lines[1], *lines[2:]]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [11, 12, 13, 14]
        assert "seq 12 again" in problems_of(engine) and "line 3 of" in problems_of(engine)
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 15))


def test_lines_out_of_order_are_read_in_seq_order_and_reported(root):
    folder = committed_root(root, rounds=1)
    lines = (folder / "messages.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "messages.jsonl").write_bytes(b"".join([lines[2], lines[0], lines[3], lines[1]]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [11, 12, 13, 14]
        assert "out of order" in problems_of(engine)
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 15))


# 7 -------------------------------------------------------------------------------------------------


def test_meta_nested_ten_thousand_levels_deep_is_a_typed_error(root):
    deep: dict = {}
    cursor = deep
    for _ in range(10_000):
        cursor["k"] = {}
        cursor = cursor["k"]
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(InvalidInput, match="nested deeper"):
            engine.add_messages("s", [{"role": "user", "content": "hi", "meta": deep}])
        assert not engine.storage.sessions.session_exists("s")


def test_a_garbled_archive_json_is_rebuilt_from_its_messages_and_reported(root):
    folder = committed_root(root, rounds=2)
    (folder / "history/archive_002/archive.json").write_text("{not json")
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.add_messages("s", turns(200, 1))] == [25, 26], "appends go on"
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [21, 22, 23, 24, 25, 26]
        assert engine.archive_expand("s", "archive_002")["message_count"] == 10, "its range comes from its messages"
        assert engine.archive_expand("s", "archive_001")["message_count"] == 10, "other archives read on"
        assert [(a["start_seq"], a["end_seq"]) for a in engine.list_archives("s")] == [(1, 10), (11, 20)]
        assert any("archive_002/archive.json" in p["file"] for p in engine.check("s"))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 27))


def test_a_newest_archive_with_no_messages_is_reported_and_hides_no_older_one(root):
    """What a power cut left of an archive whose writes were never synced: check() names it, the archives
    before it and the live messages read on, and the next commit neither fails nor loses anything."""
    folder = committed_root(root, rounds=2)
    (folder / "history/archive_002/messages.jsonl").write_bytes(b"")
    with WorkingMemoryEngine(root, durable=False) as engine:
        found = engine.check("s")
        assert any("archive_002/messages.jsonl" in p["file"] and "10 seq(s) of 11..20 missing" in p["problem"]
                   for p in found), found
        assert engine.archive_expand("s", "archive_001")["message_count"] == 10
        assert [(a["start_seq"], a["end_seq"]) for a in engine.list_archives("s")] == [(1, 10), (11, 20)]
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert [m["seq"] for a in ("archive_001", "archive_003") for m in engine.archive_messages("s", a)] == [
            *range(1, 11), *range(21, 25)]


def test_an_archive_emptied_whole_is_a_typed_error_that_check_reports(root):
    folder = committed_root(root, rounds=2)
    for path in (folder / "history/archive_002").iterdir():
        path.write_bytes(b"")
    with WorkingMemoryEngine(root, durable=False) as engine:
        found = engine.check("s")  # reports, never raises
        assert any("archive_002/archive.json" in p["file"] for p in found), found
        with pytest.raises(DamagedFile, match="archive_002/archive.json"):
            engine.list_archives("s")
        result = engine.commit("s", keep_recent_count=0)
        assert result["status"] == "failed" and "archive_002/archive.json" in result["reason"], result
        assert engine.archive_expand("s", "archive_001")["message_count"] == 10, "older archives read on"
        assert [m["seq"] for m in engine.live_messages("s")] == [21, 22, 23, 24]


def test_a_missing_archive_directory_is_a_typed_error_naming_it(root):
    import shutil

    folder = committed_root(root, rounds=2)
    shutil.rmtree(folder / "history/archive_001")
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [21, 22, 23, 24]
        assert engine.archive_expand("s", "archive_002")["message_count"] == 10
        with pytest.raises(Exception) as caught:
            engine.archive_expand("s", start_seq=1, end_seq=12)
        assert "archive_001" in str(caught.value)


# 9 -------------------------------------------------------------------------------------------------


def test_an_archive_file_missing_a_line_or_holding_one_twice(root):
    folder = committed_root(root, rounds=1)
    path = folder / "history/archive_001/messages.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:4], lines[3], *lines[5:]]))  # seq 5 missing, seq 4 twice
    with WorkingMemoryEngine(root, durable=False) as engine:
        got = engine.archive_expand("s", "archive_001")
        assert got["message_count"] == 9 and got["content"].count("[#4 ") == 1
        found = problems_of(engine)
        assert "seq 4 again" in found and "missing: [5]" in found


# 7: damaged databases --------------------------------------------------------------------------------


def scramble(path: Path, kind: str = "garbage") -> None:
    """Damage a database file as a bad disk, a bad copy or a stray tool would: overwrite it with garbage, put a
    folder in its place, or give each of its plain tables other columns (and drop its WAL)."""
    import sqlite3

    if kind == "other tables":
        conn = sqlite3.connect(path)
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE "
                                            "'%VIRTUAL%' AND name NOT LIKE 'fts_words%' AND name NOT LIKE "
                                            "'fts_trigram%' AND name NOT LIKE 'sqlite_%'")]
        for name in names:
            conn.execute(f'DROP TABLE "{name}"')
            conn.execute(f'CREATE TABLE "{name}" (unrelated)')
        conn.commit()
        conn.close()
        return
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    if kind == "a folder":
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(b"this is not a sqlite database " * 200)


DAMAGE = ["garbage", "a folder", "other tables"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_corrupt_index_is_a_typed_error_and_reindex_rebuilds_it_with_its_tasks(root, kind):
    committed_root(root, rounds=2)
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", turns(300, 3))
        failing = engine.storage.tasks.list_tasks("s")
    scramble(root / "index.sqlite", kind)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")][:2] == [21, 22], "files read on"
        with pytest.raises(DamagedFile, match="index.sqlite"):
            engine.archive_search("s", "Zanzibar")
        result = engine.reindex()
        assert result["moved_aside"] and result["indexed"] == 20
        assert Path(result["moved_aside"]).exists()
        assert engine.archive_search("s", "Zanzibar"), "searchable again"
        rederived = engine.storage.tasks.list_tasks("s")
        kept = {t["thread_id"] for t in failing if t["thread_id"]}
        assert {t["thread_id"] for t in rederived} == kept and all(t["status"] == "failed" for t in rederived)
        assert [r["status"] for r in engine.resume_all()] == ["completed"] * len(kept), "finished from the archives"
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 31))


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_corrupt_checkpoint_database_blocks_commits_only_until_repair(root, kind):
    committed_root(root, rounds=1)
    scramble(root / "checkpoints.sqlite", kind)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.archive_search("s", "Zanzibar") and engine.assemble("s")["messages"], "reads work"
        engine.add_messages("s", turns(400, 1))
        with pytest.raises(DamagedFile, match="checkpoints.sqlite"):
            engine.commit("s", keep_recent_count=0)
        assert engine.storage.tasks.lease_holder("s") is None, "the lease was released"
        repaired = engine.repair()
        assert repaired["moved_aside"]
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 17))


def test_repair_deletes_checkpoint_threads_no_task_names(root):
    import sqlite3

    committed_root(root, rounds=2)
    conn = sqlite3.connect(root / "index.sqlite")
    conn.execute("DELETE FROM tasks")
    conn.commit()
    conn.close()
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.repair()["orphan_threads_deleted"] == 2


# check ------------------------------------------------------------------------------------------------


def test_check_reports_every_anomaly_with_file_and_line(root):
    import shutil

    folder = committed_root(root, rounds=3)
    lines = (folder / "messages.jsonl").read_bytes().splitlines(keepends=True)
    (folder / "messages.jsonl").write_bytes(b"".join([lines[0], b"{broken\n", lines[0], *lines[1:]]))
    shutil.rmtree(folder / "history/archive_002")
    (folder / "history/archive_003/.done").write_text('{"archive_id": "archive_003", "end_seq": 99}')
    with WorkingMemoryEngine(root, durable=False) as engine:
        found = engine.check("s")
        assert engine.check("s") == found, "checking changes nothing"
    text = "\n".join(f"{a['file']}:{a['line']}: {a['problem']}" for a in found)
    assert "messages.jsonl:2: invalid JSON" in text
    assert "messages.jsonl:3: seq 31 again" in text
    assert "archive_002:0: missing" in text
    assert "archive_003/.done:0: says end_seq 99" in text
    assert "archive_003:0: starts at seq 21; the archive before ends at 10" in text


def test_a_clean_session_checks_clean(root):
    committed_root(root, rounds=2)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.check("s") == []


@pytest.mark.parametrize("kind", ["a folder", "a FIFO"])
def test_a_session_whose_live_file_cannot_be_read_stays_local_checkable_and_deletable(root, kind):
    import os

    committed_root(root, rounds=1)
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("healthy", [user("all fine here")])
    live = root / "sessions" / "s" / "messages.jsonl"
    live.unlink()
    live.mkdir() if kind == "a folder" else os.mkfifo(live)
    with WorkingMemoryEngine(root, durable=False) as engine:
        listed = {row["session_id"]: row for row in engine.list_sessions()}
        assert listed["healthy"]["live_messages"] == 1, "the other sessions are listed as they are"
        assert "messages.jsonl" in listed["s"]["damaged"] and listed["s"]["live_messages"] is None
        found = engine.check("s")
        assert any(f["file"] == str(live) and "not a regular file" in f["problem"] for f in found), found
        assert engine.delete_session("s")["deleted"] and not engine.session_exists("s")
        assert [row["session_id"] for row in engine.list_sessions()] == ["healthy"]


@pytest.mark.parametrize("cut", ["the last lines", "every line", "the last lines, then an append"])
def test_live_lines_lost_from_the_file_are_a_finding_of_check(root, cut):
    committed_root(root, rounds=1)  # seqs 1..10 archived, 11..14 live
    live = root / "sessions" / "s" / "messages.jsonl"
    lines = live.read_bytes().splitlines(keepends=True)
    live.write_bytes(b"" if cut == "every line" else b"".join(lines[:-3]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        if cut.endswith("append"):
            engine.add_messages("s", [user("after the loss")])
        problems = " | ".join(f["problem"] for f in engine.check("s"))
        assert engine.list_sessions()[0]["archived_messages"] == 10, "lost lines never count as archived"
    first_lost = 11 if cut == "every line" else 12
    assert f"seqs {first_lost}..14" in problems and "lost" in problems, problems


def test_expand_and_export_say_which_messages_an_archive_lost(root, capsys):
    from workmem.graphs import cli

    committed_root(root, rounds=1)  # archive_001: seqs 1..10; live 11..14
    archived = root / "sessions" / "s" / "history" / "archive_001" / "messages.jsonl"
    archived.write_bytes(b"".join(archived.read_bytes().splitlines(keepends=True)[:6]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        whole = engine.archive_expand("s", "archive_001")
        assert whole["missing"] == [7, 8, 9, 10] and "4 message(s) of seqs 1–10 are missing" in whole["content"]
        part = engine.archive_expand("s", start_seq=9, end_seq=12)
        assert part["missing"] == [9, 10] and [11, 12] == [part["start_seq"], part["end_seq"]]
        assert engine.archive_expand("s", start_seq=11, end_seq=99)["missing"] == []
    assert cli.main(["--root", str(root), "export", "s"]) == 1
    err = capsys.readouterr().err
    assert "4 of the session's 14 message(s) are missing" in err


# A damaged key in one line (a flipped bit in "text", "type", "parts" or "meta") is still valid JSON: the readers'
# line check must catch it, or every later reader fails on the line with a raw KeyError and no commit completes.
LINE_DAMAGE = {
    "text key": lambda m: {**m, "parts": [{("texp" if k == "text" else k): v for k, v in m["parts"][0].items()}]},
    "type key": lambda m: {**m, "parts": [{("typd" if k == "type" else k): v for k, v in m["parts"][0].items()}]},
    "unknown part type": lambda m: {**m, "parts": [{**m["parts"][0], "type": "textx"}]},
    "a part that is a number": lambda m: {**m, "parts": [5]},
    "an empty part": lambda m: {**m, "parts": [{}]},
    "text that is a number": lambda m: {**m, "parts": [{**m["parts"][0], "text": 5}]},
    "meta that is a number": lambda m: {**m, "meta": 5},
}


def damage_line(path: Path, index: int, damage) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[index] = json.dumps(damage(json.loads(lines[index])), ensure_ascii=False).encode()
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("kind", LINE_DAMAGE)
def test_a_damaged_key_in_one_live_line_is_reported_and_never_blocks_reads_or_commits(root, kind):
    folder = committed_root(root, rounds=1)  # archive 1..10, live 11..14
    damage_line(folder / "messages.jsonl", 1, LINE_DAMAGE[kind])  # seq 12
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.live_messages("s")] == [11, 13, 14]
        engine.assemble("s")
        assert engine.archive_search("s", "Zanzibar"), "the archives still found"
        findings = engine.check("s")
        assert any(f["file"].endswith("messages.jsonl") and f["line"] == 2 for f in findings), findings
        engine.add_messages("s", turns(200, 2))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        seqs = all_seqs(engine)
        assert seqs == [s for s in range(1, 19) if s != 12], "every readable message once; the damaged one reported"


def test_a_lone_surrogate_escape_in_one_line_is_reported_and_never_blocks_commits(root):
    folder = committed_root(root, rounds=1)
    path = folder / "messages.jsonl"
    path.write_bytes(path.read_bytes().replace(b"answer 100 about", b"answer \\udc80 about", 1))  # seq 12
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.live_messages("s")] == [11, 13, 14]
        assert any("surrogate" in f["problem"] and f["line"] == 2 for f in engine.check("s"))
        for _ in range(2):
            engine.add_messages("s", turns(300, 2))
            assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert len(all_seqs(engine)) == len(set(all_seqs(engine))) == 21


def test_reindex_of_the_root_leaves_a_damaged_archive_out_and_keeps_every_other_session_searchable(root, monkeypatch):
    committed_root(root, rounds=1)
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("b", turns(0, 3))
        assert engine.commit("b", keep_recent_count=0)["status"] == "completed"
        before = len(engine.archive_search("b", "Zanzibar"))
        real = SessionStore.archive_messages

        def damaged(self, session_id, archive_id, *args, **kwargs):
            if session_id == "s":
                raise DamagedFile(f"sessions/s/history/{archive_id}/messages.jsonl", "unreadable")
            return real(self, session_id, archive_id, *args, **kwargs)

        monkeypatch.setattr(SessionStore, "archive_messages", damaged)
        engine.reindex()
        assert before and len(engine.archive_search("b", "Zanzibar")) == before, "the healthy session kept"


@pytest.mark.parametrize("name", [".overview.md", ".abstract.md", "spilled.md"])
def test_a_memory_file_that_is_not_utf8_reads_with_its_damage_marked_and_is_reported(root, name):
    folder = committed_root(root, rounds=1)
    path = folder / "history" / "archive_001" / name
    if not path.exists():  # no item was spilled: one that was, with a damaged byte
        path.write_bytes(b"## Key Facts & Decisions\n- the deploy key is in vault caf\xe9\n")
    path.write_bytes(path.read_bytes()[:20] + b"\xff\xfe" + path.read_bytes()[20:])
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.assemble("s")
        assert engine.list_archives("s")[0]["archive_id"] == "archive_001"
        assert any(f["file"].endswith(name) and "UTF-8" in f["problem"] for f in engine.check("s"))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 15))


def test_a_history_that_is_a_file_loses_no_live_message_and_check_says_what_it_lost(root):
    folder = committed_root(root, rounds=1)
    for child in (folder / "history").rglob("*"):
        if child.is_file():
            child.unlink()
    for child in sorted((folder / "history").rglob("*"), reverse=True):
        child.rmdir()
    (folder / "history").rmdir()
    (folder / "history").write_text("not a folder")
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.live_messages("s")] == [11, 12, 13, 14]
        engine.session_info("s")
        engine.assemble("s")
        findings = engine.check("s")
        assert any(f["file"].endswith("history") and "not a folder" in f["problem"] for f in findings)
        assert any("seqs in between are nowhere" in f["problem"] for f in findings), "what it lost"


def test_a_line_nested_past_what_json_parsing_holds_is_reported_and_never_blocks_reads_tools_or_commits(root):
    folder = committed_root(root, rounds=1)
    path = folder / "messages.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"[" * 100_000 + b"]" * 100_000  # seq 12's line
    path.write_bytes(b"\n".join(lines))
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.live_messages("s")] == [11, 13, 14]
        engine.assemble("s")
        assert any("nested too deeply" in f["problem"] and f["line"] == 2 for f in engine.check("s"))
        engine.add_messages("s", turns(400, 2))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == [s for s in range(1, 19) if s != 12]


def test_one_session_in_a_newer_format_never_hides_the_others_from_the_listing(root):
    committed_root(root, rounds=1)
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("b", turns(0, 1))
    (root / "sessions" / "s" / "FORMAT").write_text("99\n")
    with WorkingMemoryEngine(root, durable=False) as engine:
        listed = {s["session_id"]: s for s in engine.list_sessions()}
        assert listed["b"]["live_messages"] == 2 and listed["s"].get("damaged"), listed


@pytest.mark.parametrize("damage", ["{garbled", "", '{"session_id": 7}'])
def test_a_garbled_meta_never_hides_its_session_from_the_listing(root, damage):
    committed_root(root, rounds=1)
    meta = root / "sessions" / "s" / ".meta.json"
    meta.write_text(damage)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.reindex()["indexed"] == 10 and engine.archive_search("s", "Zanzibar"), "reindex reaches it"
    meta.write_text(damage)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert ".meta.json" in problems_of(engine) and "recomputed" in problems_of(engine)
    meta.write_text(damage)
    with WorkingMemoryEngine(root, durable=False) as engine:
        listed = {s["session_id"]: s for s in engine.list_sessions()}
        assert listed["s"]["live_messages"] == 4 and listed["s"]["archived_messages"] == 10, listed
        assert all_seqs(engine) == list(range(1, 15))
        engine.add_messages("s", turns(200, 1))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 17))
    assert json.loads(meta.read_text())["session_id"] == "s"


@pytest.mark.parametrize("named", ["other", "", "x" * 2000])
def test_a_meta_naming_another_session_lists_its_folder_as_damaged_not_hidden(root, named):
    committed_root(root, rounds=1)
    meta = root / "sessions" / "s" / ".meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "session_id": named}))
    with WorkingMemoryEngine(root, durable=False) as engine:
        listed = {s["session_id"]: s for s in engine.list_sessions()}
        assert "belongs to session" in listed["s"]["damaged"], listed


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_newest_archive_file_that_is_not_regular_is_a_finding_and_an_append_with_ids_stores_nothing(root, kind):
    """The repeats of a batch with ids cannot be checked against an archive that cannot be read: the append is a
    typed error (never a batch stored twice), one without ids goes on, and `check` names the file."""
    committed_root(root, rounds=1)
    archived = root / "sessions" / "s" / "history" / "archive_001" / "messages.jsonl"
    archived.unlink()
    archived.mkdir() if kind == "folder" else os.mkfifo(archived)
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(DamagedFile, match="archive_001"):
            engine.add_messages("s", [{"role": "user", "content": "a question with an id", "id": "u-1"}])
        assert engine.add_messages("s", [{"role": "user", "content": "one without"}])[0]["seq"] == 15
        assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [11, 12, 13, 14, 15]
        assert any("archive_001" in f["file"] and "regular" in f["problem"] for f in engine.check("s"))


def test_a_memory_file_that_is_a_folder_reads_as_missing_and_never_blocks_reads_or_commits(root):
    committed_root(root, rounds=1)
    overview = root / "sessions" / "s" / "history" / "archive_001" / ".overview.md"
    overview.unlink()
    overview.mkdir()
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.archive_expand("s", archive_id="archive_001")["message_count"] == 10
        assert engine.assemble("s")["messages"]
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert all_seqs(engine) == list(range(1, 15))
        assert any("not a regular file" in f["problem"] for f in engine.check("s"))
