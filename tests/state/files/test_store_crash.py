"""Crash after each write step of archiving — by raising, and by `os._exit` in a subprocess.

The session must stay readable with no duplicate and no loss, and re-running the archive step
(write_archive → drop_covered → record_commit, as the persist node does) must complete it.
Write steps are the calls into `state.fsutil` (make_dirs, write_file, publish_dir, atomic_write).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from oracles import compute_pending_tokens, source_turn_range
from paths import REPO, TESTS

from workmem.state.files import fsutil
from workmem.state.files.store import SessionStore
from workmem.state.turns import choose_covered_range

SID = "crashy"
TOTAL = 30
KEEP = 6
STEP_FUNCTIONS = ("make_dirs", "write_file", "publish_dir", "atomic_write")


class Crash(Exception):
    """The injected failure."""


def setup_session(root: Path) -> None:
    store = SessionStore(root)
    for i in range(TOTAL // 3):
        store.append(SID, [{"role": "user", "content": f"question {i}"},
                           {"role": "assistant", "content": "", "tool_calls": [
                               {"id": f"c{i}", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
                           {"role": "tool", "tool_call_id": f"c{i}", "content": f"answer {i}"}])
    store.flush()


def archive_step(store: SessionStore) -> None:
    """One commit's persist: deterministic, so a re-run writes the same archive."""
    end = TOTAL - KEEP
    messages = store.messages_in_range(SID, 1, end)
    archive = {"archive_id": "archive_001", "session_id": SID, "created_at": "2026-01-01T00:00:00+00:00",
               "source_turn_range": source_turn_range(messages)}
    store.write_archive(SID, archive, messages, "# Working Memory\n\n## Session Title\nCrash test\n", "Crash test")
    store.drop_covered(SID, end)
    store.record_commit(SID, archive, KEEP)


def count_steps(tmp_path: Path) -> int:
    root = tmp_path / "count"
    setup_session(root)
    calls = []
    originals = {name: getattr(fsutil, name) for name in STEP_FUNCTIONS}
    try:
        for name, fn in originals.items():
            setattr(fsutil, name, lambda *a, _fn=fn, _n=name, **k: (calls.append(_n), _fn(*a, **k))[1])
        archive_step(SessionStore(root))
    finally:
        for name, fn in originals.items():
            setattr(fsutil, name, fn)
    return len(calls)


def assert_consistent(root: Path, *, complete: bool) -> None:
    """No loss, no duplicate, meta matches files; `complete` → the archive step fully happened."""
    for store in (SessionStore(root), SessionStore(root, durable=False)):
        archives = store.list_archives(SID)
        archived = [m for a in archives for m in store.archive_messages(SID, a["archive_id"], strict=True)]
        live = store.live_messages(SID, strict=True)
        assert sorted(m["seq"] for m in archived + live) == list(range(1, TOTAL + 1))
        meta = store.meta(SID)
        assert meta["message_count"] == len(live) and meta["total_message_count"] == TOTAL
        assert meta["commit_count"] == len(archives)
        assert meta["pending_tokens"] == compute_pending_tokens(live, meta["keep_recent_count"])
        assert store.problems(SID) == []
        if complete:
            assert [m["seq"] for m in live] == list(range(TOTAL - KEEP + 1, TOTAL + 1))
            assert meta["last_archive"] == {"id": "archive_001", "end_seq": TOTAL - KEEP}
            assert meta["keep_recent_count"] == KEEP
            assert store.latest_overview(SID).startswith("# Working Memory")
            raw_live = (store.session_dir(SID) / "messages.jsonl").read_bytes().splitlines()
            assert len(raw_live) == KEEP  # GC done
            assert sorted(os.listdir(store.session_dir(SID) / "history")) == ["archive_001"]


def test_the_covered_range_of_the_setup(tmp_path):
    setup_session(tmp_path)
    assert choose_covered_range(SessionStore(tmp_path).live_messages(SID), KEEP) == (1, TOTAL - KEEP)


