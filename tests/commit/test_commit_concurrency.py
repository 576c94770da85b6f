"""One commit per session at a time: a second request gets the running task, and
messages appended while a commit runs stay live. The commit is held open by a model that blocks on a
`threading.Event`, so nothing here depends on timing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

import pytest
from fakes import scripted

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.extractive.model import ExtractiveChatModel

SAFETY_TIMEOUT = 60  # only so a broken lease cannot hang the suite; never reached when the code works


class BlockingModel(ExtractiveChatModel):
    """The extractive model, blocking its first call until the test releases it."""

    entered: Any = None
    release: Any = None
    calls: int = 0

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(SAFETY_TIMEOUT), "the test never released the model"
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def turns(start: int, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(start, start + n):
        out.append({"role": "user", "content": f"Request {i}: add the export for report_{i}.csv please."})
        out.append({"role": "assistant", "content": f"Added the export for report_{i}.csv."})
    return out


@pytest.fixture
def blocking(backend):
    model = BlockingModel(entered=threading.Event(), release=threading.Event())
    engine = backend.engine(model=model, durable=False)
    engine.add_messages("s", turns(0, 5))
    # Open index.sqlite once before threads race to create it: two threads opening a fresh index at the
    # same time can get "database is locked" from `PRAGMA journal_mode=WAL` (reported to the store owner).
    engine.storage.tasks.list_tasks()
    yield engine, model
    model.release.set()
    engine.close()


def every_seq(engine: WorkingMemoryEngine) -> list[int]:
    store = engine.storage.sessions
    seqs = [m["seq"] for a in store.list_archives("s") for m in store.archive_messages("s", a["archive_id"])]
    return seqs + [m["seq"] for m in engine.storage.sessions.live_messages("s")]


def test_two_commits_at_once_one_runs_the_other_gets_the_running_task(blocking):
    engine, model = blocking
    with ThreadPoolExecutor(max_workers=2) as pool:
        barrier = threading.Barrier(2)

        def commit() -> dict[str, Any]:
            barrier.wait(SAFETY_TIMEOUT)
            return engine.commit("s", keep_recent_count=0)

        futures = [pool.submit(commit), pool.submit(commit)]
        try:
            done, running = wait(futures, timeout=SAFETY_TIMEOUT, return_when=FIRST_COMPLETED)
            assert len(done) == 1 and len(running) == 1, "one commit must be held open by the model"
            busy = done.pop().result()
            assert model.entered.wait(SAFETY_TIMEOUT)
            # messages appended while the commit runs
            added = engine.add_messages("s", turns(5, 2))
        finally:
            model.release.set()
        finished = running.pop().result(timeout=SAFETY_TIMEOUT)

    assert busy["status"] == "busy"
    assert busy["task_id"] == finished["task_id"]
    assert finished["status"] == "completed"
    assert model.calls == 1  # the busy request never reached the model
    archive = engine.working_memory("s")
    assert archive["source_turn_range"]["end_seq"] == 10
    live = engine.storage.sessions.live_messages("s")
    assert [m["seq"] for m in live] == [m["seq"] for m in added] == [11, 12, 13, 14]
    assert every_seq(engine) == list(range(1, 15))
    assert [t["status"] for t in engine.storage.tasks.list_tasks("s")] == ["completed"]  # busy requests leave no task


def test_background_commit_is_returned_to_a_second_request_and_to_another_engine(blocking, backend):
    engine, model = blocking
    started = engine.commit("s", keep_recent_count=0, wait=False)
    assert started["status"] == "pending"
    other_model = scripted()  # any call would be a bug: the other engine must not run anything
    try:
        assert model.entered.wait(SAFETY_TIMEOUT)
        again = engine.commit("s", keep_recent_count=0)
        with backend.engine(model=other_model, durable=False) as other:
            elsewhere = other.commit("s", keep_recent_count=0)
            # resume_all elsewhere must not pick up the running task (its lease carries the same task id)
            resumed = other.resume_all()
        engine.add_messages("s", turns(5, 1))
    finally:
        model.release.set()
    engine.wait()

    assert (again["status"], again["task_id"]) == ("busy", started["task_id"])
    assert (elsewhere["status"], elsewhere["task_id"]) == ("busy", started["task_id"])
    assert resumed == []
    assert other_model.calls == 0
    assert engine.task(started["task_id"])["status"] == "completed"
    assert engine.task(started["task_id"])["attempts"] == 0
    assert [m["seq"] for m in engine.storage.sessions.live_messages("s")] == [11, 12]
    assert every_seq(engine) == list(range(1, 13))


def test_lease_is_released_when_the_commit_ends(blocking):
    engine, model = blocking
    model.release.set()
    assert engine.commit("s", keep_recent_count=2)["status"] == "completed"
    assert engine.storage.tasks.lease_holder("s") is None
    engine.add_messages("s", turns(5, 2))
    assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
    assert [a["archive_id"] for a in engine.storage.sessions.list_archives("s")] == ["archive_001", "archive_002"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize(("holder", "expect"), [
    ({"pid": "dead"}, "completed"),  # its process is gone on this host: the lease is broken at once
    ({"pid": "self"}, "busy"),  # another thread of this process
    ({"host": "some-other-host", "pid": 12345}, "busy"),  # trusted until it expires
], ids=["dead_process_on_this_host", "live_holder_here", "other_host"])
def test_lease_of_a_dead_holder_is_broken_a_live_one_is_respected(blocking, backend, holder, expect):
    engine, model = blocking
    model.release.set()
    assert engine.storage.tasks.acquire_lease("s", "ghost-task", "someone", ttl=600) is None
    fields = dict(holder)
    if fields["pid"] == "dead":
        fields["pid"] = _dead_pid()
    elif fields["pid"] == "self":
        fields["pid"] = os.getpid()
    backend.set_lease_holder("s", **fields)

    result = engine.commit("s", keep_recent_count=0)

    assert result["status"] == expect
    if expect == "busy":
        assert result["task_id"] == "ghost-task"
        assert engine.working_memory("s") is None
    else:
        assert engine.working_memory("s")["task_id"] == result["task_id"]


def test_queued_background_commit_keeps_its_lease(backend, monkeypatch):
    """A background commit waiting for a free worker renews its lease, so the session stays locked."""
    now = [time.time()]
    backend.patch_task_clock(monkeypatch, lambda: now[0])
    model = BlockingModel(entered=threading.Event(), release=threading.Event())
    engine = backend.engine(model=model, durable=False, max_workers=1)
    engine.runner.lease_ttl = 3.0  # renewed every second
    try:
        for session in ("a", "b"):
            engine.add_messages(session, turns(0, 3))
        engine.storage.tasks.list_tasks()
        engine.commit("a", keep_recent_count=0, wait=False)
        assert model.entered.wait(SAFETY_TIMEOUT)
        queued = engine.commit("b", keep_recent_count=0, wait=False)  # the only worker is busy with "a"

        now[0] += 3600  # by the index's clock every lease taken so far has expired
        deadline = time.monotonic() + SAFETY_TIMEOUT
        while engine.storage.tasks.lease_holder("b") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        again = engine.commit("b", keep_recent_count=0)
    finally:
        model.release.set()
        engine.close()

    assert (again["status"], again["task_id"]) == ("busy", queued["task_id"])
    storage = backend.storage()
    assert [t["status"] for t in storage.tasks.list_tasks("b")] == ["completed"]
    storage.close()
