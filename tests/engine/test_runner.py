"""`graphs/runner.py` on its own: the lease and task lifecycle of a commit.

A `CommitRunner` is built directly on a real root with a scripted commit model (tests/fakes.py), without an
engine: a commit holds the session's lease only while it runs; a held lease returns the running task; a
skipped run deletes its thread; a failure outside the graph marks the task failed and frees the lease; an
unfinished commit is resumed before a new one and abandoned once it has used its resumes; completed threads
beyond `keep_checkpoints` are pruned. test_commit_resume.py covers resuming through the engine.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import pytest
from engine_helpers import FailingPersist, assistant, user
from fakes import create_call, scripted
from pg_support import Backend

from workmem.graphs.runner import MAX_RESUMES, RESUMABLE_STATUSES, CommitRunner
from workmem.nodes.context import CommitContext
from workmem.nodes.models import LazyModel
from workmem.state.errors import ModelUnavailable, StorageError
from workmem.state.storage import commit_thread_id, open_storage
from workmem.state.task_rules import TASK_STATUSES

KEEP_NONE = ("messages", 0)


@pytest.fixture
def storage(root):
    opened = open_storage(root, durable=False)
    yield opened
    opened.close()


@pytest.fixture
def make_runner(storage):
    """`make(model, **settings)` → a CommitRunner on the test's storage; every runner is closed afterwards."""
    runners: list[CommitRunner] = []

    def make(model: Any, **settings: Any) -> CommitRunner:
        lazy = model if isinstance(model, LazyModel) else LazyModel(model)
        runner = CommitRunner(storage, CommitContext(durable=False, retry_backoff_s=0.0), lazy, **settings)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


def created(text: str = "Testing the runner.") -> Any:
    return create_call({"Session Title": "Runner", "Current State": text})


def conversation(turns: int = 2) -> list[dict[str, Any]]:
    return [m for i in range(turns) for m in (user(f"Question {i} about the ledger"), assistant(f"Answer {i}"))]


def checkpoint_of(runner: CommitRunner, thread_id: str | None) -> Any:
    return runner.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}}) if thread_id else None


class UnavailableModel(LazyModel):
    """A model spec whose provider cannot be built (a missing key)."""

    def __init__(self) -> None:
        super().__init__("openai:gpt-test")

    def get(self) -> Any:
        raise ModelUnavailable(self.spec, "set OPENAI_API_KEY")


# -- the lease of one commit ----------------------------------------------------------------------------

def test_a_commit_holds_the_lease_and_a_running_task_only_while_it_runs(storage, make_runner):
    seen: dict[str, Any] = {}

    def answer(_messages: list[Any]) -> Any:
        holder = storage.tasks.lease_holder("s")
        seen["holder"], seen["task"] = holder["task_id"], storage.tasks.get_task(holder["task_id"])
        return created()

    model = scripted(answer)
    runner = make_runner(model)
    storage.sessions.append("s", conversation())

    result = runner.start("s", KEEP_NONE, wait=True)

    assert (result["status"], result["archive_id"]) == ("completed", "archive_001")
    assert seen["holder"] == result["task_id"], "the lease named this commit while its model ran"
    assert (seen["task"]["status"], seen["task"]["archive_id"], seen["task"]["thread_id"]) == (
        "running", "archive_001", commit_thread_id("s", result["task_id"]))
    assert storage.tasks.lease_holder("s") is None, "released at the end"
    task = storage.tasks.get_task(result["task_id"])
    assert task["status"] == "completed" and task["result"]["archive_id"] == "archive_001"
    assert storage.sessions.read_archive("s", "archive_001")["task_id"] == result["task_id"]
    assert model.calls == 1 and storage.sessions.live_messages("s") == []


@pytest.mark.parametrize("wait", [True, False], ids=["sync", "background"])
def test_a_held_lease_returns_the_running_task_and_starts_nothing(storage, make_runner, wait):
    storage.sessions.append("s", conversation())
    storage.tasks.create_task("s", task_id="elsewhere", archive_id="archive_001", status="running")
    assert storage.tasks.acquire_lease("s", "elsewhere", "another replica", ttl=600) is None
    model = scripted()  # any model call fails the test
    runner = make_runner(model)

    result = runner.start("s", KEEP_NONE, wait=wait)
    runner.wait()

    assert result == {"status": "busy", "task_id": "elsewhere", "archive_id": "archive_001",
                      "reason": "commit_in_progress"}
    assert [t["task_id"] for t in storage.tasks.list_tasks("s")] == ["elsewhere"], "no task row was written"
    assert storage.tasks.lease_holder("s")["task_id"] == "elsewhere" and model.calls == 0


def test_a_lease_left_by_a_dead_process_of_this_host_is_broken_at_once(storage, make_runner, root):
    storage.sessions.append("s", conversation())
    assert storage.tasks.acquire_lease("s", "crashed", "a killed process", ttl=600) is None
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    Backend("file", root).set_lease_holder("s", pid=int(dead.stdout))

    result = make_runner(scripted(created())).start("s", KEEP_NONE, wait=True)

    assert result["status"] == "completed" and storage.tasks.lease_holder("s") is None


