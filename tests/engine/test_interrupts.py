"""A Ctrl-C (KeyboardInterrupt) or a SystemExit at the edges of a commit's transactions and lease: the interrupt
propagates, and the next commit — of this engine, of another engine, of another process — starts at once, with
every message stored once. Lands where a signal arriving during a statement surfaces: as the statement returns."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest
from engine_helpers import stored, talk
from filelock import lock_descriptor, unlock_descriptor

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.graphs.lease import Heartbeat, acquire
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.state.files import sqlite as files_sqlite
from workmem.state.files.locks import FileMutex
from workmem.state.files.tasks import TaskStore

SID = "s"


def conversation_engine(root: Path, **settings) -> WorkingMemoryEngine:
    engine = WorkingMemoryEngine(root, durable=False, **settings)
    engine.add_messages(SID, talk(8))
    return engine


def assert_stored_once(engine: WorkingMemoryEngine) -> None:
    seqs = [m["seq"] for m in stored(engine, SID)]
    assert seqs == list(range(1, 17)), "every message once, none lost"


def assert_write_lock_free(root: Path) -> None:
    """Another connection takes each database's write lock without waiting (none is held by an open transaction)."""
    for path in root.rglob("*.sqlite"):
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        finally:
            other.close()


@pytest.mark.parametrize("nth", [1, 2, 3], ids=["taking-the-lease", "indexing-the-archive", "giving-the-lease-up"])
def test_a_ctrl_c_as_a_write_transaction_begins_leaves_no_lock_behind(root, monkeypatch, nth):
    """A commit's write transactions on the index database, in the calling thread: BEGIN IMMEDIATE once each."""
    engine = conversation_engine(root)
    begun = {"n": 0}
    real = files_sqlite.CheckedConnection.execute

    def interrupted(self, *args, **kwargs):
        cursor = real(self, *args, **kwargs)
        if args and args[0] == "BEGIN IMMEDIATE" and threading.current_thread() is threading.main_thread():
            begun["n"] += 1
            if begun["n"] == nth:
                raise KeyboardInterrupt
        return cursor

    monkeypatch.setattr(files_sqlite.CheckedConnection, "execute", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.commit(SID, keep_recent_count=4)
    monkeypatch.setattr(files_sqlite.CheckedConnection, "execute", real)
    assert begun["n"] >= nth

    assert_write_lock_free(root)
    again = engine.commit(SID, keep_recent_count=4)  # resuming the interrupted one first, if it got that far
    assert again["status"] in ("completed", "skipped"), "this engine commits at once"
    assert all(r["status"] == "completed" for r in again.get("resumed", []))
    with WorkingMemoryEngine(root, durable=False) as other:
        assert other.commit(SID, keep_recent_count=2)["status"] == "completed", "so does another engine"
    assert_stored_once(engine)
    engine.close()


def test_a_transaction_an_interrupt_left_open_is_rolled_back_by_the_next_one(root):
    engine = conversation_engine(root)
    tasks = engine.storage.tasks
    tasks.db.execute("BEGIN IMMEDIATE")  # as if an interrupt had landed in the rollback itself
    assert engine.commit(SID, keep_recent_count=4)["status"] == "completed"
    assert_write_lock_free(root)
    engine.close()


def interrupt_once_after(monkeypatch, owner: type, name: str) -> None:
    """`owner.name` does its work, then raises KeyboardInterrupt the first time (a Ctrl-C as it returns)."""
    real, hits = getattr(owner, name), []

    def interrupted(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        if not hits:
            hits.append(True)
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(owner, name, interrupted)


@pytest.mark.parametrize(("owner", "name"), [(TaskStore, "acquire_lease"), (Heartbeat, "stop")],
                         ids=["as-the-lease-row-is-written", "as-the-heartbeat-stops"])
def test_a_ctrl_c_at_the_leases_edges_gives_it_up(root, monkeypatch, owner, name):
    engine = conversation_engine(root)
    interrupt_once_after(monkeypatch, owner, name)
    with pytest.raises(KeyboardInterrupt):
        engine.commit(SID, keep_recent_count=4)

    assert engine.storage.tasks.lease_holder(SID) is None, "no lease left for this live process"
    assert engine.commit(SID, keep_recent_count=2)["status"] == "completed"
    assert_stored_once(engine)
    engine.close()


class ExitingModel(ExtractiveChatModel):
    """The offline commit model, but its first call raises SystemExit (a client library giving up)."""

    exits: int = 1

    def _generate(self, *args, **kwargs):
        if self.exits:
            self.exits -= 1
            raise SystemExit(3)
        return super()._generate(*args, **kwargs)


def test_a_system_exit_in_a_background_commit_marks_its_task_failed_and_the_next_commit_resumes_it(root):
    engine = conversation_engine(root, model=ExitingModel())
    started = engine.commit(SID, keep_recent_count=4, wait=False)
    engine.join_commits(SID)

    task = engine.task(started["task_id"])
    assert task["status"] == "failed" and "SystemExit" in task["error"], "never left `running` with no commit"
    again = engine.commit(SID, keep_recent_count=4)
    assert [(r["task_id"], r["status"]) for r in again["resumed"]] == [(started["task_id"], "completed")]
    assert_stored_once(engine)
    engine.close()


def test_a_system_exit_while_a_commit_is_resumed_marks_the_resumed_task_failed_not_left_running(root):
    engine = conversation_engine(root, model=ExitingModel(exits=2))
    with pytest.raises(SystemExit):
        engine.commit(SID, keep_recent_count=4)
    [first] = engine.storage.tasks.list_tasks(SID)
    with pytest.raises(SystemExit):  # the next commit resumes the first one, and its run is cut too
        engine.commit(SID, keep_recent_count=4)

    task = engine.task(first["task_id"])
    assert (task["status"], task["attempts"]) == ("failed", 1) and "SystemExit" in task["error"]
    again = engine.commit(SID, keep_recent_count=4)
    assert (first["task_id"], "completed") in [(r["task_id"], r["status"]) for r in again["resumed"]]
    assert engine.task(first["task_id"])["error"] is None
    assert_stored_once(engine)
    engine.close()


def test_a_ctrl_c_once_the_session_file_is_locked_unlocks_it_for_other_threads_and_processes(tmp_path, monkeypatch):
    mutex = FileMutex(str(tmp_path / "s.lock"), timeout=2)
    real = FileMutex._still_current
    monkeypatch.setattr(FileMutex, "_still_current", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        mutex.acquire()
    monkeypatch.setattr(FileMutex, "_still_current", real)

    other_process = os.open(tmp_path / "s.lock", os.O_RDWR)
    try:
        assert lock_descriptor(other_process, blocking=False), "the file lock was dropped"
        unlock_descriptor(other_process)
    finally:
        os.close(other_process)
    taken = []
    other_thread = threading.Thread(target=lambda: (mutex.acquire(), taken.append(True), mutex.release()))
    other_thread.start()
    other_thread.join(10)
    assert taken == [True], "another thread of this process takes it"


def test_an_interrupted_resume_never_gives_up_the_lease_another_engine_holds(root, monkeypatch):
    tasks = WorkingMemoryEngine(root, durable=False).storage.tasks
    assert acquire(tasks, SID, "task-1", "engine-a") is None  # engine A runs the task
    monkeypatch.setattr(type(tasks), "lease_holder", lambda self, sid: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        acquire(tasks, SID, "task-1", "engine-b")  # engine B, resuming the same task id, is cut
    monkeypatch.undo()
    assert tasks.lease_holder(SID)["owner"] == "engine-a"


class InterruptedOnce:
    """A lock whose first acquire takes it and then raises KeyboardInterrupt (a Ctrl-C surfacing as it returns)."""

    def __init__(self, lock) -> None:
        self.lock, self.armed = lock, True

    def acquire(self, *args, **kwargs):
        taken = self.lock.acquire(*args, **kwargs)
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return taken

    def __getattr__(self, name):
        return getattr(self.lock, name)


def test_a_ctrl_c_as_the_threads_lock_is_taken_leaves_it_free_for_other_threads(tmp_path):
    mutex = FileMutex(str(tmp_path / "s.lock"), timeout=2)
    mutex._thread_lock = InterruptedOnce(mutex._thread_lock)
    with pytest.raises(KeyboardInterrupt):
        mutex.acquire()
    taken = []
    other_thread = threading.Thread(target=lambda: (mutex.acquire(), taken.append(True), mutex.release()))
    other_thread.start()
    other_thread.join(10)
    assert taken == [True]
