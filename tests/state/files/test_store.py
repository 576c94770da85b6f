"""SessionStore: appends, meta, the live rule, archives, GC, corrupt and torn lines."""

from __future__ import annotations

import json
import os
import threading

import pytest
from filelock import FileLock
from oracles import compute_pending_tokens, source_turn_range

from workmem.state.errors import ArchiveNotFound, CorruptLine, InvalidInput, SessionNotFound
from workmem.state.files import store as store_module
from workmem.state.files.store import SessionStore
from workmem.state.messages import message_text
from workmem.state.tokens import count_tokens
from workmem.state.turns import choose_covered_range


def texts(n, start=0, role="user"):
    return [{"role": role, "content": f"message number {i}"} for i in range(start, start + n)]


def archive_oldest(store, sid, keep, *, gc=True, record=True):
    """What the commit's persist step does: archive the covered live messages, GC, update meta."""
    live = store.live_messages(sid)
    covered_range = choose_covered_range(live, keep)
    if covered_range is None:
        return None
    covered = [m for m in live if m["seq"] <= covered_range[1]]
    archive = {"archive_id": store.next_archive_id(sid), "session_id": sid,
               "created_at": "2026-01-01T00:00:00+00:00", "source_turn_range": source_turn_range(covered)}
    store.write_archive(sid, archive, covered, f"# Working Memory\n\nupto {covered_range[1]}\n", "Title — state")
    if gc:
        store.drop_covered(sid, covered_range[1])
    if record:
        store.record_commit(sid, archive, keep)
    return archive


@pytest.fixture
def store(root):
    return SessionStore(root, durable=False)


def test_append_assigns_ids_seqs_turns_tokens(store):
    out = store.append("s", [{"role": "system", "content": "sys"}, *texts(2),
                             {"role": "assistant", "content": "reply"}, *texts(1, 5)])
    assert [m["seq"] for m in out] == [1, 2, 3, 4, 5]
    assert [m["turn_id"] for m in out] == ["t0", "t1", "t2", "t2", "t3"]
    assert len({m["id"] for m in out}) == 5 and all(m["id"].startswith("m-") for m in out)
    assert all(m["tokens"] == count_tokens(message_text(m)) for m in out)
    assert out[0]["created_at"].endswith("+00:00")
    assert list(out[0]) == ["id", "seq", "turn_id", "role", "created_at", "tokens", "meta", "parts"]
    more = store.append("s", texts(1))
    assert more[0]["seq"] == 6 and more[0]["turn_id"] == "t4"
    assert store.live_messages("s") == out + more


def test_empty_batch_is_a_no_op(store, root):
    assert store.append("s", []) == []
    assert not (root / "sessions").exists()


def test_one_write_and_one_fsync_per_batch(root, monkeypatch):
    store = SessionStore(root, durable=True)
    store.append("s", texts(1))
    calls = {"write": 0, "fsync": 0}
    real_write, real_fsync = os.write, os.fsync

    def write(fd, data):
        calls["write"] += 1
        return real_write(fd, data)

    def fsync(fd):
        calls["fsync"] += 1
        return real_fsync(fd)

    monkeypatch.setattr(store_module.os, "write", write)
    monkeypatch.setattr(store_module.os, "fsync", fsync)
    store.meta_refresh_seconds = 3600
    store.append("s", texts(100))
    assert calls == {"write": 1, "fsync": 1}
    store.append("s", texts(5), durable=False)
    assert calls == {"write": 2, "fsync": 1}