def test_a_background_commit_reports_after_it_released_the_lease(storage, make_runner):
    storage.sessions.append("s", conversation())
    runner = make_runner(scripted(created()))
    reported: list[tuple[dict[str, Any], Any]] = []

    started = runner.start("s", KEEP_NONE, wait=False,
                           then=lambda result: reported.append((result, storage.tasks.lease_holder("s"))))
    runner.wait()

    assert started == {"status": "pending", "task_id": started["task_id"], "archive_id": None, "reason": "started"}
    [(result, holder)] = reported
    assert (result["status"], result["task_id"], holder) == ("completed", started["task_id"], None)
    assert storage.tasks.get_task(started["task_id"])["status"] == "completed"


def test_a_skipped_run_deletes_its_thread_and_leaves_the_messages_live(storage, make_runner):
    storage.sessions.append("s", conversation())
    model = scripted()
    runner = make_runner(model)

    result = runner.start("s", ("messages", 10), wait=True)

    assert (result["status"], result["archive_id"], result["reason"]) == ("skipped", None, "all_within_keep_window")
    task = storage.tasks.get_task(result["task_id"])
    assert task["status"] == "skipped" and task["result"] == {"reason": "all_within_keep_window"}
    assert task["thread_id"] is None, "the thread is forgotten"
    assert task["archive_id"] is None, "the id it reserved is the next commit's (`tasks` listed it under it)"
    assert checkpoint_of(runner, commit_thread_id("s", result["task_id"])) is None, "and deleted"
    assert storage.tasks.lease_holder("s") is None and model.calls == 0
    assert len(storage.sessions.live_messages("s")) == 4 and storage.sessions.list_archives("s") == []


def test_a_failure_outside_the_graph_marks_the_task_failed_and_frees_the_lease(storage, make_runner, monkeypatch):
    storage.sessions.append("s", conversation())
    runner = make_runner(scripted())

    def disk_full(session_id: str) -> str:
        raise StorageError("/data/wm", OSError(28, "No space left on device"))

    monkeypatch.setattr(storage.sessions, "next_archive_id", disk_full)
    with pytest.raises(StorageError):
        runner.start("s", KEEP_NONE, wait=True)
    [task] = storage.tasks.list_tasks("s")
    assert task["status"] == "failed" and "No space left on device" in task["error"]
    assert storage.tasks.lease_holder("s") is None, "never left locked"


def test_an_unavailable_model_fails_the_commit_with_one_warning_per_session(storage, make_runner, caplog):
    runner = make_runner(UnavailableModel())
    for session in ("a", "b"):
        storage.sessions.append(session, conversation())
    with caplog.at_level(logging.WARNING, logger="workmem.runner"):
        results = [runner.start(s, KEEP_NONE, wait=True) for s in ("a", "a", "b")]
    assert [r["status"] for r in results] == ["failed"] * 3
    assert all("OPENAI_API_KEY" in r["reason"] for r in results)
    assert [storage.tasks.get_task(r["task_id"])["status"] for r in results] == ["failed"] * 3
    warned = [r.getMessage() for r in caplog.records if r.name == "workmem.runner"]
    assert len(warned) == 2 and "'a'" in warned[0] and "'b'" in warned[1]
    assert storage.tasks.lease_holder("a") is None and storage.tasks.lease_holder("b") is None
    assert [r["status"] for r in runner.resume_all()] == ["failed"] * 3, "resume reports, never raises"


# -- resuming and abandoning ----------------------------------------------------------------------------

@pytest.mark.parametrize("status", TASK_STATUSES)
def test_only_pending_running_and_failed_tasks_are_resumable(storage, make_runner, status):
    storage.tasks.create_task("s", task_id="t", status=status)
    storage.tasks.create_task("other", task_id="o", status="failed")
    runner = make_runner(scripted())
    resumable = [t["task_id"] for t in runner.resumable_tasks("s")]
    assert resumable == (["t"] if status in ("pending", "running", "failed") else [])
    assert RESUMABLE_STATUSES == ("pending", "running", "failed")
    assert {t["task_id"] for t in runner.resumable_tasks()} == {"o", *resumable}


