"""Four OS processes append to one session while a fifth keeps archiving the oldest live messages.

Afterwards archives ∪ live hold exactly seqs 1..2000, once each, no torn line, and the meta counts
match the stored messages. The archiver coordinates like a real commit: it takes the session lease
for each round (at most one commit per session). Runs on both backends (a root, or a database URL).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from oracles import compute_pending_tokens
from paths import REPO

WORKERS = 4
APPENDS = 500
SESSION = "busy-session"

_WAIT_FOR_GO = """
import os, sys, time
go = sys.argv[-1]
while not os.path.exists(go):
    time.sleep(0.005)
from workmem.state.storage import open_storage
target = sys.argv[1]
storage = open_storage(database_url=target) if target.startswith("postgresql://") else open_storage(target)
"""

APPENDER = _WAIT_FOR_GO + """
sid, worker, count = sys.argv[2], sys.argv[3], int(sys.argv[4])
for i in range(count):
    storage.sessions.append(sid, [{"role": "user" if i % 2 else "assistant", "content": f"worker {worker} item {i}"}])
storage.close()
"""

ARCHIVER = _WAIT_FOR_GO + """
from workmem.state.errors import SessionNotFound
from workmem.state.turns import choose_covered_range
sid, stop = sys.argv[2], sys.argv[3]
store, index = storage.sessions, storage.tasks
rounds = 0
while True:
    last_round = os.path.exists(stop)
    if index.acquire_lease(sid, task := f"task-{rounds}", "archiver", ttl=30) is None:
        try:
            live = store.live_messages(sid)
            covered = choose_covered_range(live, 20)
            if covered is not None:
                msgs = [m for m in live if m["seq"] <= covered[1]]
                archive = {"archive_id": store.next_archive_id(sid), "session_id": sid,
                           "source_turn_range": {"start_turn_id": msgs[0]["turn_id"],
                                                 "end_turn_id": msgs[-1]["turn_id"],
                                                 "start_seq": msgs[0]["seq"], "end_seq": msgs[-1]["seq"]}}
                store.write_archive(sid, archive, msgs, "# Working Memory\\n", f"round {rounds}")
                store.drop_covered(sid, covered[1])
                store.record_commit(sid, archive, 20)
                rounds += 1
        except SessionNotFound:
            pass
        finally:
            index.release_lease(sid, task)
    if last_round:
        break
    time.sleep(0.003)
storage.close()
print(rounds)
"""


def _spawn(script: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)


def _check_jsonl(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"torn line at the end of {path}"
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.slow
def test_four_appenders_and_an_archiver(backend):
    go, stop = backend.root.parent / "go", backend.root.parent / "stop"
    appenders = [_spawn(APPENDER, backend.target, SESSION, w, APPENDS, go) for w in range(WORKERS)]
    archiver = _spawn(ARCHIVER, backend.target, SESSION, stop, go)
    go.touch()
    deadline = time.monotonic() + 120
    for proc in appenders:
        _out, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
        assert proc.returncode == 0, err
    stop.touch()
    out, err = archiver.communicate(timeout=60)
    assert archiver.returncode == 0, err
    assert int(out.strip()) >= 2, "the archiver should have run while appends were going on"

    storage = backend.storage()
    store = storage.sessions
    archived: list[dict] = []
    for entry in store.list_archives(SESSION):
        archived += store.archive_messages(SESSION, entry["archive_id"])
        assert [m["seq"] for m in archived[-(entry["end_seq"] - entry["start_seq"] + 1):]] == list(
            range(entry["start_seq"], entry["end_seq"] + 1))
    live = store.live_messages(SESSION)
    if backend.name == "file":
        _check_files(store, archived, live)
    seqs = sorted(m["seq"] for m in archived + live)
    assert seqs == list(range(1, WORKERS * APPENDS + 1))

    for worker in range(WORKERS):  # each worker's messages are in its own order
        mine = [m for m in sorted(archived + live, key=lambda m: m["seq"])
                if m["parts"][0]["text"].startswith(f"worker {worker} ")]
        assert [int(m["parts"][0]["text"].split()[-1]) for m in mine] == list(range(APPENDS))

    meta = store.meta(SESSION)
    archives = store.list_archives(SESSION)
    assert meta["message_count"] == len(live)
    assert meta["total_message_count"] == WORKERS * APPENDS and meta["next_seq"] == WORKERS * APPENDS + 1
    assert meta["commit_count"] == len(archives)
    assert meta["last_archive"] == {"id": archives[-1]["archive_id"], "end_seq": archives[-1]["end_seq"]}
    assert meta["pending_tokens"] == compute_pending_tokens(live, meta["keep_recent_count"])
    if backend.name == "file":
        on_disk = json.loads((store.session_dir(SESSION) / ".meta.json").read_text())
        assert {k: on_disk[k] for k in meta} == meta
    else:
        assert store.check(SESSION) == []
    assert storage.tasks.lease_holder(SESSION) is None
    storage.close()


def _check_files(store, archived: list[dict], live: list[dict]) -> None:
    """The file backend's files: no torn line anywhere, GC left only live lines, strict reads agree."""
    session_dir = store.session_dir(SESSION)
    live_lines = _check_jsonl(session_dir / "messages.jsonl")
    on_disk = []
    for entry in store.list_archives(SESSION):
        on_disk += _check_jsonl(session_dir / "history" / entry["archive_id"] / "messages.jsonl")
    assert [m["seq"] for m in on_disk] == [m["seq"] for m in archived]
    assert [m["seq"] for m in store.live_messages(SESSION, strict=True)] == [m["seq"] for m in live_lines] == [
        m["seq"] for m in live]