def test_the_live_file_kept_open_between_appends_follows_every_replacement(root):
    """An append writes to the file its session state was checked against: after another store deleted and
    re-created the session, or a GC rewrote the live file, it goes to the new file, never the old one."""
    mine, other = SessionStore(root, durable=False), SessionStore(root, durable=False)
    mine.append("s", texts(2))
    mine.append("s", texts(1, start=2))  # the live file is open now
    tombstone = other.entomb("s", {"reason": "test"})
    other.append("s", texts(1, start=10))
    mine.append("s", texts(1, start=11))
    assert [m["seq"] for m in SessionStore(root).live_messages("s")] == [1, 2]
    assert "message number 11" in (root / "sessions" / "s" / "messages.jsonl").read_text()
    assert (tombstone / "messages.jsonl").read_text().count("\n") == 3, "nothing written to the deleted copy"
    archive_oldest(other, "s", 0)  # the GC replaces the live file
    mine.append("s", texts(1, start=12))
    assert [m["seq"] for m in SessionStore(root).live_messages("s")] == [3]


def test_a_bad_message_anywhere_in_the_batch_writes_nothing(store, root):
    store.append("s", texts(2))
    size = (root / "sessions" / "s" / "messages.jsonl").stat().st_size
    with pytest.raises(InvalidInput) as err:
        store.append("s", [*texts(3), {"role": "robot", "content": "x"}])
    assert err.value.field == "messages[3].role"
    assert (root / "sessions" / "s" / "messages.jsonl").stat().st_size == size
    assert store.meta("s")["next_seq"] == 3


def test_meta_has_every_field_and_survives_reopen(store, root):
    store.append("s", texts(15))
    meta = store.meta("s")
    assert set(meta) == {"session_id", "created_at", "updated_at", "next_seq", "message_count",
                         "total_message_count", "commit_count", "last_commit_at", "keep", "keep_recent_count",
                         "pending_tokens", "live_tokens", "last_archive"}
    assert meta["message_count"] == meta["total_message_count"] == 15 and meta["next_seq"] == 16
    assert meta["keep_recent_count"] == 10 and meta["commit_count"] == 0 and meta["last_archive"] is None
    assert meta["pending_tokens"] == compute_pending_tokens(store.live_messages("s"), 10)
    assert SessionStore(root).meta("s") == meta
    on_disk = json.loads((root / "sessions" / "s" / ".meta.json").read_text())
    assert {k: on_disk[k] for k in meta} == meta


def test_meta_is_recomputed_when_missing_or_garbage(store, root):
    store.append("s", texts(12))
    archive_oldest(store, "s", 4)
    store.append("s", texts(3))
    expected = store.meta("s")
    meta_path = root / "sessions" / "s" / ".meta.json"
    meta_path.write_text("{not json")
    recomputed = SessionStore(root).meta("s")
    assert recomputed == {**expected, "keep": ["messages", 10], "keep_recent_count": 10,
                          "pending_tokens": compute_pending_tokens(store.live_messages("s"), 10)}
    meta_path.unlink()
    fresh = SessionStore(root).meta("s")
    assert fresh["next_seq"] == 16 and fresh["message_count"] == 7 and fresh["commit_count"] == 1
    assert fresh["last_archive"] == {"id": "archive_001", "end_seq": 8}
    assert json.loads(meta_path.read_text())["session_id"] == "s"


def test_meta_counts_are_corrected_on_load(store, root):
    store.append("s", texts(5))
    store.flush()
    meta_path = root / "sessions" / "s" / ".meta.json"
    data = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**data, "message_count": 99, "pending_tokens": -4, "next_seq": 2}))
    meta = SessionStore(root).meta("s")
    assert meta["message_count"] == 5 and meta["pending_tokens"] == 0 and meta["next_seq"] == 6


def test_stored_session_id_must_match(store, root):
    store.append("s", texts(1))
    meta_path = root / "sessions" / "s" / ".meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "session_id": "other"}))
    with pytest.raises(InvalidInput, match="belongs to session 'other'"):
        SessionStore(root).live_messages("s")
    with pytest.raises(InvalidInput):
        SessionStore(root).append("s", texts(1))


def test_reads_of_unknown_sessions(store):
    for call in (store.meta, store.live_messages, store.list_archives, store.next_archive_id,
                 store.latest_overview, store.last_complete_archive):
        with pytest.raises(SessionNotFound):
            call("nope")
    assert store.session_exists("nope") is False
    with pytest.raises(InvalidInput):
        store.meta("")


