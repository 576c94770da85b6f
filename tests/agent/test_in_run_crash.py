"""A commit started inside an agent run, SIGKILLed mid-commit, then resumed with the run: nothing lost or twice.

`in_run_child.py` runs a single-task agent (`commit_mode="sync"`, the agent checkpointed in SQLite) whose first
in-run commit dies inside a node of the commit graph. A new process resumes the commit and then the agent's run
from its checkpoint. Afterwards every message of the run is stored exactly once, in order, archived or live,
and the run finished with its answer — on both backends.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from in_run_child import STEPS
from paths import TESTS
from pg_support import open_target

CHILD = str(TESTS / "in_run_child.py")


def _child(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CHILD, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("node", ["merge", "persist_mid"])
def test_an_in_run_commit_killed_midway_resumes_with_the_run(backend, tmp_path, node):
    root = tmp_path / "root"
    if backend.url is not None:
        Path(f"{root}.url").write_text(backend.url)
    killed = _child("run", str(root), node)
    assert killed.returncode == -signal.SIGKILL, f"not killed in {node}: {killed.stderr[-2000:]}"
    done = _child("resume", str(root))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["answer"] == "The report job is fixed." and out["resumed"] == ["completed"]

    storage = open_target(backend.url or str(root))
    try:
        sessions = storage.sessions
        archived = [m for a in sessions.list_archives("task")
                    for m in sessions.archive_messages("task", a["archive_id"])]
        live = sessions.live_messages("task")
        seqs = [m["seq"] for m in [*archived, *live]]
        total = 1 + 2 * STEPS + 1  # the task, each call and result, the answer
        assert seqs == list(range(1, total + 1)), "each message exactly once, in order"
        ids = [m["meta"]["lc_id"] for m in [*archived, *live]]
        assert len(set(ids)) == total
        assert sessions.meta("task")["commit_count"] >= 1
    finally:
        storage.close()
