"""SIGKILL at every write step of an append that stores a payload: nothing lost, no message without its payload.

A child process appends a tool result larger than `payload_bytes` to an existing session and kills itself
right before or right after one call of a file-system step (`state.files.fsutil`: directory creation, the
temp file's write, the rename, the directory fsync, the live append). Afterwards the session holds either
the whole batch with its payload complete or none of it, `check()` finds nothing, and a retry stores it once.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO, TESTS

from workmem.state.files.store import SessionStore

SID = "payload-crash"
STEPS = ("make_dirs", "_write_file", "fsync_dir", "atomic_write", "append_bytes")
BIG = "".join(f"2026-11-30 10:00:00 INFO line {i} of the build log\n" for i in range(4000)) + "FAILED: exit 2\n"
BATCH = [
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "build", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "build", "content": BIG},
    {"role": "assistant", "content": "The build failed with exit 2."},
]
CHILD = r"""
import json, sys
from kill_at import kill_at
from workmem.state.files import fsutil
from workmem.state.files.store import SessionStore
root, step, nth, when, durable = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
seen = kill_at(fsutil, step, nth, when)
SessionStore(root, durable=durable).append(SID, json.loads(sys.stdin.read()))
print("calls", seen[0])
"""


def run_child(root: Path, step: str, nth: int, when: str, durable: bool) -> subprocess.CompletedProcess:
    import json

    code = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nSID = {SID!r}\n" + CHILD
    return subprocess.run([sys.executable, "-c", code, str(root), step, str(nth), when, "1" if durable else "0"],
                          input=json.dumps(BATCH), capture_output=True, text=True, cwd=REPO, timeout=120)


def fresh(root: Path) -> None:
    SessionStore(root).append(SID, [{"role": "user", "content": "Build it."}])


def calls_of(tmp_path: Path, durable: bool, steps: tuple[str, ...]) -> dict[str, int]:
    """How many times the append calls each step (a run with no kill)."""
    out = {}
    for step in steps:
        root = tmp_path / f"count-{step}"
        fresh(root)
        done = run_child(root, step, 0, "never", durable)
        assert done.returncode == 0, done.stderr
        out[step] = int(done.stdout.split()[-1])
    return out


def assert_whole_or_nothing(root: Path) -> None:
    store = SessionStore(root)
    live = store.live_messages(SID, strict=True)
    assert [m["seq"] for m in live] in ([1], [1, 2, 3, 4]), "the batch is all there or not at all"
    assert store.check(SID) == []
    if len(live) == 1:
        store.append(SID, BATCH)  # the caller's retry
    live = store.live_messages(SID, strict=True)
    assert [m["seq"] for m in live] == [1, 2, 3, 4], "stored once"
    part = live[2]["parts"][0]
    assert part["content"] == BIG and part["sha256"] == hashlib.sha256(BIG.encode()).hexdigest()
    assert SessionStore(root).check(SID) == []


# Not durable, the payload's steps are the same calls (a payload is always fsynced): its whole writes and the append.
@pytest.mark.parametrize(("durable", "steps"), [(True, STEPS), (False, ("atomic_write", "append_bytes"))],
                         ids=["durable", "not-durable"])
def test_a_kill_at_every_write_step_of_a_payload_append_loses_nothing(tmp_path, durable, steps):
    calls = calls_of(tmp_path, durable, steps)
    assert calls["append_bytes"] == 1 and calls["atomic_write"] >= 2, calls  # the format marker and the payload
    cut = 0
    for step, n in calls.items():
        for nth in range(1, n + 1):
            for when in ("before", "after"):
                root = tmp_path / f"{step}-{nth}-{when}"
                fresh(root)
                killed = run_child(root, step, nth, when, durable)
                assert killed.returncode == -9, (step, nth, when, killed.stderr)
                assert_whole_or_nothing(root)
                cut += 1
    assert cut >= (14 if durable else 6)
