"""The Postgres backend on its own: sessions and the live-rule column, typed errors, NUL-safe
rows, `check` with table and key, tasks, leases, delete, checkpoint pruning, and its own schema — the
foreign `checkpoints` tables of LangGraph in `public` stay exactly as they were."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest
from engine_helpers import assistant, user
from oracles import compute_pending_tokens, source_turn_range
from pg_support import required, start_server

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.state.errors import (
    ArchiveNotFound,
    CommitInProgress,
    DamagedFile,
    DatabaseUnavailable,
    InvalidInput,
    SessionNotFound,
)
from workmem.state.postgres.schema import shown_url
from workmem.state.postgres.storage import PostgresStorage
from workmem.state.storage import database_url_for, open_storage

WM = "# Working Memory\n\n## Session Title\nTest\n"


@pytest.fixture
def storage(database_url):
    opened = PostgresStorage(database_url, durable=False)
    yield opened
    opened.close()


def sql(url: str, query: str, args=None) -> list[tuple]:
    """Rows of one statement over a plain connection (search_path left at the server's default)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else []


def archive_oldest(store, session: str, count: int, **extra) -> dict:
    """Write the next archive over the `count` oldest live messages (what persist does)."""
    live = store.live_messages(session)[:count]
    archive = {"archive_id": store.next_archive_id(session), "session_id": session,
               "source_turn_range": source_turn_range(live), **extra}
    store.write_archive(session, archive, live, WM, "Test — archived")
    store.drop_covered(session, live[-1]["seq"])
    store.record_commit(session, archive, 2)
    return archive


# -- sessions -------------------------------------------------------------------------------------------

def test_appends_number_turns_and_keep_pending_tokens_as_the_files_do(storage):
    store = storage.sessions
    stored = store.append("s", [user("one"), {"role": "assistant", "content": "two"}, user("three")])
    assert [(m["seq"], m["turn_id"]) for m in stored] == [(1, "t1"), (2, "t1"), (3, "t2")]
    for batch in range(12):
        store.append("s", [user(f"more words in message {batch} " * (batch + 1))] * (batch % 3 + 1))
        live = store.live_messages("s")
        assert store.meta("s")["pending_tokens"] == compute_pending_tokens(live, 10)
    assert store.live_messages("s")[:3] == stored
    store.set_keep("s", ("messages", 3))
    assert store.meta("s")["pending_tokens"] == compute_pending_tokens(store.live_messages("s"), 3)
    meta = store.meta("s")
    assert meta["next_seq"] == meta["message_count"] + 1 == meta["total_message_count"] + 1 == 28
    assert meta["keep"] == ["messages", 3] and meta["keep_recent_count"] == 3
    assert meta["live_tokens"] == sum(m["tokens"] for m in store.live_messages("s"))


@pytest.mark.parametrize("keep", [("turns", 2), ("tokens", 40), ("turns", 0), ("tokens", 0)])
def test_pending_tokens_in_turns_and_tokens_follow_every_append_and_commit(storage, keep):
    store = storage.sessions
    store.append("s", [user("hello there")])
    meta = store.set_keep("s", keep)
    assert meta["keep"] == list(keep) and meta["keep_recent_count"] is None
    for batch in range(8):
        store.append("s", [user(f"question {batch} " * (batch + 1)), assistant(f"answer {batch}")])
        live = store.live_messages("s")
        meta = store.meta("s")
        assert meta["pending_tokens"] == compute_pending_tokens(live, keep), batch
        assert meta["live_tokens"] == sum(m["tokens"] for m in live)
    store.append("s", [user("one more before the archive")])
    live = store.live_messages("s")[:6]
    archive = {"archive_id": store.next_archive_id("s"), "session_id": "s",
               "source_turn_range": source_turn_range(live)}
    store.write_archive("s", archive, live, WM, "Test — archived")
    meta = store.record_commit("s", archive, keep)
    assert meta["pending_tokens"] == compute_pending_tokens(store.live_messages("s"), keep)
    assert meta["live_tokens"] == sum(m["tokens"] for m in store.live_messages("s"))
    assert storage.sessions.check("s") == []


def test_hidden_messages_are_live_ones_and_shown_wins(storage):
    store = storage.sessions
    store.append("s", [user(f"message {i}") for i in range(6)])
    assert store.hidden("s") == set()
    assert store.set_hidden("s", {2, 3, 99, "x"}, set()) == {2, 3}  # unknown seqs and non-ints name nothing
    assert store.set_hidden("s", {4}, {3, 4}) == {2}  # shown wins over hidden
    assert store.hidden("s") == {2}
    archive_oldest(store, "s", 3)  # seq 2 is archived: no longer a hidden live message
    assert store.hidden("s") == set()
    assert store.set_hidden("s", {1, 5}, set()) == {5}
    with pytest.raises(SessionNotFound):
        store.set_hidden("nobody", {1}, set())


def test_an_archive_is_one_transaction_that_decides_what_is_live(storage):
    store = storage.sessions
    store.append("s", [user(f"message {i}") for i in range(10)])
    archive = archive_oldest(store, "s", 6, task_id="t-1")
    assert [m["seq"] for m in store.live_messages("s")] == [7, 8, 9, 10]
    assert [m["seq"] for m in store.archive_messages("s", "archive_001")] == list(range(1, 7))
    assert [m["seq"] for m in store.messages_in_range("s", 5, 8)] == [5, 6, 7, 8]
    meta = store.meta("s")
    assert meta["last_archive"] == {"id": "archive_001", "end_seq": 6} and meta["commit_count"] == 1
    assert meta["pending_tokens"] == compute_pending_tokens(store.live_messages("s"), 2)
    assert store.read_archive("s", "archive_1")["task_id"] == "t-1"  # loosely typed ids are found
    assert store.last_complete_archive("s")["working_summary"]["markdown"] == WM
    assert store.list_archives("s") == [{"archive_id": "archive_001", "abstract": "Test — archived",
                                         "start_seq": 1, "end_seq": 6}]
    assert store.write_archive("s", archive, store.archive_messages("s", "archive_001"), WM, "again")  # no-op
    assert store.read_archive("s", "archive_001")["abstract"] == "Test — archived"


def test_an_archive_must_cover_exactly_the_oldest_live_messages(storage):
    store = storage.sessions
    store.append("s", [user(f"message {i}") for i in range(6)])
    live = store.live_messages("s")
    skipping = {"archive_id": "archive_001", "session_id": "s", "source_turn_range": source_turn_range(live[2:4])}
    with pytest.raises(InvalidInput, match="oldest live messages"):
        store.write_archive("s", skipping, live[2:4], WM, "x")
    wrong_id = {"archive_id": "archive_002", "session_id": "s", "source_turn_range": source_turn_range(live[:2])}
    with pytest.raises(InvalidInput, match="archive_001"):
        store.write_archive("s", wrong_id, live[:2], WM, "x")
    assert store.live_messages("s") == live and store.list_archives("s") == []  # rolled back whole
    with pytest.raises(InvalidInput, match="not archived"):
        store.drop_covered("s", 3)


def test_unknown_sessions_and_archives_are_typed_errors(storage):
    store = storage.sessions
    with pytest.raises(SessionNotFound):
        store.meta("nobody")
    with pytest.raises(SessionNotFound):
        store.live_messages("nobody")
    store.append("s", [user("x")])
    for archive_id in ("archive_001", "archive_999", "../../etc", "nope"):
        with pytest.raises(ArchiveNotFound):
            store.read_archive("s", archive_id)
    with pytest.raises(InvalidInput):
        store.read_archive("s", 7)
    with pytest.raises(InvalidInput):
        store.append("", [user("x")])
    with pytest.raises(InvalidInput, match="NUL"):  # a typed error, not a driver's DataError
        store.append("a\x00b", [user("x")])
    with pytest.raises(InvalidInput, match="role"):
        store.append("s", [user("ok"), {"role": "wizard", "content": "x"}])
    assert [m["seq"] for m in store.live_messages("s")] == [1], "a refused batch stores nothing"


def test_nul_and_odd_text_survive_byte_for_byte(storage):
    store = storage.sessions
    odd = [{"role": "user", "content": "a\x00b \u2028 \U0001F600 '; DROP TABLE messages; --"},
           {"role": "assistant", "content": "ok", "meta": {"k\x00ey": "v\x00", "n": 1.5, "deep": [[{"x": None}]]}}]
    stored = store.append("odd id / with ü", odd)
    again = store.live_messages("odd id / with ü")
    assert again == stored
    assert again[0]["parts"][0]["text"] == odd[0]["content"] and again[1]["meta"]["k\x00ey"] == "v\x00"
    assert store.list_sessions() == ["odd id / with ü"]


def test_hundreds_of_concurrent_appends_to_two_sessions(storage):
    def write(session: str, worker: int) -> None:
        for i in range(40):
            storage.sessions.append(session, [user(f"{worker}:{i}")])

    threads = [threading.Thread(target=write, args=(s, w)) for s in ("a", "b") for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for session in ("a", "b"):
        live = storage.sessions.live_messages(session)
        assert [m["seq"] for m in live] == list(range(1, 161))
        for w in range(4):
            assert [m["parts"][0]["text"] for m in live if m["parts"][0]["text"].startswith(f"{w}:")] == [
                f"{w}:{i}" for i in range(40)]
        assert storage.sessions.check(session) == []


def test_one_batch_sent_at_once_by_two_replicas_to_a_new_session_is_stored_once(database_url):
    """Two engines (a retried request landing on a second replica) append the same id'd batch to a session that
    does not exist yet — or was just deleted: the second waits for the first's new row and finds its messages."""
    replicas = [WorkingMemoryEngine(database_url=database_url, durable=False) for _ in range(2)]
    batch = [{**user("Deploy the build."), "id": "u1"}, {**assistant("Deploying."), "id": "a1"}]
    try:
        for trial in range(12):
            session = f"s{trial}"
            if trial % 3 == 2:  # a session deleted just before: its row is gone as for a new one
                replicas[0].add_messages(session, [user("old")])
                replicas[0].delete_session(session)
            start = threading.Barrier(2)

            def send(engine: WorkingMemoryEngine, session: str = session, start: threading.Barrier = start) -> None:
                start.wait()
                engine.add_messages(session, batch)

            threads = [threading.Thread(target=send, args=(r,)) for r in replicas]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            live = replicas[1].live_messages(session)
            assert [(m["seq"], m["meta"]["lc_id"]) for m in live] == [(1, "u1"), (2, "a1")], (trial, live)
    finally:
        for r in replicas:
            r.close()


def test_one_batch_sent_by_two_replicas_while_a_delete_of_the_session_runs_is_stored_once(database_url):
    """The delete holds the session row when both appends lock it; once it commits, their lock finds no row: each
    creates it again and locks that, so the second still waits for the first and finds its messages."""
    replicas = [WorkingMemoryEngine(database_url=database_url, durable=False) for _ in range(2)]
    batch = [{**user("Deploy the build."), "id": "u1"}, {**assistant("Deploying."), "id": "a1"}]
    try:
        replicas[0].add_messages("s", [user("old")])
        with psycopg.connect(database_url) as deleting:  # a delete_session that locked the row and is still busy
            deleting.execute("SELECT 1 FROM workmem.sessions WHERE session_id = 's' FOR UPDATE")
            threads = [threading.Thread(target=r.add_messages, args=("s", batch)) for r in replicas]
            for t in threads:
                t.start()
            time.sleep(0.5)  # both appends found the row and wait for its lock
            deleting.execute("DELETE FROM workmem.messages WHERE session_id = 's'")
            deleting.execute("DELETE FROM workmem.sessions WHERE session_id = 's'")
            deleting.commit()
        for t in threads:
            t.join()
        live = replicas[1].live_messages("s")
        assert [(m["seq"], m["meta"]["lc_id"]) for m in live] == [(1, "u1"), (2, "a1")], live
    finally:
        for r in replicas:
            r.close()


def test_a_next_seq_left_behind_by_hand_or_an_old_backup_never_takes_a_stored_seq(storage, database_url):
    store = storage.sessions
    store.append("s", [user(f"m{i}") for i in range(6)])
    sql(database_url, "UPDATE workmem.sessions SET next_seq = 3 WHERE session_id = 's'")
    assert any("next_seq is 3" in a.reason for a in store.check("s"))
    stored = store.append("s", [user("next")])  # was a raw UniqueViolation on every append
    assert [m["seq"] for m in stored] == [7]
    assert [m["parts"][0]["text"] for m in store.live_messages("s")] == [f"m{i}" for i in range(6)] + ["next"]
    assert not any("next_seq" in a.reason for a in store.check("s"))


def test_check_names_table_and_key_of_what_was_changed_by_hand(storage, database_url):
    store = storage.sessions
    store.append("s", [user(f"m{i}") for i in range(8)])
    archive_oldest(store, "s", 4)
    assert store.check("s") == []
    sql(database_url, "DELETE FROM workmem.messages WHERE session_id = 's' AND seq = 6")
    sql(database_url, "UPDATE workmem.messages SET archive_id = NULL WHERE session_id = 's' AND seq = 2")
    found = {(a.path, a.reason) for a in store.check("s")}
    assert any("workmem.messages (session_id='s')" in p and "missing" in r for p, r in found), found
    assert any("archive_id='archive_001'" in p and "covers seqs 1..4" in r for p, r in found), found
    assert any("live although the last archive ends after them" in r for p, r in found), found
    sql(database_url, "UPDATE workmem.sessions SET message_count = 99, pending_tokens = 7 WHERE session_id = 's'")
    reasons = [(a.path, a.reason) for a in store.check("s")]
    for field in ("message_count is 99", "pending_tokens is 7"):
        assert any(p.startswith("workmem.sessions (session_id='s')") and field in r for p, r in reasons), reasons
    assert all(a.line_no == 0 for a in store.check("s"))


DAMAGED_ROWS = {
    "parts null": "UPDATE workmem.messages SET parts = 'null' WHERE session_id = 's' AND seq = 28",
    "parts an object": "UPDATE workmem.messages SET parts = '{\"text\": \"hi\"}' WHERE session_id = 's' AND seq = 28",
    "meta a list": "UPDATE workmem.messages SET meta = '[1]' WHERE session_id = 's' AND seq = 28",
    "exact_body without meta": "UPDATE workmem.messages SET exact_body = '{\"parts\": []}' "
                               "WHERE session_id = 's' AND seq = 28",
    "a text part a number": "UPDATE workmem.messages SET parts = '[{\"type\": \"text\", \"text\": 5}]' "
                            "WHERE session_id = 's' AND seq = 28",
    "a payload size not a number": "UPDATE workmem.messages SET parts = '[{\"type\": \"text\", \"text\": \"x\", "
                                   "\"content_ref\": \"r\", \"sha256\": \"00\", \"size\": \"big\"}]' "
                                   "WHERE session_id = 's' AND seq = 28",
    "a live row deleted": "DELETE FROM workmem.messages WHERE session_id = 's' AND seq = 28",
    "the oldest live row's parts null": "UPDATE workmem.messages SET parts = 'null' "
                                        "WHERE session_id = 's' AND seq = 27",
}


@pytest.mark.parametrize("damage", list(DAMAGED_ROWS))
def test_a_row_changed_by_hand_is_left_out_reported_and_never_blocks_a_commit(database_url, damage):
    """As the files backend does with a damaged line: every read leaves the row out, `check` names it by table
    and key (it never raises), and commits go on — the row itself stays as it is, archived with its range."""
    talk_ = [{"role": "user" if i % 2 == 0 else "assistant", "id": f"m{i}", "content": f"line {i}"}
             for i in range(30)]
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        engine.add_messages("s", talk_)
        engine.commit("s", keep_recent_count=4)  # archive_001 = 1..26, live 27..30
    sql(database_url, DAMAGED_ROWS[damage])
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        problems = engine.check("s")
        oldest = damage.startswith("the oldest")
        damaged_seq = 27 if oldest else 28
        assert any(f"seq={damaged_seq}" in p["file"] or f"seq {damaged_seq}" in p["problem"]
                   or "missing" in p["problem"] for p in problems), problems
        readable = damage == "a payload size not a number"  # read as its preview with a note, as on files
        assert [m["seq"] for m in engine.live_messages("s")] == (
            [27, 28, 29, 30] if readable else [28, 29, 30] if oldest else [27, 29, 30])
        engine.assemble("s")
        engine.forget_messages("s", [29])
        engine.add_messages("s", [{"role": "user", "id": f"x{i}", "content": f"more {i}"} for i in range(6)])
        report = engine.commit("s", keep_recent_count=2)
        assert report["status"] == "completed", report
        assert [m["seq"] for m in engine.live_messages("s")] == [35, 36]
        assert engine.commit("s", keep_recent_count=1)["status"] in ("completed", "skipped")
        stored = {r[0] for r in sql(database_url, "SELECT seq FROM workmem.messages WHERE session_id = 's'")}
        assert stored == set(range(1, 37)) - ({28} if damage == "a live row deleted" else set()), "nothing deleted"
        if oldest:  # archived with the range it starts: the archives still chain, only the row itself is reported
            assert [p["problem"] for p in engine.check("s")] == [
                p["problem"] for p in problems if "seq=27" in p["file"]]


@pytest.mark.parametrize("damage", ["meta = '[1]'", "parts = 'null'", "exact_body = '{\"parts\": []}'",
                                    "parts = '\"my secret passphrase is zanzibarquokka\"', "
                                    "meta = '{\"workmem_forgotten\": \"2020\"}'"])
def test_forgetting_a_row_changed_by_hand_removes_its_text_all_the_same(database_url, damage):
    talk_ = [{"role": "user" if i % 2 == 0 else "assistant", "id": f"m{i}", "content": f"line {i}"}
             for i in range(10)]
    talk_[3]["content"] = "my secret passphrase is zanzibarquokka"
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        engine.add_messages("s", talk_)
    sql(database_url, f"UPDATE workmem.messages SET {damage} WHERE session_id = 's' AND seq = 4")
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        assert engine.forget_messages("s", [4])["forgotten"] == [4]
        engine.commit("s", keep_recent_count=2)
        assert engine.archive_search("s", "zanzibarquokka") == []
    left = sql(database_url, "SELECT parts::text || meta::text || coalesce(exact_body::text, '') || content "
                             "FROM workmem.messages WHERE session_id = 's' AND seq = 4")
    assert "zanzibarquokka" not in left[0][0]


def test_an_archive_row_without_its_object_is_a_typed_damaged_file(database_url):
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        engine.add_messages("s", [user(f"m{i}") for i in range(8)])
        engine.commit("s", keep_recent_count=2)
    sql(database_url, "UPDATE workmem.archives SET object = 'null' WHERE session_id = 's'")
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        for read in (lambda: engine.assemble("s"), lambda: engine.read_archive("s", "archive_001")):
            with pytest.raises(DamagedFile, match="archive_id='archive_001'"):
                read()


# -- tasks and leases -----------------------------------------------------------------------------------

def test_tasks_round_trip_redacted_and_ordered(storage):
    tasks = storage.tasks
    first = tasks.create_task("s", task_id="a", status="pending")
    tasks.create_task("s", task_id="b")
    tasks.create_task("other", task_id="c", status="running")
    with pytest.raises(InvalidInput, match="exists"):
        tasks.create_task("s", task_id="a")
    assert first["thread_id"] == "s/commit/a"
    updated = tasks.update_task("a", status="failed", error="boom sk-abcdefghijklmnop1234\x00", attempts=2,
                                result={"route": ["x"], "n": None}, archive_id="archive_3")
    assert "sk-abcdefghijklmnop1234" not in updated["error"] and updated["attempts"] == 2
    assert updated["result"] == {"route": ["x"], "n": None} and updated["archive_id"] == "archive_003"
    assert [t["task_id"] for t in tasks.list_tasks("s")] == ["a", "b"]
    assert [t["task_id"] for t in tasks.list_tasks(status="running")] == ["c"]
    for bad in ({"status": "done"}, {"attempts": -1}, {"owner": "x"}):
        with pytest.raises(InvalidInput):
            tasks.update_task("a", **bad)
    with pytest.raises(InvalidInput, match="no such task"):
        tasks.update_task("zzz", status="failed")


def test_threads_to_prune_are_completed_commits_beyond_the_newest_kept(storage):
    tasks = storage.tasks
    for name in "abcde":
        tasks.create_task("s", task_id=name)
        tasks.update_task(name, status="completed")
    tasks.create_task("s", task_id="studio", thread_id="studio:thread")
    tasks.update_task("studio", status="completed")
    # the newest `keep` completed tasks are kept whatever their thread (as in the file backend)
    assert [t["task_id"] for t in tasks.threads_to_prune(2)] == ["d", "c", "b", "a"]
    tasks.forget_thread("b")
    assert [t["task_id"] for t in tasks.threads_to_prune(2)] == ["d", "c", "a"]
    assert tasks.get_task("b")["thread_id"] is None


def test_a_lease_is_one_row_taken_when_free_or_expired(database_url):
    now = [1000.0]
    storage = PostgresStorage(database_url, clock=lambda: now[0])
    tasks = storage.tasks
    try:
        assert tasks.acquire_lease("s", "t1", "me", ttl=60) is None
        assert tasks.acquire_lease("s", "t1", "me", ttl=60) is None, "ours already"
        assert tasks.acquire_lease("s", "t1", "someone else", ttl=60) == "t1", "same task, another process"
        assert tasks.acquire_lease("s", "t2", "me", ttl=60) == "t1"
        assert tasks.acquire_lease("other", "t3", "me", ttl=60) is None, "sessions are independent"
        assert tasks.lease_holder("s")["task_id"] == "t1"
        now[0] += 61
        assert tasks.lease_holder("s") is None
        assert tasks.acquire_lease("s", "t2", "you", ttl=60) is None, "an expired lease is taken over"
        assert tasks.renew_lease("s", "t1") is False and tasks.renew_lease("s", "t2") is True
        tasks.release_lease("s", "t1")
        assert tasks.lease_holder("s")["task_id"] == "t2", "only the holder releases"
        tasks.release_lease("s", "t2")
        assert tasks.lease_holder("s") is None
        with pytest.raises(InvalidInput):
            tasks.acquire_lease("s", "t4", "me", ttl=0)
    finally:
        storage.close()


def test_many_threads_race_for_one_lease_and_one_wins(storage):
    barrier = threading.Barrier(8)
    won: list[str] = []

    def take(i: int) -> None:
        barrier.wait()
        if storage.tasks.acquire_lease("s", f"task-{i}", f"owner-{i}") is None:
            won.append(f"task-{i}")

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and storage.tasks.lease_holder("s")["task_id"] == won[0]


# -- engine level: delete, pruning, selection ------------------------------------------------------------

def conversation(turns: int) -> list[dict]:
    """`turns` user/assistant pairs, each naming its topic."""
    return [m for t in range(turns) for m in (user(f"Question {t} about topic{t}"),
                                              {"role": "assistant", "content": f"Answer {t}: detail{t}"})]


def test_delete_removes_rows_tasks_and_checkpoint_threads_in_one_go(database_url):
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        engine.add_messages("gone", conversation(4))
        engine.add_messages("kept", conversation(4))
        for session in ("gone", "kept"):
            assert engine.commit(session, keep_recent_count=2)["status"] == "completed"
        threads = sql(database_url, "SELECT count(DISTINCT thread_id) FROM workmem.checkpoints "
                                    "WHERE thread_id LIKE 'gone/%%'")[0][0]
        assert threads == 1
        holder = engine.storage.tasks.acquire_lease("gone", "running-commit", "elsewhere", ttl=600)
        assert holder is None
        with pytest.raises(CommitInProgress):
            engine.delete_session("gone")
        engine.storage.tasks.release_lease("gone", "running-commit")
        assert engine.delete_session("gone") == {"deleted": True, "session_id": "gone"}
        with pytest.raises(SessionNotFound):
            engine.session_info("gone")
        for table in ("messages", "archives", "sessions", "tasks", "leases"):
            assert sql(database_url, f"SELECT count(*) FROM workmem.{table} WHERE session_id = 'gone'") == [(0,)]
        assert sql(database_url, "SELECT count(*) FROM workmem.checkpoints WHERE thread_id LIKE 'gone/%%'") == [(0,)]
        assert engine.session_info("kept")["commit_count"] == 1
        assert engine.add_messages("gone", [user("again")])[0]["seq"] == 1, "the id starts over at seq 1"


def test_checkpoint_threads_of_completed_commits_are_pruned(database_url):
    with WorkingMemoryEngine(database_url=database_url, durable=False, keep_checkpoints=2) as engine:
        for turn in range(5):
            engine.add_messages("p", conversation(turn + 2)[-4:])
            assert engine.commit("p", keep_recent_count=0)["status"] == "completed"
        threads = sql(database_url, "SELECT DISTINCT thread_id FROM workmem.checkpoints")
        kept = [t["thread_id"] for t in engine.storage.tasks.list_tasks("p") if t["thread_id"]]
        assert sorted(t for (t,) in threads) == sorted(kept) and len(kept) == 2
        sql(database_url, "UPDATE workmem.tasks SET thread_id = NULL")
        assert engine.repair() == {"moved_aside": None, "orphan_threads_deleted": 2}


def test_selection_precedence(monkeypatch, tmp_path):
    for name in ("WORKMEM_DATABASE_URL", "WORKMEM_HOME", "POSTGRES_URI"):
        monkeypatch.delenv(name, raising=False)
    pg, platform = "postgresql://a/x", "postgresql://platform/y"
    assert database_url_for() is None
    monkeypatch.setenv("POSTGRES_URI", platform)
    assert database_url_for() == platform
    monkeypatch.setenv("WORKMEM_HOME", str(tmp_path))
    assert database_url_for() is None, "WORKMEM_HOME beats POSTGRES_URI"
    monkeypatch.setenv("WORKMEM_DATABASE_URL", pg)
    assert database_url_for() == pg
    assert database_url_for(root=tmp_path) is None, "root= never moves a user onto Postgres"
    assert database_url_for(root=tmp_path, url="postgresql://given/z") == "postgresql://given/z"
    with pytest.raises(InvalidInput, match="database_url"):
        open_storage(database_url="mysql://nope")
    with pytest.raises(InvalidInput, match="schema"):
        PostgresStorage("postgresql://unused/x", schema="Bad-Name")
    with pytest.raises(DatabaseUnavailable) as err:  # at once, one typed error, no password shown
        PostgresStorage(f"postgresql://ada:s3cret@/x?host={tmp_path}")
    assert "s3cret" not in str(err.value) and "ada:***@" in str(err.value)


def test_the_engine_picks_postgres_from_the_environment(database_url, monkeypatch):
    monkeypatch.delenv("WORKMEM_HOME", raising=False)
    monkeypatch.setenv("POSTGRES_URI", database_url)
    with WorkingMemoryEngine(durable=False) as engine:
        assert isinstance(engine.storage, PostgresStorage) and engine.root is None
        engine.add_messages("env", [user("hello")])
    assert sql(database_url, "SELECT count(*) FROM workmem.messages") == [(1,)]


# -- its own schema ---------------------------------------------------------------------------------------

def public_snapshot(url: str) -> dict:
    """Every table, column, index and row of `public`, plus the schemas and extensions of the database."""
    tables = [t for (t,) in sql(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")]
    return {
        "tables": tables,
        "columns": sql(url, "SELECT table_name, column_name, data_type FROM information_schema.columns "
                            "WHERE table_schema = 'public' ORDER BY 1, 2"),
        "indexes": sql(url, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"),
        "rows": {t: sorted(r[0] for r in sql(url, f'SELECT row_to_json(x)::text FROM public."{t}" x')) for t in tables},
        "schemas": sql(url, "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg_%%' ORDER BY 1"),
    }


def test_langgraphs_own_checkpoint_tables_in_public_are_left_untouched(database_url):
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(database_url) as agent_saver:  # the agent's checkpointer, in public
        agent_saver.setup()
        config = {"configurable": {"thread_id": "agent-thread", "checkpoint_ns": ""}}
        saved = agent_saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        agent_saver.put_writes(saved, [("messages", "hello")], "task-1")
    sql(database_url, "CREATE TABLE public.sessions (id serial PRIMARY KEY, note text)")  # a name we use too
    sql(database_url, "INSERT INTO public.sessions (note) VALUES ('someone else''s')")
    before = public_snapshot(database_url)
    assert {"checkpoints", "checkpoint_writes", "checkpoint_blobs", "checkpoint_migrations"} <= set(before["tables"])

    with WorkingMemoryEngine(database_url=database_url, durable=False, keep_checkpoints=1) as engine:
        for turn in range(3):
            engine.add_messages("mine", conversation(turn + 2)[-4:])
            assert engine.commit("mine", keep_recent_count=1)["status"] == "completed"
        assert engine.archive_search("mine", "topic1")
        engine.repair()
        engine.delete_session("mine")

    after = public_snapshot(database_url)
    assert after == {**before, "schemas": sorted([*before["schemas"], ("workmem",)])}
    ours = [t for (t,) in sql(database_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'workmem'")]
    assert {"checkpoints", "checkpoint_writes", "checkpoint_blobs", "sessions", "messages"} <= set(ours)


@pytest.mark.slow
def test_replicas_starting_together_set_the_schema_and_checkpointer_up_once(database_url):
    """Six processes open a fresh database at once: none hangs (setup's CREATE INDEX CONCURRENTLY waits for
    open transactions, so no process may wait for the setup lock inside one) and none fails."""
    code = ("import sys\nfrom workmem.state.postgres.storage import PostgresStorage\n"
            "storage = PostgresStorage(sys.argv[1])\n"
            "storage.sessions.append('x', [{'role': 'user', 'content': 'hi'}])\n"
            "storage.checkpointer()\nstorage.close()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, database_url], stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    try:
        errors = [p.communicate(timeout=90)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * 6, errors
    assert sql(database_url, "SELECT count(*) FROM workmem.messages") == [(6,)]


def test_an_evaluation_on_postgres_runs_in_a_scratch_schema_it_drops(database_url):
    """`--database-url` evaluations never meet or leave sessions in the real schema; the schema holding pg_trgm
    (which the others use) is never dropped."""
    from workmem.graphs.eval.recall import measure_search_recall
    from workmem.state.storage import drop_database_schema

    sample = {"sample_id": "tiny", "conversation": {"speaker_a": "Ana", "speaker_b": "Bo", "session_1": [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound called Pixel."},
        {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely, which shelter?"}]},
        "qa": [{"question": "What dog did Ana adopt?", "answer": "greyhound", "evidence": ["D1:1"], "category": 4}]}
    results = measure_search_recall(sample, database_url=database_url)
    assert results["styles"]["question"]["overall"]["found"] == 1
    schemas = {r[0] for r in sql(database_url, "SELECT nspname FROM pg_namespace")}
    assert "workmem" in schemas and not any(s.startswith("workmem_eval") for s in schemas)
    assert sql(database_url, "SELECT count(*) FROM workmem.sessions") == [(0,)]
    with pytest.raises(InvalidInput, match="pg_trgm"):
        drop_database_schema(database_url, "workmem")


# -- a database that goes away during use -----------------------------------------------------------------

def drop_connections(url: str) -> int:
    """Terminate every other connection to the test database (what a failover or a restart does to a pool)."""
    return len(sql(url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"))


class DroppingModel(ExtractiveChatModel):
    """The offline model, cutting every connection of the database in the middle of its first call."""

    url: str = ""
    dropped: int = 0

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if not self.dropped:
            self.dropped = drop_connections(self.url)
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_connections_the_server_dropped_are_replaced_even_inside_a_commit(database_url):
    model = DroppingModel(url=database_url)
    with WorkingMemoryEngine(database_url=database_url, model=model, durable=False, keep=("messages", 2)) as engine:
        engine.add_messages("s", [user(f"message {i} about src/app_{i}.py") for i in range(8)])
        assert drop_connections(database_url) >= 1
        engine.add_messages("s", [{**user("after the drop"), "id": "m-after"}])
        assert engine.commit("s")["status"] == "completed" and model.dropped >= 1
        engine.add_messages("s", [{**user("after the drop"), "id": "m-after"}])  # a retry: stored once
        stored = engine.storage.sessions.messages_in_range("s", 1, 100)
        assert [m["seq"] for m in stored] == list(range(1, 10)), "every message once, in order"
        assert [m["parts"][0]["text"] for m in stored][-1] == "after the drop"
        assert engine.working_memory("s")["archive_id"] == "archive_001"


def test_a_database_that_is_gone_is_a_typed_error_and_a_failed_commit(database_url):
    with WorkingMemoryEngine(database_url=database_url, durable=False, keep=("messages", 2)) as engine:
        engine.add_messages("s", [user(f"message {i}") for i in range(6)])
        engine.storage.db.pool.close()  # what a server that stays down looks like to the pool
        with pytest.raises(DatabaseUnavailable) as err:
            engine.add_messages("s", [user("lost?")])
        assert not isinstance(err.value, psycopg.Error) and isinstance(err.value, ConnectionError)
        assert "postgres@" in str(err.value) and err.value.reason
        result = engine.runner.start("s", ("messages", 2), wait=True)
        assert result["status"] == "failed" and "unavailable" in result["reason"], result
    assert sql(database_url, "SELECT count(*) FROM workmem.messages") == [(6,)], "what was stored is intact"


@pytest.mark.parametrize("url", ["postgresql://ada:s3cret@db/x", "postgresql://ada@db/x?password=s3cret&port=1",
                                 "host=db dbname=x password=s3cret user=ada", "host=db password='s3 cret' user=a"])
def test_every_form_of_a_password_is_masked(url):
    shown = shown_url(url)
    assert "s3cret" not in shown and "s3 cret" not in shown and "***" in shown


def test_a_database_error_text_carries_no_password(database_url, caplog):
    url = database_url + "&password=hunter2-SECRET"
    with WorkingMemoryEngine(database_url=url, durable=False) as engine:
        engine.add_messages("s", [user("hi")])
        engine.storage.db.pool.close()
        with pytest.raises(DatabaseUnavailable) as err:
            engine.add_messages("s", [user("again")])
        result = engine.runner.start("s", ("messages", 0), wait=True)
    assert "hunter2" not in str(err.value) and "hunter2" not in result["reason"]
    assert not [r for r in caplog.records if "hunter2" in r.getMessage()]


def test_an_in_doubt_commit_retried_by_the_caller_stores_once(database_url, monkeypatch):
    """The server committed, the connection died before the client heard it:
    the caller sees DatabaseUnavailable, retries the batch with its ids, and every message is stored once."""
    from contextlib import contextmanager

    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        db = engine.storage.db
        real, lost = db.transaction, []

        @contextmanager
        def committed_then_lost(*args, **kwargs):
            with real(*args, **kwargs) as conn:
                yield conn
            if not lost:
                lost.append(1)
                raise DatabaseUnavailable(shown_url(db.url), "server closed the connection unexpectedly")

        monkeypatch.setattr(db, "transaction", committed_then_lost)
        batch = [{**user(f"question {i}"), "id": f"q{i}"} for i in range(3)]
        with pytest.raises(DatabaseUnavailable):
            engine.add_messages("s", batch)
        again = engine.add_messages("s", batch)
        assert [m["seq"] for m in again] == [1, 2, 3]
        assert sql(database_url, "SELECT count(*) FROM workmem.messages") == [(3,)], "stored once"


def test_connections_dropped_again_and_again_under_load_lose_nothing_and_every_error_is_typed(database_url):
    """What a restart does to a loaded pool, eight times over: writers retry each batch (with ids) until it
    is stored; afterwards every batch is there once, in order, and nothing but DatabaseUnavailable was seen."""
    errors: list[BaseException] = []
    stop = threading.Event()
    with WorkingMemoryEngine(database_url=database_url, durable=False) as engine:
        def writer(w: int) -> None:
            for b in range(15):
                batch = [{**user(f"writer {w} batch {b} msg {i}"), "id": f"w{w}-b{b}-m{i}"} for i in range(3)]
                while True:
                    try:
                        engine.add_messages(f"s{w}", batch)
                        break
                    except Exception as exc:  # noqa: BLE001 - every error is recorded and checked below
                        errors.append(exc)

        def dropper() -> None:
            for _ in range(8):
                if stop.wait(0.05):
                    return
                drop_connections(database_url)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        killer = threading.Thread(target=dropper)
        for t in [*threads, killer]:
            t.start()
        for t in threads:
            t.join(120)
        stop.set()
        killer.join()
        drop_connections(database_url)  # every idle connection dead: the reads below must not stall on them
        for w in range(4):
            texts = [m["parts"][0]["text"] for m in engine.storage.sessions.live_messages(f"s{w}")]
            assert texts == [f"writer {w} batch {b} msg {i}" for b in range(15) for i in range(3)], w
    assert all(isinstance(e, DatabaseUnavailable) for e in errors), {type(e).__name__ for e in errors}


def retried_writers(engine: Any, writers: int, batches: int, errors: list[BaseException]) -> list[threading.Thread]:
    """Threads appending `batches` batches of 3 messages (with ids) to sessions s0…, each retried until stored."""
    def writer(w: int) -> None:
        for b in range(batches):
            batch = [{**user(f"writer {w} batch {b} msg {i}"), "id": f"w{w}-b{b}-m{i}"} for i in range(3)]
            while True:
                try:
                    engine.add_messages(f"s{w}", batch)
                    break
                except Exception as exc:  # noqa: BLE001 - every error is recorded and checked by the caller
                    errors.append(exc)
                    time.sleep(0.05)

    return [threading.Thread(target=writer, args=(w,)) for w in range(writers)]


@pytest.mark.slow
def test_a_server_restart_mid_load_loses_nothing_and_every_error_is_typed():
    """A real restart (`pg_ctl restart -m immediate`, a server of this test's own) while four writers append
    and a commit runs: the same engine goes on without being reopened, every batch is stored once and in
    order, and nothing but DatabaseUnavailable reached a caller."""
    try:
        server = start_server()
    except RuntimeError as exc:
        if required():
            raise
        pytest.skip(str(exc))
    errors: list[BaseException] = []
    try:
        url = server.create_database()
        with WorkingMemoryEngine(database_url=url, keep=("messages", 2)) as engine:  # durable: acknowledged = kept
            engine.add_messages("c", [user(f"message {i} about src/app_{i}.py") for i in range(12)])
            threads = retried_writers(engine, writers=4, batches=30, errors=errors)
            for t in threads:
                t.start()
            time.sleep(0.3)
            server.restart()
            for t in threads:
                t.join(180)
            assert not any(t.is_alive() for t in threads), "a writer never got through after the restart"
            for w in range(4):
                texts = [m["parts"][0]["text"] for m in engine.storage.sessions.live_messages(f"s{w}")]
                assert texts == [f"writer {w} batch {b} msg {i}" for b in range(30) for i in range(3)], w
            server.restart()  # between two calls: the next commit finds every pooled connection dead
            assert engine.commit("c", keep_recent_count=2)["status"] == "completed"
            assert [m["seq"] for m in engine.live_messages("c")] == [11, 12]
            assert len(engine.archive_messages("c", "archive_001")) == 10
    finally:
        server.stop()
    assert all(isinstance(e, DatabaseUnavailable) for e in errors), {f"{type(e).__name__}: {e}" for e in errors}


def test_a_schema_made_before_the_index_of_forgotten_rows_gets_it_and_stays_readable_by_older_builds(database_url):
    """The index that finds a forgotten message in any archive is no new schema version: a database a build
    before it made gets it at the next open, and its version stays what older builds read."""
    PostgresStorage(database_url, durable=False).close()
    sql(database_url, "DROP INDEX workmem.messages_forgotten")
    version = sql(database_url, "SELECT max(version) FROM workmem.workmem_schema")
    PostgresStorage(database_url, durable=False).close()
    assert sql(database_url, "SELECT indexname FROM pg_indexes WHERE schemaname = 'workmem' "
                             "AND indexname = 'messages_forgotten'") == [("messages_forgotten",)]
    assert sql(database_url, "SELECT max(version) FROM workmem.workmem_schema") == version == [(2,)]