def test_torn_last_line_is_ignored_then_truncated(store, root):
    store.append("s", texts(3))
    path = root / "sessions" / "s" / "messages.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"id": "m-torn", "seq": 4, "role": "us')
    other = SessionStore(root, durable=False)
    assert [m["seq"] for m in other.live_messages("s")] == [1, 2, 3]
    assert other.problems("s") == []
    out = other.append("s", texts(1))
    assert out[0]["seq"] == 4
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x)["seq"] for x in lines[:-1])
    assert [m["seq"] for m in store.live_messages("s")] == [1, 2, 3, 4]


@pytest.mark.parametrize("then", ["append", "append-by-the-same-store", "forget", "archive"])
def test_a_whole_last_message_without_its_newline_is_kept_and_its_line_ended(store, root, then):
    """An editor that strips the final newline, or a writer cut just before it, leaves a whole message: stored,
    never cut away as a torn write by the next writer."""
    store.append("s", texts(3))
    path = root / "sessions" / "s" / "messages.jsonl"
    path.write_bytes(path.read_bytes()[:-1])
    other = SessionStore(root, durable=False)
    assert [m["seq"] for m in other.live_messages("s")] == [1, 2, 3] and other.problems("s") == []
    writer = store if then == "append-by-the-same-store" else other
    if then.startswith("append"):
        assert writer.append("s", texts(1, start=9))[0]["seq"] == 4
        expected = [1, 2, 3, 4]
    elif then == "forget":
        writer.forget("s", [1], "2026-01-02T00:00:00+00:00")
        expected = [1, 2, 3]
    else:
        archive_oldest(writer, "s", 1)
        expected = [3]
    assert [m["seq"] for m in SessionStore(root).live_messages("s", strict=True)] == expected
    assert path.read_bytes().endswith(b"\n")
    everything = [m["seq"] for m in SessionStore(root).messages_in_range("s", 1, 9)]
    assert everything == sorted(set(everything)) == [1, 2, 3, *([4] if then.startswith("append") else [])]


def test_a_last_line_whose_newline_cannot_be_written_gets_it_with_the_next_append(store, root, monkeypatch):
    """A full disk when the newline is due: the next append writes it first, in its own write, so the new line
    never glues onto the last one."""
    import errno

    from workmem.state.files import meta

    store.append("s", texts(3))
    path = root / "sessions" / "s" / "messages.jsonl"
    path.write_bytes(path.read_bytes()[:-1])
    real = meta.fsutil.append_bytes

    def full(target, data, **kwargs):
        if data == b"\n":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(target, data, **kwargs)

    monkeypatch.setattr(meta.fsutil, "append_bytes", full)
    other = SessionStore(root, durable=False)
    assert [m["seq"] for m in other.live_messages("s")] == [1, 2, 3]
    monkeypatch.setattr(meta.fsutil, "append_bytes", real)
    assert other.append("s", texts(1, start=9))[0]["seq"] == 4
    reader = SessionStore(root)
    assert [m["seq"] for m in reader.live_messages("s", strict=True)] == [1, 2, 3, 4] and reader.problems("s") == []


def test_torn_line_after_our_own_append_is_cut_by_the_next_append(store, root):
    store.append("s", texts(2))
    with open(root / "sessions" / "s" / "messages.jsonl", "ab") as f:
        f.write(b'{"partial')
    store.append("s", texts(1))
    assert [m["seq"] for m in SessionStore(root).live_messages("s", strict=True)] == [1, 2, 3]


