"""Commit tasks and session leases in index.sqlite."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from workmem.state.errors import InvalidInput
from workmem.state.files.tasks import TaskStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def index(root, clock):
    ix = TaskStore(root, clock=clock)
    yield ix
    ix.close()


# -- tasks -------------------------------------------------------------------------------------------


def test_task_lifecycle(index):
    task = index.create_task("sess A", task_id="t1")
    assert task["status"] == "pending" and task["attempts"] == 0 and task["result"] is None
    assert task["thread_id"].endswith("/commit/t1") and task["thread_id"].startswith("~")
    index.update_task("t1", status="running", archive_id="archive_1", attempts=1)
    row = index.update_task("t1", status="completed", result={"archive_id": "archive_001", "route": ["persist"]})
    assert row["archive_id"] == "archive_001" and row["result"] == {"archive_id": "archive_001", "route": ["persist"]}
    assert index.get_task("t1")["status"] == "completed" and index.get_task("missing") is None
    with pytest.raises(InvalidInput):
        index.create_task("sess A", task_id="t1")


def test_task_errors_are_redacted_and_capped(index):
    index.create_task("s", task_id="t")
    secret = "OpenAI said no: sk-proj-abcdef1234567890XYZ with header Authorization: Bearer abc.def.ghijkl123 "
    row = index.update_task("t", status="failed", error=secret + "x" * 1000)
    assert "abcdef1234567890" not in row["error"] and "abc.def.ghijkl123" not in row["error"]
    assert len(row["error"]) <= 500 and "sk-***" in row["error"]


@pytest.mark.parametrize("fields", [{"status": "done"}, {"attempts": -1}, {"attempts": True}, {"colour": "red"},
                                    {"result": {"x": object()}}, {"archive_id": "../x"}])
def test_bad_task_updates(index, fields):
    index.create_task("s", task_id="t")
    with pytest.raises(InvalidInput):
        index.update_task("t", **fields)


def test_update_of_unknown_task(index):
    with pytest.raises(InvalidInput):
        index.update_task("nope", status="failed")


def test_listing_tasks(index):
    for i, status in enumerate(["pending", "running", "completed", "failed", "skipped", "abandoned"]):
        index.create_task("a" if i % 2 else "b", task_id=f"t{i}", status=status)
    assert [t["task_id"] for t in index.list_tasks()] == [f"t{i}" for i in range(6)]
    assert [t["task_id"] for t in index.list_tasks(session_id="a")] == ["t1", "t3", "t5"]
    assert [t["task_id"] for t in index.list_tasks(status="failed")] == ["t3"]
    assert [t["task_id"] for t in index.list_tasks(session_id="a", status="running")] == ["t1"]


def test_tasks_survive_a_new_index(root, index):
    index.create_task("s", task_id="keep-me")
    index.close()
    assert TaskStore(root).get_task("keep-me")["session_id"] == "s"


# -- leases ------------------------------------------------------------------------------------------


def test_lease_is_exclusive_until_it_expires(index, clock):
    assert index.acquire_lease("s", "t1", "me", ttl=60) is None
    assert index.acquire_lease("s", "t1", "me", ttl=60) is None  # re-entrant for the same task
    assert index.acquire_lease("s", "t2", "you", ttl=60) == "t1"
    holder = index.lease_holder("s")
    assert holder["task_id"] == "t1" and holder["owner"] == "me" and holder["pid"] > 0 and holder["host"]
    clock.now += 30
    assert index.renew_lease("s", "t1", ttl=60) is True
    clock.now += 59
    assert index.acquire_lease("s", "t2", "you") == "t1"
    clock.now += 2  # expired: taken over
    assert index.lease_holder("s") is None
    assert index.acquire_lease("s", "t2", "you") is None
    assert index.renew_lease("s", "t1") is False
    index.release_lease("s", "t1")  # not the holder: no effect
    assert index.lease_holder("s")["task_id"] == "t2"
    index.release_lease("s", "t2")
    assert index.lease_holder("s") is None
    assert index.acquire_lease("other", "t3", "me") is None


def test_same_task_from_another_owner_waits_for_expiry(index, clock):
    assert index.acquire_lease("s", "t1", "process-a") is None
    assert index.acquire_lease("s", "t1", "process-b") == "t1"  # two resumers of one task: only one runs
    assert index.lease_holder("s")["owner"] == "process-a"
    clock.now += 61
    assert index.acquire_lease("s", "t1", "process-b") is None
    assert index.lease_holder("s")["owner"] == "process-b"


def test_threads_opening_a_fresh_index_at_once_all_succeed(tmp_path):
    for attempt in range(5):
        index, errors = TaskStore(tmp_path / f"fresh{attempt}"), []
        barrier = threading.Barrier(4)

        def first_use(index=index, errors=errors, barrier=barrier):
            barrier.wait()
            try:
                index.list_tasks()
            except sqlite3.Error as exc:  # e.g. "database is locked" while switching to WAL
                errors.append(exc)

        threads = [threading.Thread(target=first_use) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        index.close()
        assert errors == []


@pytest.mark.parametrize("ttl", [0, -1, True, "60", 10**9])
def test_bad_ttl(index, ttl):
    with pytest.raises(InvalidInput):
        index.acquire_lease("s", "t", "me", ttl=ttl)


def test_only_one_thread_wins_the_lease(root):
    index = TaskStore(root)
    index.acquire_lease("warmup", "w", "me")
    winners, barrier = [], threading.Barrier(8)

    def contend(k):
        barrier.wait()
        if index.acquire_lease("s", f"task{k}", f"thread{k}") is None:
            winners.append(k)

    threads = [threading.Thread(target=contend, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    index.close()


def test_connections_are_explicit_wal_and_per_thread(index):
    assert index.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other = []
    t = threading.Thread(target=lambda: other.append(index.db))
    t.start()
    t.join()
    assert other[0] is not index.db and other[0].conn is not index.db.conn


def test_schema(index):
    cols = {r[1] for r in index.db.execute("PRAGMA table_info(tasks)")}
    assert cols == {"task_id", "session_id", "archive_id", "thread_id", "status", "error", "attempts",
                    "created_at", "updated_at", "result"}
    cols = {r[1] for r in index.db.execute("PRAGMA table_info(leases)")}
    assert cols == {"session_id", "task_id", "owner", "pid", "host", "expires_at"}


def test_database_file_is_sqlite(root, index):
    index.create_task("s", task_id="x")
    conn = sqlite3.connect(root / "index.sqlite")
    assert conn.execute("SELECT task_id FROM tasks").fetchall() == [("x",)]
    conn.close()