@pytest.fixture(scope="module")
def steps(tmp_path_factory) -> int:
    n = count_steps(tmp_path_factory.mktemp("steps"))
    assert n >= 9  # make_dirs, 4 files, rename, .done, GC rewrite, meta
    return n


def crash_after_step(setattr_, crash_after: int, crash) -> None:
    """Wrap every step function so that `crash()` runs right after step number `crash_after` returns."""
    done = {"steps": 0}

    def counting(real):
        def wrapped(*args, **kwargs):
            out = real(*args, **kwargs)
            done["steps"] += 1
            if done["steps"] == crash_after:
                crash()
            return out

        return wrapped

    for name in STEP_FUNCTIONS:
        setattr_(fsutil, name, counting(getattr(fsutil, name)))


def _raise() -> None:
    raise Crash("injected")


def test_crash_by_raising_after_each_step(tmp_path, steps, monkeypatch):
    for crash_after in range(1, steps + 1):
        root = tmp_path / f"raise{crash_after}"
        setup_session(root)
        store = SessionStore(root)
        with monkeypatch.context() as patch:
            crash_after_step(patch.setattr, crash_after, _raise)
            with pytest.raises(Crash):
                archive_step(store)
        assert_consistent(root, complete=False)
        archive_step(store)  # the same store object, whose cache saw the crash
        assert_consistent(root, complete=True)


CHILD = """
import os, sys
sys.path[:0] = [{tests!r}, {helpers!r}]
from workmem.state.files.store import SessionStore
import test_store_crash as t
t.crash_after_step(setattr, int(sys.argv[2]), lambda: os._exit(17))
t.archive_step(SessionStore(sys.argv[1]))
"""


@pytest.mark.slow
def test_crash_by_os_exit_after_each_step(tmp_path, steps):
    script = CHILD.format(tests=str(Path(__file__).resolve().parent), helpers=str(TESTS))
    roots = []
    for crash_after in range(1, steps + 1):
        root = tmp_path / f"exit{crash_after}"
        setup_session(root)
        roots.append(root)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root), str(i)], cwd=REPO,
                              stderr=subprocess.PIPE, text=True)
             for i, root in enumerate(roots, start=1)]
    for proc in procs:
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 17, err
    for root in roots:
        assert_consistent(root, complete=False)
        archive_step(SessionStore(root))
        assert_consistent(root, complete=True)


APPEND_CHILD = """
import os, sys
from workmem.state.files import store as store_module
from workmem.state.files.store import SessionStore
real_write = os.write
target = os.stat(os.path.join(sys.argv[1], "sessions", "crashy", "messages.jsonl")).st_ino
def half_write(fd, data):
    if os.fstat(fd).st_ino != target:
        return real_write(fd, data)
    real_write(fd, data[: len(data) - 7])
    os._exit(17)
store_module.os.write = half_write
SessionStore(sys.argv[1]).append("crashy", [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
"""


@pytest.mark.slow
def test_crash_in_the_middle_of_an_append(tmp_path):
    root = tmp_path / "append"
    setup_session(root)
    proc = subprocess.run([sys.executable, "-c", APPEND_CHILD, str(root)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 17, proc.stderr
    path = SessionStore(root).session_dir(SID) / "messages.jsonl"
    assert not path.read_bytes().endswith(b"\n")  # the crash left a torn line
    store = SessionStore(root)
    # a line is the unit of atomicity: the batch's complete first line is visible, the torn one is not
    assert [m["seq"] for m in store.live_messages(SID, strict=True)][-1] == TOTAL + 1
    assert store.append(SID, [{"role": "user", "content": "after"}])[0]["seq"] == TOTAL + 2
    assert path.read_bytes().endswith(b"\n")
    assert [m["seq"] for m in SessionStore(root).live_messages(SID, strict=True)] == list(range(1, TOTAL + 3))
