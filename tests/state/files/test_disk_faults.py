"""Full disks and read-only roots: reads keep working, writes fail typed, nothing is lost or doubled.

Tested for real on a small tmpfs (mounting needs root with CAP_SYS_ADMIN, as CI has; the test skips
with the reason otherwise) and, always, by fault injection: the store's write helpers raise ENOSPC or
EROFS at each step of an append and of a commit.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import assistant, user

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import StorageError
from workmem.state.files import fsutil

WRITE_STEPS = ("make_dirs", "write_file", "publish_dir", "atomic_write", "append_bytes")


def turns(start: int, count: int) -> list[dict]:
    return [m for i in range(start, start + count) for m in (user(f"note {i}: the Kestrel build"),
                                                             assistant(f"noted {i}"))]


def every_seq(engine: WorkingMemoryEngine, session: str = "s") -> list[int]:
    sessions = engine.storage.sessions
    archived = [m["seq"] for a in sessions.list_archives(session)
                for m in sessions.archive_messages(session, a["archive_id"])]
    return archived + [m["seq"] for m in sessions.live_messages(session)]


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs, unmounted afterwards; skipped where mounting is impossible."""
    mountpoint = tmp_path / "fs"
    mountpoint.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {done.stderr.strip()}")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


WRITE_IN_A_CHILD = """
import sys
from workmem import WorkingMemoryEngine
with WorkingMemoryEngine(sys.argv[1], durable=False) as engine:
    engine.add_messages("s", [{"role": "user", "content": f"note {i}: the Kestrel build"} for i in range(6)])
    engine.commit("s", keep_recent_count=2)
"""


def test_a_read_only_root_reads_on_and_refuses_writes_typed(small_fs):
    root = small_fs / "root"
    # written by another process, whose open files are gone before the remount
    subprocess.run([sys.executable, "-c", WRITE_IN_A_CHILD, str(root)], check=True, timeout=120)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert every_seq(engine) == list(range(1, 7))
        assert engine.assemble("s")["stats"]["summary_included"]
        assert engine.archive_search("s", "Kestrel")
        assert engine.archive_expand("s", "archive_001")["message_count"] == 4
        assert engine.check("s") == []
        with pytest.raises(StorageError) as caught:
            engine.add_messages("s", turns(10, 1))
        assert caught.value.errno == errno.EROFS
        with pytest.raises(StorageError):
            engine.commit("s", keep_recent_count=0)


APPEND_IN_A_CHILD = """
import sys
from workmem import WorkingMemoryEngine
with WorkingMemoryEngine(sys.argv[1], durable=False) as engine:
    engine.add_messages("s", [{"role": "user", "content": "note: the Kestrel build"}])
"""


def test_a_read_only_root_is_searched_and_checked_before_its_first_commit(small_fs):
    root = small_fs / "root"
    subprocess.run([sys.executable, "-c", APPEND_IN_A_CHILD, str(root)], check=True, timeout=120)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.archive_search("s", "Kestrel") == [], "nothing archived yet: no hit, and no index made"
        assert engine.check("s") == []
        assert every_seq(engine) == [1]
    assert not (root / "index.sqlite").exists()


def test_a_full_disk_fails_writes_typed_and_loses_nothing(small_fs):
    root = small_fs / "root"
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", turns(0, 2))
        engine.commit("s", keep_recent_count=0)  # the databases exist before the disk fills up
        engine.add_messages("s", turns(2, 18))
        filler = small_fs / "filler"
        free = os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
        filler.write_bytes(b"\0" * max(0, free - 4096))
        before = (root / "sessions/s/messages.jsonl").read_bytes()
        with pytest.raises(StorageError) as caught:
            engine.add_messages("s", turns(100, 200))
        assert caught.value.errno == errno.ENOSPC
        assert (root / "sessions/s/messages.jsonl").read_bytes() == before, "nothing half-written"
        try:
            assert engine.commit("s", keep_recent_count=0)["status"] == "failed"
        except StorageError as exc:  # the disk was too full to take the lease at all: a typed error too
            assert exc.errno == errno.ENOSPC
        assert engine.storage.tasks.lease_holder("s") is None, "the lease is released at once"
        assert every_seq(engine) == list(range(1, 41)), "reads work, nothing lost"
        filler.unlink()
        engine.resume_all()
        assert engine.commit("s", keep_recent_count=0)["status"] in ("completed", "skipped")
        assert every_seq(engine) == list(range(1, 41))
        assert engine.session_info("s")["message_count"] == 0


def injecting(monkeypatch, failing_call: int, err: int) -> list[str]:
    """Make the `failing_call`-th call (1-based) of any store write step raise OSError(err); returns the calls."""
    calls: list[str] = []
    for name in WRITE_STEPS:
        real = getattr(fsutil, name)

        def step(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            if len(calls) == failing_call:
                raise OSError(err, f"injected in {_name}")
            return _real(*args, **kwargs)

        monkeypatch.setattr(fsutil, name, step)
    return calls


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_an_append_failing_at_any_write_step_stores_nothing_or_everything_once(root, monkeypatch, err):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", turns(0, 1))
    for step in range(1, 4):
        with monkeypatch.context() as patch, WorkingMemoryEngine(root, durable=False) as engine:
            injecting(patch, step, err)
            try:
                engine.add_messages("s", turns(step * 10, 1))
                stored = True
            except StorageError as exc:
                assert exc.errno == err
                stored = False
        with WorkingMemoryEngine(root, durable=False) as engine:
            if not stored:
                engine.add_messages("s", turns(step * 10, 1))  # the caller's retry
            texts = [m["parts"][0]["text"] for m in engine.storage.sessions.live_messages("s")]
            assert texts.count(f"note {step * 10}: the Kestrel build") == 1


def count_commit_writes(root: Path, monkeypatch) -> int:
    """How many store write steps one commit makes (measured on a copy of the situation)."""
    with monkeypatch.context() as patch, WorkingMemoryEngine(root, durable=False) as engine:
        calls = injecting(patch, 10**9, errno.ENOSPC)
        engine.add_messages("probe", turns(0, 3))
        calls.clear()
        assert engine.commit("probe", keep_recent_count=2)["status"] == "completed"
        return len(calls)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_a_commit_failing_at_any_write_step_releases_its_lease_and_resumes(tmp_path, monkeypatch, err):
    steps = count_commit_writes(tmp_path / "probe-root", monkeypatch)
    assert steps >= 6
    for step in range(1, steps + 1):
        root = tmp_path / f"root-{step}"
        with WorkingMemoryEngine(root, durable=False) as engine:
            engine.add_messages("s", turns(0, 3))
            with monkeypatch.context() as patch:
                injecting(patch, step, err)
                result = engine.commit("s", keep_recent_count=2)
            assert engine.storage.tasks.lease_holder("s") is None, f"step {step}: lease still held"
            if result["status"] != "completed":
                assert result["status"] == "failed", result
                assert engine.task(result["task_id"])["status"] == "failed"
                assert [r["status"] for r in engine.resume_all()] == ["completed"], f"step {step}"
            assert every_seq(engine) == [1, 2, 3, 4, 5, 6], f"step {step}"
            assert engine.session_info("s")["last_archive"] == {"id": "archive_001", "end_seq": 4}
