"""Several replicas on one database: four processes, each with its own engine, append 500
messages each to a session while committing it. Exactly 2 000 messages are stored, each once, every
writer's in its own order; the commits of a session never overlap (each model call logs its interval,
and a session's intervals must be disjoint); the archives chain without a gap. The same with two
sessions written and committed in parallel."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from oracles import compute_pending_tokens
from paths import REPO
from pg_support import open_target

WORKERS = 4
APPENDS = 500
COMMIT_EVERY = 50

REPLICA = """
import json, os, sys, time
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.extractive.model import ExtractiveChatModel

url, worker, count, every, go, log_path = sys.argv[1:7]
sessions = sys.argv[7].split(",")
count, every = int(count), int(every)


class LoggedModel(ExtractiveChatModel):
    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        text = "\\n".join(m.text for m in messages)
        start = time.time()
        time.sleep(0.02)  # widen the window a second commit of the session would have to overlap
        out = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        seen = sorted(s for s in sessions if f"<{s}>" in text)
        with open(log_path, "a") as log:
            log.write(json.dumps({"sessions": seen, "start": start, "end": time.time(), "pid": os.getpid()}) + "\\n")
        return out


while not os.path.exists(go):
    time.sleep(0.005)
results = []
with WorkingMemoryEngine(database_url=url, model=LoggedModel(), durable=False) as engine:
    for i in range(count):
        for s in sessions:
            role = "user" if i % 2 == 0 else "assistant"
            engine.add_messages(s, [{"role": role, "content": f"<{s}> writer {worker} item {i} about topic{i % 7}"}])
        if (i + 1) % every == 0:
            for s in sessions:
                results.append(engine.commit(s, keep_recent_count=5)["status"])
print(json.dumps(results))
"""


def _spawn(*args: object) -> subprocess.Popen:
    """One replica process (see REPLICA)."""
    return subprocess.Popen([sys.executable, "-c", REPLICA, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)


@pytest.mark.slow
@pytest.mark.parametrize("sessions", [["shared"], ["left", "right"]], ids=["one_session", "two_sessions"])
def test_replicas_share_sessions_without_loss_duplicates_or_overlapping_commits(database_url, tmp_path, sessions):
    go, log = tmp_path / "go", tmp_path / "model_calls.jsonl"
    procs = [_spawn(database_url, w, APPENDS, COMMIT_EVERY, go, log, ",".join(sessions)) for w in range(WORKERS)]
    go.touch()
    deadline = time.monotonic() + 600
    statuses: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
        assert proc.returncode == 0, err
        statuses += json.loads(out)
    assert set(statuses) <= {"completed", "busy", "skipped"}, statuses
    assert statuses.count("completed") >= 2 * len(sessions), "commits should have run while appends went on"

    storage = open_target(database_url)
    try:
        for session in sessions:
            _check_session(storage, session)
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        for session in sessions:
            mine = sorted((c["start"], c["end"], c["pid"]) for c in calls if c["sessions"] == [session])
            assert mine, f"no commit of {session} reached the model"
            for (_s1, end1, pid1), (start2, _e2, pid2) in zip(mine, mine[1:], strict=False):
                assert start2 >= end1, f"two commits of {session} at once (pids {pid1} and {pid2})"
    finally:
        storage.close()


def _check_session(storage, session: str) -> None:
    """Every seq once and in order, each writer's items in its order, a gapless archive chain, true counters."""
    store = storage.sessions
    archives = store.list_archives(session)
    archived = [m for a in archives for m in store.archive_messages(session, a["archive_id"])]
    live = store.live_messages(session)
    every = archived + live
    assert [m["seq"] for m in every] == list(range(1, WORKERS * APPENDS + 1))  # each seq once, in order
    assert len({m["id"] for m in every}) == len(every)
    for worker in range(WORKERS):
        items = [int(m["parts"][0]["text"].split()[4]) for m in every
                 if m["parts"][0]["text"].startswith(f"<{session}> writer {worker} ")]
        assert items == list(range(APPENDS)), f"writer {worker}'s messages are not each there once, in order"
    previous_end = 0
    for archive in archives:  # a chain without gap or overlap, each archive written by a completed task
        assert archive["start_seq"] == previous_end + 1
        previous_end = archive["end_seq"]
        task = storage.tasks.get_task(store.read_archive(session, archive["archive_id"])["task_id"])
        assert task is not None and task["status"] == "completed" and task["archive_id"] == archive["archive_id"]
    meta = store.meta(session)
    assert (meta["message_count"], meta["total_message_count"], meta["commit_count"]) == (
        len(live), WORKERS * APPENDS, len(archives))
    assert meta["pending_tokens"] == compute_pending_tokens(live, meta["keep_recent_count"])
    assert store.check(session) == []
    assert storage.tasks.lease_holder(session) is None