def test_corrupt_line_is_reported_with_file_and_line(store, root):
    store.append("s", texts(2))
    path = root / "sessions" / "s" / "messages.jsonl"
    with open(path, "ab") as f:
        f.write(b"this is not json\n")
        f.write(b'{"seq": "x"}\n')
    store.append("s", texts(2))
    reader = SessionStore(root)
    assert [m["seq"] for m in reader.live_messages("s")] == [1, 2, 3, 4]
    problems = reader.problems("s")
    assert [(p.path, p.line_no) for p in problems] == [(str(path), 3), (str(path), 4)]
    with pytest.raises(CorruptLine) as err:
        reader.live_messages("s", strict=True)
    assert err.value.line_no == 3 and str(path) in str(err.value)
    assert reader.meta("s")["message_count"] == 4


def test_live_rule_before_gc_and_after(store):
    store.append("s", texts(20))
    archive_oldest(store, "s", 5, gc=False, record=False)
    assert [m["seq"] for m in store.live_messages("s")] == list(range(16, 21))
    assert store.meta("s")["message_count"] == 5
    assert SessionStore(store.root).meta("s")["last_archive"] == {"id": "archive_001", "end_seq": 15}
    assert store.drop_covered("s", 15) == 15
    assert store.drop_covered("s", 15) == 0
    assert [m["seq"] for m in store.live_messages("s")] == list(range(16, 21))
    assert [m["seq"] for m in store.messages_in_range("s", 10, 18)] == list(range(10, 19))


def test_messages_in_range_across_many_archives(store):
    for _ in range(6):
        store.append("s", texts(7))
        archive_oldest(store, "s", 3)
    assert store.next_archive_id("s") == "archive_007"
    assert [m["seq"] for m in store.messages_in_range("s", 1, 42)] == list(range(1, 43))
    assert [m["seq"] for m in store.messages_in_range("s", 9, 9)] == [9]
    assert store.messages_in_range("s", 100, 200) == []
    with pytest.raises(InvalidInput):
        store.messages_in_range("s", 5, 4)
    with pytest.raises(InvalidInput):
        store.messages_in_range("s", 0, 4)


def test_archive_reads(store):
    store.append("s", texts(12))
    archive = archive_oldest(store, "s", 2)
    assert store.list_archives("s") == [{"archive_id": "archive_001", "abstract": "Title — state",
                                         "start_seq": 1, "end_seq": 10}]
    full = store.read_archive("s", "archive_001")
    assert full["overview"].startswith("# Working Memory") and full["abstract"] == "Title — state"
    assert full["source_turn_range"] == archive["source_turn_range"]
    assert [m["seq"] for m in store.archive_messages("s", "archive_001")] == list(range(1, 11))
    assert store.latest_overview("s") == full["overview"]
    assert store.last_complete_archive("s")["archive_id"] == "archive_001"
    meta = store.meta("s")
    assert meta["commit_count"] == 1 and meta["keep_recent_count"] == 2
    assert meta["last_commit_at"] == "2026-01-01T00:00:00+00:00"


@pytest.mark.parametrize("bad", ["archive_002", "archive_0", "../../etc", "archive_001/../x", "nope"])
def test_unknown_archive_ids(store, bad):
    store.append("s", texts(3))
    archive_oldest(store, "s", 1)
    with pytest.raises(ArchiveNotFound) as err:
        store.read_archive("s", bad)
    assert bad in str(err.value)
    with pytest.raises(ArchiveNotFound):
        store.archive_messages("s", bad)


def test_non_string_archive_id(store):
    store.append("s", texts(3))
    with pytest.raises(InvalidInput):
        store.read_archive("s", 1)