@pytest.mark.parametrize(("attempts", "outcome"), [(MAX_RESUMES - 1, "completed"), (MAX_RESUMES, "abandoned")])
def test_a_failed_commit_is_resumed_before_a_new_one_until_it_used_its_resumes(storage, make_runner, monkeypatch,
                                                                                attempts, outcome):
    failing = FailingPersist(monkeypatch, times=1)
    model = scripted(created("First try."), created("After the abandoned one."))
    runner = make_runner(model)
    storage.sessions.append("s", conversation())
    first = runner.start("s", KEEP_NONE, wait=True)
    assert first["status"] == "failed" and "persist failed on purpose" in first["reason"]
    thread = storage.tasks.get_task(first["task_id"])["thread_id"]
    assert checkpoint_of(runner, thread) is not None, "a failed run keeps its checkpoint"
    assert storage.tasks.lease_holder("s") is None
    storage.tasks.update_task(first["task_id"], attempts=attempts)

    second = runner.start("s", KEEP_NONE, wait=True)

    [earlier] = second["resumed"]
    assert (earlier["task_id"], earlier["status"]) == (first["task_id"], outcome)
    task = storage.tasks.get_task(first["task_id"])
    assert task["status"] == outcome
    archive = storage.sessions.read_archive("s", "archive_001")
    if outcome == "completed":
        assert task["attempts"] == MAX_RESUMES and archive["task_id"] == first["task_id"]
        assert second["status"] == "skipped" and model.calls == 1, "resumed at persist; nothing left to commit"
    else:
        assert task["error"] == "too many resumes" and checkpoint_of(runner, thread) is None
        assert second["status"] == "completed" and archive["task_id"] == second["task_id"]
        assert archive["source_turn_range"]["start_seq"] == 1, "its messages went to the next commit"
        assert model.calls == 2
    assert failing.calls == 2 and storage.tasks.lease_holder("s") is None


def test_an_earlier_commit_that_fails_again_blocks_the_new_one(storage, make_runner, monkeypatch):
    FailingPersist(monkeypatch, times=2)
    runner = make_runner(scripted(created()))
    storage.sessions.append("s", conversation())
    first = runner.start("s", KEEP_NONE, wait=True)

    second = runner.start("s", KEEP_NONE, wait=True)

    assert second["status"] == "failed" and first["task_id"] in second["reason"]
    assert storage.tasks.get_task(second["task_id"])["status"] == "skipped", "it never reserved an archive"
    assert storage.tasks.get_task(second["task_id"])["archive_id"] is None
    assert storage.tasks.get_task(first["task_id"])["attempts"] == 1
    assert storage.sessions.list_archives("s") == [] and len(storage.sessions.live_messages("s")) == 4


def test_a_task_that_never_checkpointed_is_abandoned_by_resume_all(storage, make_runner):
    storage.sessions.append("s", conversation())
    ghost = storage.tasks.create_task("s", archive_id="archive_001", status="running")
    runner = make_runner(scripted())

    results = runner.resume_all()

    assert results == [{"status": "abandoned", "task_id": ghost["task_id"], "archive_id": "archive_001",
                        "reason": "never started"}]
    assert storage.tasks.get_task(ghost["task_id"])["status"] == "abandoned"
    assert runner.resume_all() == [] and storage.tasks.lease_holder("s") is None


def test_resume_all_leaves_a_session_alone_while_a_live_holder_has_its_lease(storage, make_runner, monkeypatch):
    FailingPersist(monkeypatch, times=1)
    runner = make_runner(scripted(created()))
    storage.sessions.append("s", conversation())
    failed = runner.start("s", KEEP_NONE, wait=True)
    assert storage.tasks.acquire_lease("s", "someone-else", "another replica", ttl=600) is None

    assert runner.resume_all() == []
    assert storage.tasks.get_task(failed["task_id"])["status"] == "failed"
    storage.tasks.release_lease("s", "someone-else")
    assert [r["status"] for r in runner.resume_all()] == ["completed"]


def test_completed_threads_beyond_keep_checkpoints_are_pruned(storage, make_runner):
    runner = make_runner(scripted(*(created(f"Commit {i}.") for i in range(3))), keep_checkpoints=1)
    tasks = []
    for i in range(3):
        storage.sessions.append("s", [user(f"Question {i}"), assistant(f"Answer {i}")])
        result = runner.start("s", KEEP_NONE, wait=True)
        assert result["status"] == "completed"
        tasks.append(result["task_id"])
    rows = [storage.tasks.get_task(t) for t in tasks]
    assert [r["thread_id"] for r in rows] == [None, None, commit_thread_id("s", tasks[2])]
    assert [checkpoint_of(runner, commit_thread_id("s", t)) is not None for t in tasks] == [False, False, True]
    assert runner.prune_checkpoints() == 0, "nothing more to prune"


def test_resume_all_goes_on_past_a_task_whose_session_folder_is_gone(storage, make_runner, monkeypatch, root):
    import shutil

    FailingPersist(monkeypatch, times=2)
    runner = make_runner(scripted(created("First."), created("Second."), created("Second, resumed.")))
    for session in ("gone", "kept"):
        storage.sessions.append(session, conversation())
    failed = [runner.start(session, KEEP_NONE, wait=True) for session in ("gone", "kept")]
    assert [r["status"] for r in failed] == ["failed", "failed"]
    shutil.rmtree(root / "sessions" / "gone")  # removed by hand, behind the engine's back
    resumer = make_runner(scripted(created("Resumed.")))

    results = {r["task_id"]: r for r in resumer.resume_all()}

    assert results[failed[1]["task_id"]]["status"] == "completed", "the other session is resumed"
    assert results[failed[0]["task_id"]]["status"] == "abandoned"
    assert "its session is gone" in results[failed[0]["task_id"]]["reason"]
    assert len(storage.sessions.list_archives("kept")) == 1
    assert resumer.resume_all() == [], "nothing is left to retry"