def test_write_archive_is_idempotent_and_cleans_half_written_dirs(store, root):
    store.append("s", texts(6))
    live = store.live_messages("s")
    archive = {"archive_id": "archive_001", "session_id": "s", "source_turn_range": source_turn_range(live[:4])}
    history = root / "sessions" / "s" / "history"
    (history / ".archive_001.tmp").mkdir(parents=True)
    (history / ".archive_001.tmp" / "junk").write_text("half")
    (history / "archive_001").mkdir()
    (history / "archive_001" / "messages.jsonl").write_text("stale")
    folder = store.write_archive("s", archive, live[:4], "# WM", "abs\nsecond line")
    assert sorted(os.listdir(folder)) == [".abstract.md", ".done", ".overview.md", "archive.json", "messages.jsonl"]
    assert not (history / ".archive_001.tmp").exists()
    assert (folder / ".abstract.md").read_text() == "abs second line\n"
    stamp = {name: (folder / name).stat().st_mtime_ns for name in os.listdir(folder)}
    assert store.write_archive("s", archive, live[:4], "# other", "other") == folder
    assert {name: (folder / name).stat().st_mtime_ns for name in os.listdir(folder)} == stamp
    archived = (folder / "messages.jsonl").read_bytes().splitlines()
    original = (root / "sessions" / "s" / "messages.jsonl").read_bytes().splitlines()[:4]
    assert archived == original  # verbatim lines


def test_write_archive_validates_before_writing(store, root):
    store.append("s", texts(6))
    live = store.live_messages("s")
    good = {"archive_id": "archive_001", "session_id": "s", "source_turn_range": source_turn_range(live[:3])}
    cases = [
        ({**good, "archive_id": "archive_002"}, live[:3], InvalidInput),
        ({**good, "session_id": "t"}, live[:3], InvalidInput),
        (good, live[1:3], InvalidInput),
        ({**good, "source_turn_range": source_turn_range(live[1:3])}, live[1:3], InvalidInput),
        (good, [], InvalidInput),
        ("archive", live[:3], InvalidInput),
        ({**good, "archive_id": "bad"}, live[:3], InvalidInput),
    ]
    for archive, messages, error in cases:
        with pytest.raises(error):
            store.write_archive("s", archive, messages, "# WM", "abs")
    with pytest.raises(InvalidInput):
        store.write_archive("s", good, live[:3], "bad \ud800", "abs")
    assert not (root / "sessions" / "s" / "history").exists() or not os.listdir(root / "sessions" / "s" / "history")


def test_drop_covered_keeps_messages_appended_meanwhile(store):
    store.append("s", texts(10))
    archive_oldest(store, "s", 3, gc=False, record=False)
    store.append("s", texts(4, 100))
    store.drop_covered("s", 7)
    assert [m["seq"] for m in store.live_messages("s")] == list(range(8, 15))
    with pytest.raises(InvalidInput):
        store.drop_covered("s", 8)  # seq 8 is not archived
    with pytest.raises(InvalidInput):
        store.drop_covered("s", -1)


def test_record_commit_needs_a_complete_archive(store):
    store.append("s", texts(3))
    with pytest.raises(ArchiveNotFound):
        store.record_commit("s", {"archive_id": "archive_001"}, 2)
    with pytest.raises(InvalidInput):
        store.record_commit("s", "archive_001", 2)


def test_keep_count_is_clamped(store):
    store.append("s", texts(30))
    assert store.set_keep("s", 50_000)["keep_recent_count"] == 10_000
    meta = store.set_keep("s", -3)
    assert meta["keep_recent_count"] == 0 and meta["pending_tokens"] == sum(
        m["tokens"] for m in store.live_messages("s"))
    assert store.set_keep("s", ("tokens", 99_000_000))["keep"] == ["tokens", 10_000_000]
    meta = store.set_keep("s", "turns:2")
    assert meta["keep"] == ["turns", 2] and meta["keep_recent_count"] is None
    for bad in ("5", ("hours", 2), ("turns", -1), ("turns", 1.5), ["tokens"]):
        with pytest.raises(InvalidInput):
            store.set_keep("s", bad)


def test_hot_paths_never_list_history(store, monkeypatch):
    store.append("s", texts(20))
    for _ in range(3):
        archive_oldest(store, "s", 5)
        store.append("s", texts(5))

    def no_listing(path):
        raise AssertionError(f"listed {path}")

    monkeypatch.setattr(os, "listdir", no_listing)
    fresh = SessionStore(store.root, durable=False)
    for s in (store, fresh):
        s.append("s", texts(2))
        s.live_messages("s")
        s.meta("s")
        s.messages_in_range("s", 1, 40)
        assert s.next_archive_id("s") == "archive_004"


def test_threads_append_without_losing_or_duplicating(store):
    def worker(k):
        for i in range(40):
            store.append("s", [{"role": "user", "content": f"w{k} {i}"}])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [m["seq"] for m in store.live_messages("s")] == list(range(1, 161))
    assert store.meta("s")["message_count"] == 160


def test_a_filelock_on_the_session_lock_file_blocks_appends(store):
    store.append("s", texts(1))
    appended = threading.Event()
    with FileLock(store.session_dir("s") / ".lock"):
        worker = threading.Thread(target=lambda: (store.append("s", texts(1)), appended.set()))
        worker.start()
        assert not appended.wait(0.3)
    assert appended.wait(30)
    worker.join()
    assert store.meta("s")["message_count"] == 2


def test_other_process_appends_are_seen_by_a_cached_store(root):
    a, b = SessionStore(root, durable=False), SessionStore(root, durable=False)
    a.append("s", texts(12))
    b.append("s", texts(3))
    a.append("s", texts(1))
    assert [m["seq"] for m in b.live_messages("s")] == list(range(1, 17))
    assert a.meta("s")["pending_tokens"] == compute_pending_tokens(a.live_messages("s"), 10)
    archive_oldest(b, "s", 4)
    assert a.meta("s")["message_count"] == 4
    assert a.append("s", texts(1))[0]["seq"] == 17


def test_durable_false_skips_only_the_appends_fsync(tmp_path, monkeypatch):
    """`durable=False` leaves out the append's fsync; a commit's steps that replace or remove data
    (the archive, the live file's rewrite, a delete's tombstone) stay durable — they hold the only copy."""
    from workmem.state.files import fsutil

    store = SessionStore(tmp_path, durable=False)
    seen: list[tuple[str, bool]] = []
    for name in ("append_bytes", "atomic_write", "write_file", "publish_dir", "make_dirs"):
        real = getattr(fsutil, name)

        def spy(path, *args, _real=real, _name=name, durable=True, **kwargs):
            if os.path.basename(path) != ".meta.json":  # a cache of what the files imply, rebuilt from them
                seen.append((_name, durable))
            return _real(path, *args, durable=durable, **kwargs)

        monkeypatch.setattr(fsutil, name, spy)
    store.append("s", [{"role": "user", "content": f"message {i}"} for i in range(6)])
    appended = list(seen)
    seen.clear()
    messages = store.messages_in_range("s", 1, 4)
    archive = {"archive_id": "archive_001", "session_id": "s", "created_at": "2026-01-01T00:00:00+00:00",
               "source_turn_range": source_turn_range(messages)}
    store.write_archive("s", archive, messages, "# Working Memory\n\n## Session Title\nT\n", "T")
    store.drop_covered("s", 4)
    committed = list(seen)
    seen.clear()
    store.entomb("s", {"reason": "test"})
    assert ("append_bytes", False) in appended, "the append itself is not synced"
    assert committed and all(durable for _, durable in committed), [c for c in committed if not c[1]]
    assert seen and all(durable for _, durable in seen), seen


def test_closing_the_store_closes_the_live_files_it_kept_open(root):
    store = SessionStore(root, durable=False)
    for sid in ("a", "b"):
        store.append(sid, texts(1))
        store.append(sid, texts(1, start=1))
    held = [store._live[store.session_dir(sid)].appender[0] for sid in ("a", "b")]
    store.close()
    for fd in held:
        with pytest.raises(OSError):
            os.fstat(fd)
    store.append("a", texts(1, start=2))  # still usable
    assert [m["seq"] for m in store.live_messages("a")] == [1, 2, 3]
